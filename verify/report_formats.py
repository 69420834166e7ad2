"""A report rendered in one of its output formats and written atomically: the one place that knows every renderer
(verify.report holds the model, Markdown and JUnit; verify.report_html the HTML page)."""

from __future__ import annotations

from pathlib import Path

FORMATS = ("html", "md", "json", "junit")


def render(rep: dict, fmt: str) -> str:
    import json

    from exporter.errors import UnknownNameError

    if fmt == "json":
        return json.dumps(rep, indent=1, sort_keys=True) + "\n"
    if fmt in ("md", "junit"):
        from verify.report import render_junit, render_markdown

        return render_markdown(rep) if fmt == "md" else render_junit(rep)
    if fmt == "html":
        from verify.report_html import render_html

        return render_html(rep)
    raise UnknownNameError("report format", fmt, list(FORMATS))


def write(text: str, output: Path) -> None:
    from exporter.atomic import write_text_atomic

    write_text_atomic(output, text)

"""Commands that read bundles and records: audit, report."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from exporter.cli.app import app
from exporter.cli.options import JSON_OPT, AUDIT_EXIT, PUBLIC_KEY_OPT, POLICY_OPT, public_key_or_dev
from exporter.cli.render import err_console, out_console, print_json


@app.command("audit")
def audit_cmd(
    paths: list[Path] = typer.Argument(..., help="Bundle directories, or directories to search for bundles."),
    public_key: Optional[Path] = PUBLIC_KEY_OPT,
    policy_file: Optional[Path] = POLICY_OPT,
    against: Optional[Path] = typer.Option(None, "--against", help="An older build of the same cell: also print what changed (versions, digests, state layout, metric deltas)."),
    as_json: bool = JSON_OPT,
):
    """Audit every bundle under PATHS: signature, streamed file digests, schema, declared pins, plan,
    placement, parity against the recipe's thresholds, checkpoint pin. Torch-free.

    Exit 0: every bundle passes; 7: at least one fails (each failing bundle and check is named);
    2: bad arguments or policy file.
    """
    from manifests.audit import audit_paths, load_policy

    policy = load_policy(policy_file)
    audits = audit_paths(paths, public_key_or_dev(public_key), policy)
    diff = None
    if against is not None:
        from manifests.compare import compare, render_text

        if len(audits) != 1:
            from exporter.errors import UsageError

            raise UsageError(f"--against compares one bundle, but {len(audits)} were found under {', '.join(map(str, paths))}", "pass one bundle directory")
        diff = compare(against, audits[0].path)
    failing = [a for a in audits if not a.ok]
    if as_json:
        print_json({"ok": not failing, "policy": policy.to_json(), "bundles": [a.to_json() for a in audits],
                     "failing": [str(a.path) for a in failing], **({"compare": diff} if diff else {})})
    else:
        from rich.markup import escape

        con = out_console()
        for a in audits:
            con.print(("[green]✓[/green] " if a.ok else "[red]✗[/red] ") + escape(str(a.path)), highlight=False)
            for c in a.checks:
                if c.ok and c.finding:
                    con.print(f"    [yellow]note[/yellow] {c.id}: {escape(c.message)}", highlight=False)
                elif c.ok:
                    con.print(f"    [green]pass[/green] {c.id}: {escape(c.message)}", highlight=False)
                else:
                    con.print(f"    [red]FAIL[/red] {c.id}: {escape(c.message)}\n         fix: {escape(c.fix)}", highlight=False)
        con.print(f"{len(audits)} bundle(s) audited under policy {policy.name!r}: "
                  + (f"[red]{len(failing)} failing[/red]: " + ", ".join(f"{a.path} ({', '.join(c.id for c in a.failing())})" for a in failing)
                     if failing else "[green]all pass[/green]"), highlight=False)
        if diff:
            sys.stdout.write(render_text(diff))
    if failing:
        raise typer.Exit(AUDIT_EXIT)


@app.command("report")
def report_cmd(
    paths: list[Path] = typer.Argument(..., help="Bundle directories, or directories to search for bundles."),
    render_as: str = typer.Option("html", "--as", help="How to render it: html | md | json | junit."),
    output: Optional[Path] = typer.Option(None, "--output", help="Write the report to this file instead of stdout."),
    public_key: Optional[Path] = PUBLIC_KEY_OPT,
    policy_file: Optional[Path] = POLICY_OPT,
    strict: bool = typer.Option(False, "--strict", help="Exit 7 if any bundle fails its audit (the report is written first)."),
):
    """Parity and audit report per bundle and as an index over all of them (HTML with plots, Markdown
    for a CI job summary, JSON, or JUnit XML with one test case per check and per threshold)."""
    from manifests.audit import audit_paths, load_policy
    from verify.report import build_report
    from verify.report_formats import FORMATS, render, write

    if render_as not in FORMATS:
        from exporter.errors import UnknownNameError

        raise UnknownNameError("rendering (--as)", render_as, list(FORMATS))
    policy = load_policy(policy_file)
    rep = build_report(audit_paths(paths, public_key_or_dev(public_key), policy), policy)
    text = render(rep, render_as)
    if output:
        write(text, output)
        err_console().print(f"wrote {output} ({len(rep['bundles'])} bundle(s), {len(rep['summary']['failing'])} failing)")
    else:
        sys.stdout.write(text)
    if strict and not rep["ok"]:
        raise typer.Exit(AUDIT_EXIT)

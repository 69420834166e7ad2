"""Commands that plan without building: plan, matrix."""

from __future__ import annotations

import sys
import json
from pathlib import Path
from typing import Optional

import typer

from exporter.cli.app import app
from exporter.cli.options import DEFAULT_OUT, JSON_OPT, CONTEXT_OPT, RAM_OPT, FORMAT_OPT, MAX_MEMORY_OPT, SHARE_OPT, public_key_or_dev
from exporter.cli.render import err_console, print_json, print_plan, print_groups


@app.command("plan")
def plan_cmd(
    name: str = typer.Argument(..., help="Recipe name (family recipes plan even before they can be built)."),
    target: str = typer.Option(..., "--target", "-t", help="Target name or alias."),
    precision: Optional[str] = typer.Option(None, "--precision", "-p", help="Precision to plan (default: the recipe's first for the target)."),
    context: Optional[int] = CONTEXT_OPT,
    ram: Optional[float] = RAM_OPT,
    fmt: Optional[str] = FORMAT_OPT,
    max_memory: Optional[float] = MAX_MEMORY_OPT,
    share: bool = SHARE_OPT,
    as_json: bool = JSON_OPT,
):
    """Print the explicit execution plan (artifacts, parts, memory budget, the build's estimated peak) or its rejection.

    Exit 0: admitted and buildable here; 4: rejected (reason code); 6: admitted, but this
    host lacks a prerequisite (listed). Nothing is written; `edge-export recipe` records.
    """
    from exporter.build_memory import budget_for
    from exporter.plan import make_plan
    from exporter.targets import get_target
    from recipes import get_recipe

    tgt = get_target(target)
    if ram is not None:
        tgt = tgt.with_ram(ram)
    recipe = get_recipe(name)
    plan = make_plan(recipe, tgt, precision, context, fmt, requested_target=target, budget=budget_for(max_memory), share_weights=share)
    groups = None
    if recipe.cost.groups:
        from exporter.plan import make_group_plans

        groups = make_group_plans(recipe, tgt, precision, context, fmt, requested_target=target, share_weights=share)
    if as_json:
        print_json({**plan.to_json(), **(groups or {})})
    else:
        print_plan(plan)
        if groups:
            print_groups(groups)
    if plan.rejection:
        raise typer.Exit(4)
    if plan.missing:
        raise typer.Exit(6)


@app.command("matrix")
def matrix_cmd(
    out: Path = typer.Option(DEFAULT_OUT, "--out", "-o", help="Artifacts root whose records and bundles are read."),
    render_as: str = typer.Option("md", "--as", help="How to render it: md | json | html."),
    output: Optional[Path] = typer.Option(None, "--output", help="Write the rendering to this file instead of stdout."),
    public_key: Optional[Path] = typer.Option(None, "--public-key", help="Signer's public key for re-checking bundles; default: the local development key."),
):
    """Render the 60-cell qualification matrix (5 families x 12 routes) from what is on disk."""
    from verify.matrix import build_matrix, render_html, render_markdown

    renderers = {"md": render_markdown, "html": render_html, "json": lambda m: json.dumps(m, indent=2, sort_keys=True) + "\n"}
    if render_as not in renderers:
        from exporter.errors import UnknownNameError

        raise UnknownNameError("rendering (--as)", render_as, sorted(renderers))
    text = renderers[render_as](build_matrix(out, public_key_or_dev(public_key)))
    if output:
        from exporter.atomic import write_text_atomic

        write_text_atomic(output, text)
        err_console().print(f"wrote {output}")
    else:
        sys.stdout.write(text)

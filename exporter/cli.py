"""The `edge-export` command line (also `python -m exporter`).

Heavy modules load inside commands, so `edge-export --help` starts instantly.
Exit codes are those of exporter.errors (0 ok, 2 usage, 3 parity, 4 rejected,
5 integrity, 6 missing prerequisite).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Optional

import typer

from exporter.errors import EdgeExportError

app = typer.Typer(
    name="edge-export",
    help="Pinned checkpoints to quantized, shape-bucketed, parity-verified and signed edge artifacts.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
targets_app = typer.Typer(help="The target registry: device profiles keyed by capability.", invoke_without_command=True)
app.add_typer(targets_app, name="targets")

DEFAULT_OUT = Path("artifacts")
JSON_OPT = typer.Option(False, "--json", help="Machine-readable JSON on stdout.")


def _err_console():
    from rich.console import Console

    return Console(stderr=True)


def _print_json(obj) -> None:
    sys.stdout.write(json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


class RichReporter:
    """Shows each pipeline stage as a spinner while it runs and a line when it ends."""

    def __init__(self, quiet: bool = False):
        self.console = _err_console()
        self.quiet = quiet

    @contextlib.contextmanager
    def stage(self, name: str, detail: str = ""):
        t = time.perf_counter()
        label = f"[bold]{name}[/bold] {detail}".strip()
        if self.quiet:
            yield
            return
        with self.console.status(label, spinner="dots"):
            yield
        self.console.print(f"[green]✓[/green] {label} [dim]({time.perf_counter() - t:.1f}s)[/dim]")

    def note(self, message: str) -> None:
        if not self.quiet:
            self.console.print(message)


@app.command("recipe")
def recipe_cmd(
    name: str = typer.Argument(..., help="Recipe name (see `edge-export recipes`)."),
    target: str = typer.Option(..., "--target", "-t", help="Target name or alias (see `edge-export targets`)."),
    precision: Optional[str] = typer.Option(None, "--precision", "-p", help="Build only this precision (default: every precision the recipe defines for the target)."),
    out: Path = typer.Option(DEFAULT_OUT, "--out", "-o", help="Output root; bundles go to OUT/RECIPE/TARGET/PRECISION."),
    key: Optional[Path] = typer.Option(None, "--key", help="EC private key (PEM) to sign with; default: a local development key, created on first use."),
    checkpoint: Optional[Path] = typer.Option(None, "--checkpoint", help="Use this checkpoint directory instead of the recipe's source (the pin is still checked)."),
    allow_unpinned: bool = typer.Option(False, "--allow-unpinned", help="Build even if checkpoint digests differ from the pin; the manifest records it."),
    cache: Optional[Path] = typer.Option(None, "--cache", help="Stage cache directory (default OUT/.cache)."),
    as_json: bool = JSON_OPT,
):
    """Build, verify and sign the bundles of recipe NAME for one target."""
    from exporter.pipeline import build

    reporter = RichReporter(quiet=as_json)
    t = time.perf_counter()
    results = build(name, target, precision, out_root=out, key=key, checkpoint=checkpoint,
                    allow_unpinned=allow_unpinned, cache_root=cache, reporter=reporter)
    failed = [r for r in results if r.status == "parity-failed"]
    if as_json:
        _print_json({"results": [r.to_json() for r in results], "wall_s": round(time.perf_counter() - t, 2)})
    else:
        con = _err_console()
        for r in results:
            if r.status == "parity-failed":
                f = r.parity["first_failure"]
                con.print(f"[red]✗ {r.recipe}/{r.target}/{r.precision}: parity FAILED[/red] at stage {f['stage']}, "
                          f"component {f['component']}, {f['output']} {f['metric']} = {f['value']:.4g} (threshold {f['threshold']}); "
                          f"nothing published; report: {r.bundle / 'parity.md'}")
            else:
                con.print(f"[green]✓ {r.recipe}/{r.target}/{r.precision}[/green] {r.status}: {r.bundle}")
    if failed:
        raise typer.Exit(3)


@app.command("verify")
def verify_cmd(
    bundle: Path = typer.Argument(..., help="Bundle directory (holds manifest.json and model.sig)."),
    public_key: Optional[Path] = typer.Option(None, "--public-key", help="Signer's public key (PEM); default: the local development key."),
    target: Optional[str] = typer.Option(None, "--target", "-t", help="Target the runtime is; default: the bundle's own target."),
    open_sessions: bool = typer.Option(False, "--open", help="Also open every component through the gate on its execution provider."),
    as_json: bool = JSON_OPT,
):
    """Check a bundle as the load gate does: signature, digests, target, parity verdict."""
    from manifests import manifest as mf
    from manifests.signing import dev_key
    from verify import gate

    key = public_key or dev_key().public
    tgt = target or mf.load(bundle)["bundle"]["target"]
    opened = gate.check_bundle(bundle, key, tgt)
    if open_sessions:
        for c in opened.manifest["components"]:
            gate.open_session(bundle, key, tgt, c["name"])
    p = opened.manifest["parity"]
    info = {"bundle": str(bundle), "target": tgt, "verdict": p["verdict"], "signature": "valid", "files": len(opened.manifest["files"]),
            "stages": [{k: s[k] for k in ("stage", "verdict", "provider")} for s in p["stages"]], "sessions_opened": open_sessions}
    if as_json:
        _print_json(info)
    else:
        _err_console().print(f"[green]✓[/green] {bundle}: signature valid, {info['files']} files match, target {tgt}, parity {p['verdict']}"
                             + (" , every component opened on its execution provider" if open_sessions else ""))


@app.command("recipes")
def recipes_cmd(as_json: bool = JSON_OPT):
    """List the recipes."""
    from recipes import get_recipe, recipe_names

    rows = []
    for n in recipe_names():
        r = get_recipe(n)
        rows.append({"name": n, "family": r.family, "architecture": r.architecture, "targets": {t: list(p) for t, p in r.precisions.items()}, "description": r.description})
    if as_json:
        _print_json(rows)
        return
    from rich.table import Table

    t = Table("recipe", "architecture", "targets (precisions)", "description")
    for r in rows:
        t.add_row(r["name"], r["architecture"], ", ".join(f"{k} ({'/'.join(v)})" for k, v in r["targets"].items()), r["description"])
    _err_console().print(t)


@targets_app.callback()
def targets_cmd(ctx: typer.Context, as_json: bool = JSON_OPT):
    """List the targets (`targets show T` for one in full)."""
    if ctx.invoked_subcommand:
        return
    from exporter.targets import all_targets

    rows = [t.to_json() for t in all_targets()]
    if as_json:
        _print_json(rows)
        return
    from rich.table import Table

    t = Table("target", "aliases", "accelerator", "execution provider", "precisions", "RAM GiB")
    for r in rows:
        a = r["accelerator"]
        acc = a["kind"] + (f" v{a['htp_arch']} (soc_model {a['soc_model']})" if a["htp_arch"] else "")
        t.add_row(r["name"], ", ".join(r["aliases"]), acc, r["execution_provider"], ", ".join(r["precisions"]), f"{r['ram_bytes'] / 2**30:g}")
    _err_console().print(t)


@targets_app.command("show")
def targets_show(name: str = typer.Argument(..., help="Target name or alias."), as_json: bool = JSON_OPT):
    """Print one target's full profile, with the source of each fact."""
    from exporter.targets import get_target

    data = get_target(name).to_json()
    if as_json:
        _print_json(data)
    else:
        from rich.pretty import Pretty

        _err_console().print(Pretty(data))


@app.command("plan")
def plan_cmd(
    name: str = typer.Argument(..., help="Recipe name."),
    target: str = typer.Option(..., "--target", "-t", help="Target name or alias."),
    precision: Optional[str] = typer.Option(None, "--precision", "-p", help="Precision to plan (default: the recipe's first for the target)."),
    as_json: bool = JSON_OPT,
):
    """Print the execution plan for a recipe on a target, or its recorded rejection."""
    from exporter.plan import make_plan
    from exporter.targets import get_target
    from recipes import get_recipe

    plan = make_plan(get_recipe(name), get_target(target), precision)
    if as_json:
        _print_json(plan.to_json())
    else:
        con = _err_console()
        if plan.rejection:
            r = plan.rejection
            from rich.markup import escape

            con.print(f"[red]rejected[/red] {escape(f'[{r.code}] {r.reason}')}\n  fix: {escape(r.fix)}")
        else:
            for a in plan.artifacts:
                con.print(f"{a.graph_name}: {a.format} {a.precision}, {a.weight_bytes} weight bytes")
            con.print({k: v for k, v in plan.memory.items()})
    if plan.rejection:
        raise typer.Exit(4)


def main() -> None:
    import click

    as_json = "--json" in sys.argv
    if as_json:
        # native libraries (QNN) print to fd 1; keep stdout for the JSON document alone
        real = os.dup(1)
        os.dup2(2, 1)
        sys.stdout = os.fdopen(real, "w")
    try:
        rc = app(standalone_mode=False)
    except EdgeExportError as e:
        if as_json:
            _print_json({"error": e.message, "fix": e.hint, "exit_code": e.exit_code, "kind": type(e).__name__})
        else:
            from rich.markup import escape

            _err_console().print(f"[red]error:[/red] {escape(e.message)}" + (f"\n  [bold]fix:[/bold] {escape(e.hint)}" if e.hint else ""), highlight=False)
        sys.exit(e.exit_code)
    except click.exceptions.Exit as e:
        sys.exit(e.exit_code)
    except click.ClickException as e:
        e.show()
        sys.exit(2)
    except click.exceptions.Abort:
        sys.exit(130)
    except KeyboardInterrupt:
        _err_console().print("interrupted: finished stages stay cached; rerun to resume")
        sys.exit(130)
    sys.exit(rc if isinstance(rc, int) else 0)

"""The `edge-export` command line (also `python -m exporter`).

Heavy modules load inside commands, so `edge-export --help` starts instantly.
Exit codes are those of exporter.errors (0 ok, 2 usage, 3 parity, 4 rejected,
5 integrity, 6 missing prerequisite), 7 for an audit with failing bundles, 8 for an AI Hub job
that outlived its time limit (rerun to resume).
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
CONTEXT_OPT = typer.Option(None, "--context", "-c", help="Largest context bucket to build (must be one of the recipe's buckets; never shortened silently).")
RAM_OPT = typer.Option(None, "--ram", help="Plan for this RAM SKU of the target, in GiB (one the registry lists).")
FORMAT_OPT = typer.Option(None, "--format", "-f", help="Artifact format (default: the target's first).")


def _err_console():
    """Progress, notes and errors: standard error (unwrapped when it is not a terminal, so a log keeps whole lines)."""
    from rich.console import Console

    tty = sys.stderr.isatty()
    return Console(stderr=True, width=None if tty else 100_000, soft_wrap=not tty)


def _out_console():
    """A command's result (tables, plans, verdicts): standard output. Piped or redirected, nothing is cut to a
    terminal's width: the full text of every cell is written (`edge-export recipes | grep spark` finds the row)."""
    from rich.console import Console

    tty = sys.stdout.isatty()
    return Console(file=sys.stdout, width=None if tty else 100_000, soft_wrap=not tty)


def Table(*headers, **kw):
    """A rich table whose cells fold long words onto the next line instead of cutting them with an ellipsis."""
    from rich.table import Table as RichTable

    t = RichTable(**kw)
    for h in headers:
        t.add_column(h, overflow="fold")
    return t


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
        self.console.print(message, highlight=False)  # stderr, also under --json: what a run waits for must be visible


@app.command("recipe")
def recipe_cmd(
    name: str = typer.Argument(..., help="Recipe name (see `edge-export recipes`); FAMILY.GROUP builds one group of a multi-component recipe (minicpm-o.vision)."),
    target: str = typer.Option(..., "--target", "-t", help="Target name or alias (see `edge-export targets`)."),
    precision: Optional[str] = typer.Option(None, "--precision", "-p", help="Build only this precision (default: every precision the recipe defines for the target)."),
    out: Path = typer.Option(DEFAULT_OUT, "--out", "-o", help="Output root; bundles go to OUT/RECIPE/TARGET/PRECISION."),
    key: Optional[Path] = typer.Option(None, "--key", help="EC private key (PEM) to sign with; default: a local development key, created on first use."),
    checkpoint: Optional[Path] = typer.Option(None, "--checkpoint", help="Use this checkpoint directory instead of the recipe's source (the pin is still checked)."),
    allow_unpinned: bool = typer.Option(False, "--allow-unpinned", help="Build even if checkpoint digests differ from the pin; the manifest records it."),
    pin: Optional[Path] = typer.Option(None, "--pin", help="A reviewed pin file (`edge-export pin`) the --checkpoint must match file by file; the manifest records its digest."),
    cache: Optional[Path] = typer.Option(None, "--cache", help="Stage cache directory (default OUT/.cache)."),
    context: Optional[int] = CONTEXT_OPT,
    ram: Optional[float] = RAM_OPT,
    fmt: Optional[str] = FORMAT_OPT,
    as_json: bool = JSON_OPT,
):
    """Plan, then build, verify and sign the bundles of recipe NAME for one target.

    The plan runs first: a rejection or a missing prerequisite is printed, recorded as
    OUT/RECIPE/TARGET/PRECISION.record.json (where `edge-export matrix` reads it) and
    exits 4 or 6 before any heavy work. Every outcome, success included, is recorded.
    A multi-component recipe (minicpm-o) plans and builds each component group as its
    own bundle, OUT/RECIPE.GROUP/TARGET/PRECISION, recording the groups it cannot build;
    it exits 0 if at least one group was built and none failed.
    """
    from rich.markup import escape

    from exporter.pipeline import build

    reporter = RichReporter(quiet=as_json)
    t = time.perf_counter()
    results = build(name, target, precision, ram_gib=ram, out_root=out, key=key, checkpoint=checkpoint, pin=pin,
                    allow_unpinned=allow_unpinned, cache_root=cache, reporter=reporter, context=context, fmt=fmt,
                    command=" ".join(["edge-export", *sys.argv[1:]]))
    failed = [r for r in results if r.status in ("parity-failed", "failed")]
    built = [r for r in results if r.status in ("published", "up-to-date")]
    if as_json:
        _print_json({"results": [r.to_json() for r in results], "wall_s": round(time.perf_counter() - t, 2)})
    else:
        con = _out_console()
        for r in results:
            if r.status == "parity-failed":
                f = r.parity["first_failure"]
                con.print(f"[red]✗ {r.recipe}/{r.target}/{r.precision}: parity FAILED[/red] at stage {f['stage']}, "
                          f"component {f['component']}, {f['output']} {f['metric']} = {f['value']:.4g} (threshold {f['threshold']}); "
                          f"nothing published; report: {r.bundle / 'parity.md'}")
            elif r.status == "failed":
                con.print(f"[red]✗ {r.recipe}/{r.target}/{r.precision}: build failed[/red]: {escape(r.parity.get('reason', ''))}; recorded in {r.bundle}")
            elif r.status in ("rejected", "missing-prerequisite"):
                con.print(f"[yellow]– {r.recipe}/{r.target}/{r.precision}: {r.status}[/yellow]: {escape(r.parity.get('reason', ''))}")
            else:
                con.print(f"[green]✓ {r.recipe}/{r.target}/{r.precision}[/green] {r.status}: {r.bundle}")
    if failed:
        raise typer.Exit(3)
    if not built:  # a multi-component recipe of which no group could be built
        raise typer.Exit(4 if any(r.status == "rejected" for r in results) else 6)


@app.command("verify")
def verify_cmd(
    bundle: Path = typer.Argument(..., help="Bundle directory (holds manifest.json and model.sig)."),
    public_key: Optional[Path] = typer.Option(None, "--public-key", help="Signer's public key (PEM); default: the local development key."),
    target: Optional[str] = typer.Option(None, "--target", "-t", help="Target the runtime is; default: the bundle's own target."),
    open_sessions: bool = typer.Option(False, "--open", help="Also open every component through the gate on its execution provider."),
    as_json: bool = JSON_OPT,
):
    """Check a bundle as the load gate does: signature, digests, target, parity verdict."""
    from verify import gate

    key = _public_key_or_dev(public_key)  # verifying never creates key material
    if key is None:
        from exporter.errors import UsageError

        raise UsageError("no public key to verify the signature with: --public-key was not given and no local development key exists",
                         "pass --public-key SIGNER.pub.pem (the key the bundle names in manifest.json signing.public_key_sha256)")
    opened = gate.check_bundle(bundle, key, target)  # the bundle's own target unless one is given; read after its signature
    tgt = opened.manifest["bundle"]["target"] if target is None else target
    if open_sessions:
        for c in opened.manifest["components"]:
            gate.open_session(bundle, key, tgt, c["name"])
    p = opened.manifest["parity"]
    info = {"bundle": str(bundle), "target": tgt, "verdict": p["verdict"], "signature": "valid", "files": len(opened.manifest["files"]),
            "stages": [{k: s[k] for k in ("stage", "verdict", "provider")} for s in p["stages"]], "sessions_opened": open_sessions,
            "verification": opened.manifest.get("verification", {})}
    if as_json:
        _print_json(info)
    else:
        _out_console().print(f"[green]✓[/green] {bundle}: signature valid, {info['files']} files match, target {tgt}, parity {p['verdict']}"
                             + (" , every component opened on its execution provider" if open_sessions else ""))
        if info["verification"].get("emulated"):
            from rich.markup import escape

            _out_console().print(f"  [yellow]placement unqualified:[/yellow] {escape(info['verification']['note'])}")


@app.command("recipes")
def recipes_cmd(as_json: bool = JSON_OPT):
    """List the recipes."""
    from recipes import get_recipe, recipe_names

    rows = []
    for n in recipe_names():
        r = get_recipe(n)
        rows.append({"name": n, "family": r.family, "architecture": r.architecture, "targets": {t: list(p) for t, p in r.precisions.items()},
                     "description": r.description, "buildable": r.blocked is None, "blocked": r.blocked,
                     "needs_checkpoint": r.blocked is not None and r.has_exporter, "pinnable": r.checkpoint_layout is not None,
                     **({"groups": [f"{n}.{g}" for g, x in r.group_recipes().items() if x is not None]} if r.group_recipes else {})})
    if as_json:
        _print_json(rows)
        return

    t = Table("recipe", "architecture", "precisions by target / kind", "status", "description")
    for r in rows:
        t.add_row(r["name"], r["architecture"], ", ".join(f"{k} ({'/'.join(v)})" for k, v in r["targets"].items()),
                  "buildable" if r["buildable"] else "buildable with --checkpoint DIR" if r["needs_checkpoint"] else f"plan-only: {r['blocked']}",
                  r["description"] + (f" (groups: {', '.join(r['groups'])})" if r.get("groups") else ""))
    _out_console().print(t)


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

    t = Table("target", "aliases", "os / abi", "accelerator", "execution provider", "formats", "precisions", "memory GiB")
    for r in rows:
        a = r["accelerator"]
        acc = a["kind"] + (f" v{a['htp_arch']}" + (f" (soc_model {a['soc_model']})" if a["soc_model"] else "") if a["htp_arch"] else "")
        mem = f"{r['ram_bytes'] / 2**30:g} RAM" + (f" + {r['vram_bytes'] / 2**30:g} VRAM" if r["vram_bytes"] else "")
        t.add_row(r["name"], ", ".join(r["aliases"]), f"{r['os']} / {r['abi']}", acc, r["execution_provider"],
                  ", ".join(r["formats"]), ", ".join(r["precisions"]), mem)
    _out_console().print(t)


@targets_app.command("show")
def targets_show(name: str = typer.Argument(..., help="Target name or alias."), as_json: bool = JSON_OPT):
    """Print one target's full profile, with the source of each fact."""
    from exporter.targets import get_target

    data = get_target(name).to_json()
    if as_json:
        _print_json(data)
        return
    from rich.markup import escape

    src = data["sources"]
    a = data["accelerator"]
    rows = [
        ("name", data["name"], ""), ("family", data["family"], ""), ("aliases", ", ".join(data["aliases"]), ""),
        ("description", data["description"], ""), ("soc", data["soc"], ""), ("os / abi", f"{data['os']} / {data['abi']}", src.get("abi", "")),
        ("execution provider", data["execution_provider"], ""), ("formats", ", ".join(data["formats"]), ""),
        ("precisions", ", ".join(data["precisions"]), ""),
    ]
    for k in ("kind", "htp_arch", "soc_model", "float_support", "act16", "int4_weights", "weight_sharing", "per_graph_limit_bytes"):
        v = a[k]
        if k == "per_graph_limit_bytes" and v:
            v = f"{v / 2**30:g} GiB"
        rows.append((f"accelerator.{k}", str(v), src.get(k.replace("_bytes", "_gib"), src.get(k, ""))))
    gib = lambda b: f"{b / 2**30:g} GiB" if b is not None else "shared (no separate VRAM)"
    rows += [
        ("RAM", gib(data["ram_bytes"]) + f"  (SKUs: {', '.join(f'{b / 2**30:g}' for b in data['ram_skus_bytes'])})", src.get("ram_gib", "")),
        ("VRAM", gib(data["vram_bytes"]), src.get("vram_gib", "")),
        ("OS reserved", gib(data["os_reserved_bytes"]), src.get("os_reserved_gib", "")),
        ("runtime overhead", f"{data['runtime_overhead_bytes'] / 2**20:g} MiB", src.get("runtime_overhead_mib", "")),
        ("plan budget", gib(data["budget_bytes"]), "VRAM if separate, else RAM less OS reserved"),
        ("AI Hub device", str(data["hub_device"]), src.get("hub_device", "")),
        ("AI Hub chipset", str(data["hub_chipset"]), "resolve devices by chipset attribute"),
        ("requires on the build host", ", ".join(data["requires"]), ""),
    ]
    t = Table("field", "value", "source", title=f"target {data['name']} (exporter/data/targets.toml)")
    for f, v, so in rows:
        t.add_row(f, escape(v), escape(so))
    _out_console().print(t)


@app.command("plan")
def plan_cmd(
    name: str = typer.Argument(..., help="Recipe name (family recipes plan even before they can be built)."),
    target: str = typer.Option(..., "--target", "-t", help="Target name or alias."),
    precision: Optional[str] = typer.Option(None, "--precision", "-p", help="Precision to plan (default: the recipe's first for the target)."),
    context: Optional[int] = CONTEXT_OPT,
    ram: Optional[float] = RAM_OPT,
    fmt: Optional[str] = FORMAT_OPT,
    as_json: bool = JSON_OPT,
):
    """Print the explicit execution plan (artifacts, parts, memory budget) or its rejection.

    Exit 0: admitted and buildable here; 4: rejected (reason code); 6: admitted, but this
    host lacks a prerequisite (listed). Nothing is written; `edge-export recipe` records.
    """
    from exporter.plan import make_plan
    from exporter.targets import get_target
    from recipes import get_recipe

    tgt = get_target(target)
    if ram is not None:
        tgt = tgt.with_ram(ram)
    recipe = get_recipe(name)
    plan = make_plan(recipe, tgt, precision, context, fmt, requested_target=target)
    groups = None
    if recipe.cost.groups:
        from exporter.plan import make_group_plans

        groups = make_group_plans(recipe, tgt, precision, context, fmt, requested_target=target)
    if as_json:
        _print_json({**plan.to_json(), **(groups or {})})
    else:
        _print_plan(plan)
        if groups:
            _print_groups(groups)
    if plan.rejection:
        raise typer.Exit(4)
    if plan.missing:
        raise typer.Exit(6)


def _print_plan(plan) -> None:
    from rich.markup import escape

    from exporter.plan import gib

    con = _out_console()
    req = plan.requested
    resolved = f" (resolved from {req['target']!r})" if req["target"] != plan.target else ""
    con.print(f"[bold]{plan.recipe}[/bold] on [bold]{plan.target}[/bold]{escape(resolved)}: {plan.precision}, {plan.format}"
              + (f", context ≤ {req['context']}" if req.get("context") else "") + f"  [dim]cost model: {escape(plan.cost_source)}[/dim]")
    if plan.artifacts:
        t = Table("graph", "component", "ar", "context", "part", "layers", "weights")
        for a in plan.artifacts:
            t.add_row(a.graph_name, a.component, str(a.ar), str(a.context), f"{a.part}/{a.parts}", f"{a.layers[0]}-{a.layers[1]}", gib(a.weight_bytes))
        con.print(t)
    m = plan.memory
    if m:
        t = Table("memory", "bytes", title=f"budget: {m['budget_kind']}")
        for k in ("nominal_language_weight_bytes", "weights_bytes", "state_bytes", "state_transition_bytes", "activations_bytes",
                  "runtime_overhead_bytes", "loading_peak_bytes", "safety_margin_bytes", "required_bytes", "budget_bytes", "headroom_bytes"):
            t.add_row(k.replace("_bytes", "").replace("_", " "), gib(m[k]))
        t.add_row("weights shared between graphs", str(m["weights_shared_between_graphs"]))
        con.print(t)
    if plan.rejection:
        r = plan.rejection
        con.print(f"[red]rejected[/red] {escape(f'[{r.code}] {r.reason}')}\n  fix: {escape(r.fix)}")
    elif plan.missing:
        con.print("[yellow]admitted, but this host cannot build it:[/yellow]")
        for x in plan.missing:
            con.print(f"  - {escape(x.name)}: {escape(x.reason)}; fix: {escape(x.fix)}")
    else:
        con.print("[green]admitted[/green]")
    v = plan.verification
    if plan.admitted and v.get("emulated"):
        con.print(f"[yellow]verification:[/yellow] parity on {escape(v['provider'])}, not {escape(v['emulates'])}: {escape(v['note'])}")


def _print_groups(groups: dict) -> None:
    from rich.markup import escape

    from exporter.plan import gib

    t = Table("group", "graphs", "weights", "state", "required", "budget", "verdict",
              title="component groups, each planned alone (same precision and target; nothing smaller is substituted)")
    for g in groups["groups"]:
        r = g["rejection"]
        verdict = "[green]admitted[/green]" if g["admitted"] else "[red]rejected[/red] " + escape(f"[{r['code']}]")
        fmt = lambda b: gib(b) if b is not None else "-"
        t.add_row(g["group"], str(len(g["graphs"])), fmt(g["weights_bytes"]), fmt(g["state_bytes"]), fmt(g["required_bytes"]),
                  fmt(g["budget_bytes"]), verdict)
    con = _out_console()
    con.print(t)
    for g in groups["groups"]:
        if g["rejection"]:
            con.print(f"  {g['group']}: {escape(g['rejection']['reason'])}")
    tog = groups["admitted_together"]
    if tog["groups"]:
        con.print(f"admitted groups together ({', '.join(tog['groups'])}): {gib(tog['required_bytes'])} of {gib(tog['budget_bytes'])} "
                  + ("[green]fit[/green]" if tog["fits"] else "[red]do not fit at once[/red]") + f"  [dim]{escape(tog['rule'])}[/dim]")


@app.command("matrix")
def matrix_cmd(
    out: Path = typer.Option(DEFAULT_OUT, "--out", "-o", help="Artifacts root whose records and bundles are read."),
    fmt: str = typer.Option("md", "--format", "-f", help="md | json | html"),
    output: Optional[Path] = typer.Option(None, "--output", help="Write the rendering to this file instead of stdout."),
    public_key: Optional[Path] = typer.Option(None, "--public-key", help="Signer's public key for re-checking bundles; default: the local development key."),
):
    """Render the 60-cell qualification matrix (5 families x 12 routes) from what is on disk."""
    from verify.matrix import build_matrix, render_html, render_markdown

    renderers = {"md": render_markdown, "html": render_html, "json": lambda m: json.dumps(m, indent=2, sort_keys=True) + "\n"}
    if fmt not in renderers:
        from exporter.errors import UnknownNameError

        raise UnknownNameError("format", fmt, sorted(renderers))
    text = renderers[fmt](build_matrix(out, _public_key_or_dev(public_key)))
    if output:
        from exporter.atomic import write_text_atomic

        write_text_atomic(output, text)
        _err_console().print(f"wrote {output}")
    else:
        sys.stdout.write(text)


def _public_key_or_dev(public_key: Optional[Path]) -> Optional[Path]:
    """The given key, else the local development public key if one exists (never created here)."""
    if public_key is not None:
        return public_key
    from manifests.signing import DEV_KEY_NAME, key_dir, public_path_for

    pub = public_path_for(key_dir() / DEV_KEY_NAME)
    return pub if pub.exists() else None


AUDIT_EXIT = 7
PUBLIC_KEY_OPT = typer.Option(None, "--public-key", help="Signer's public key (PEM); default: the local development key, if one exists.")
POLICY_OPT = typer.Option(None, "--policy", help="Policy file (TOML or JSON) that tightens the release policy; see docs/AUDIT.md.")


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
    audits = audit_paths(paths, _public_key_or_dev(public_key), policy)
    diff = None
    if against is not None:
        from manifests.compare import compare, render_text

        if len(audits) != 1:
            from exporter.errors import UsageError

            raise UsageError(f"--against compares one bundle, but {len(audits)} were found under {', '.join(map(str, paths))}", "pass one bundle directory")
        diff = compare(against, audits[0].path)
    failing = [a for a in audits if not a.ok]
    if as_json:
        _print_json({"ok": not failing, "policy": policy.to_json(), "bundles": [a.to_json() for a in audits],
                     "failing": [str(a.path) for a in failing], **({"compare": diff} if diff else {})})
    else:
        from rich.markup import escape

        con = _out_console()
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
    fmt: str = typer.Option("html", "--format", "-f", help="html | md | json | junit"),
    output: Optional[Path] = typer.Option(None, "--output", help="Write the report to this file instead of stdout."),
    public_key: Optional[Path] = PUBLIC_KEY_OPT,
    policy_file: Optional[Path] = POLICY_OPT,
    strict: bool = typer.Option(False, "--strict", help="Exit 7 if any bundle fails its audit (the report is written first)."),
):
    """Parity and audit report per bundle and as an index over all of them (HTML with plots, Markdown
    for a CI job summary, JSON, or JUnit XML with one test case per check and per threshold)."""
    from manifests.audit import audit_paths, load_policy
    from verify.report import FORMATS, build_report, render, write

    if fmt not in FORMATS:
        from exporter.errors import UnknownNameError

        raise UnknownNameError("report format", fmt, list(FORMATS))
    policy = load_policy(policy_file)
    rep = build_report(audit_paths(paths, _public_key_or_dev(public_key), policy), policy)
    text = render(rep, fmt)
    if output:
        write(text, output)
        _err_console().print(f"wrote {output} ({len(rep['bundles'])} bundle(s), {len(rep['summary']['failing'])} failing)")
    else:
        sys.stdout.write(text)
    if strict and not rep["ok"]:
        raise typer.Exit(AUDIT_EXIT)


hub_app = typer.Typer(help="Qualcomm AI Hub: devices, and validation of a bundle on a real device (signed device-validation record).",
                       no_args_is_help=True)
app.add_typer(hub_app, name="hub")
SIMULATE_OPT = typer.Option(False, "--simulate", help="Use the replay instead of AI Hub: jobs run on the local HTP simulator and every result is labelled simulated.")


@hub_app.command("devices")
def hub_devices_cmd(
    chipset: Optional[str] = typer.Option(None, "--chipset", help="Only devices with this chipset attribute (e.g. qualcomm-qcs6490)."),
    simulate: bool = SIMULATE_OPT,
    as_json: bool = JSON_OPT,
):
    """List AI Hub devices (name, OS, chipset, Hexagon version, soc-model)."""
    from exporter.hub import make_client

    client = make_client(simulate)
    client.check_reachable(timeout_s=5.0)
    rows = [d.to_json() for d in client.devices(chipset)]
    if as_json:
        _print_json({"source": client.source, "simulated": client.simulated, "devices": rows})
        return

    t = Table("device", "os", "chipset", "hexagon", "soc-model", title=f"{client.source}{' (simulated)' if client.simulated else ''}")
    for r in rows:
        t.add_row(r["name"], r["os"] or "-", str(r["chipset"]), str(r["hexagon"]), str(r["soc_model"]))
    _out_console().print(t)


@hub_app.command("validate")
def hub_validate_cmd(
    bundle: Path = typer.Argument(..., help="A verified QNN bundle directory."),
    device: Optional[str] = typer.Option(None, "--device", help="AI Hub device name (default: chosen by the target's chipset attribute)."),
    chipset: Optional[str] = typer.Option(None, "--chipset", help="Chipset attribute to choose the device by (default: the bundle target's)."),
    samples: int = typer.Option(6, "--samples", min=1, help="Held-out calls per graph sent to the device."),
    timeout: float = typer.Option(3600.0, "--timeout", help="Seconds to wait for all jobs; past it the job ids stay saved and a rerun resumes."),
    poll: float = typer.Option(15.0, "--poll", help="Seconds between status checks."),
    checkpoint: Optional[Path] = typer.Option(None, "--checkpoint", help="The checkpoint the bundle was built from (default: the recipe's source), for the torch reference."),
    key: Optional[Path] = typer.Option(None, "--key", help="EC private key to sign the record with; default: the local development key."),
    public_key: Optional[Path] = PUBLIC_KEY_OPT,
    simulate: bool = SIMULATE_OPT,
    as_json: bool = JSON_OPT,
):
    """Validate BUNDLE on an AI Hub device: compile (pinned QAIRT), profile, run the held-out inputs,
    compare with the torch reference under the bundle's thresholds; write BUNDLE.device-validation.json.

    Exit 0: validated; 3: the device run failed or missed a threshold (recorded); 6: no token, no network
    or no qai_hub; 8: a job outlived --timeout (rerun to resume, nothing is resubmitted).
    """
    from exporter.hub import make_client
    from exporter.hub.validate import ValidateOptions, validate
    from manifests.signing import resolve_key

    keys = resolve_key(key)
    pub = public_key or keys.public
    client = make_client(simulate, store=Path(bundle).parent / ".hub-replay")
    record = validate(bundle, client, ValidateOptions(public_key=pub, private_key=keys.private, device=device, chipset=chipset,
                                                      samples=samples, timeout_s=timeout, poll_s=poll, checkpoint=checkpoint),
                      reporter=RichReporter(quiet=as_json))
    if as_json:
        _print_json(record)
    else:
        from exporter.hub.records import record_path

        label = " (SIMULATED: replayed on the local HTP simulator, not a device)" if record["simulated"] else ""
        _out_console().print(f"[green]✓[/green] {bundle} validated on {record['device']['name']}{label}: verdict {record['verdict']}; "
                             f"record {record_path(bundle)}", highlight=False)


@app.command("synthesize")
def synthesize_cmd(
    name: str = typer.Argument(..., help="An embedded recipe that synthesises its checkpoint (tiny-lm, tiny-spark, tiny-minicpm-o)."),
    out: Path = typer.Argument(..., help="Directory to write config.json and model.safetensors into (must not exist)."),
):
    """Write the seeded checkpoint of an embedded tiny recipe (real class and tensor names), checked against its pin."""
    from exporter.atomic import staging_dir
    from exporter.errors import IntegrityError, UsageError
    from exporter.hashing import sha256_file
    from recipes import get_recipe

    r = get_recipe(name)
    if r.synthesize is None:
        raise UsageError(f"recipe {name} has no synthesiser", "choose tiny-lm, tiny-spark or tiny-minicpm-o")
    if out.exists():
        raise UsageError(f"{out} exists", "choose a new directory; nothing is overwritten")
    with staging_dir(out) as tmp:
        r.synthesize(tmp)
        bad = [f for f, d in r.pin.files.items() if sha256_file(tmp / f) != d]
        if bad:
            raise IntegrityError(f"synthesised {bad} do not match the pin of {name}", "report this: synthesis must be deterministic")
    _out_console().print(f"wrote {out} ({', '.join(sorted(r.pin.files))}; digests match the pin of {name})")


@app.command("pin")
def pin_cmd(
    name: str = typer.Argument(..., help="The recipe the checkpoint is for (spark, minicpm-o, tiny-lm, ...)."),
    checkpoint: Path = typer.Option(..., "--checkpoint", help="The snapshot directory: config.json and *.safetensors (sharded or not), or a "
                                    "Hugging Face cache snapshot .../models--ORG--NAME/snapshots/REV/."),
    revision: Optional[str] = typer.Option(None, "--revision", help="The upstream revision (commit) of a plain directory; read from the path for a cache snapshot."),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Pin file to write (default: NAME.pin.json here); never overwritten unless --force."),
    force: bool = typer.Option(False, "--force", help="Replace an existing pin file."),
    as_json: bool = JSON_OPT,
):
    """Check a checkpoint against a recipe and write a pin file a team can review and commit.

    Checked before anything is loaded: the config against the recipe, every safetensors header, every tensor name and
    shape against the recipe's layout, the shard index against the shards, no pickle read, no code executed, no
    symbolic link out of the snapshot. The pin records the source, the revision and the SHA-256 and size of every file
    the loader reads. Build with it: `edge-export recipe NAME --checkpoint DIR --pin FILE`.
    Exit 0: written; 2: usage (wrong recipe, config of another family); 5: the checkpoint fails a check.
    """
    from exporter.atomic import write_text_atomic
    from exporter.errors import UsageError
    from exporter.pins import make_pin

    output = output or Path(f"{name}.pin.json")
    if output.exists() and not force:
        raise UsageError(f"{output} exists", "choose another --output, or pass --force to replace it")
    reporter = RichReporter(quiet=as_json)
    with reporter.stage("pin", f"{name}: {checkpoint} (headers, layout, SHA-256 of every file read)"):
        pin = make_pin(name, checkpoint, revision)
    write_text_atomic(output, json.dumps(pin, indent=2, sort_keys=True) + "\n")
    from exporter.hashing import sha256_file

    digest = sha256_file(output)
    if as_json:
        _print_json({"pin": str(output), "sha256": digest, **pin})
        return
    lay = pin["layout"]
    con = _out_console()
    con.print(f"wrote {output} (sha256 {digest[:16]}…): {pin['recipe']} from {pin['source']} at {pin['revision']}", highlight=False)
    con.print(f"  {len(pin['files'])} files read, {sum(f['size'] for f in pin['files'].values()) / 2**30:.2f} GiB; {lay['tensors']} tensors "
              f"({lay['parameters']:,} parameters, {', '.join(f'{k} {v}' for k, v in lay['dtypes'].items())}) match the layout of {lay['checked_by']}",
              highlight=False)
    for e in pin["excluded"]:
        con.print(f"  not read: {e['file']} ({e['reason']})", highlight=False)
    for n in pin["notes"]:
        con.print(f"  note: {n}", highlight=False)
    con.print(f"  build: edge-export recipe {pin['recipe']} --target T --checkpoint {checkpoint} --pin {output}", highlight=False)


@app.command("routes")
def routes_cmd(as_json: bool = JSON_OPT):
    """List the roadmap's hardware routes and the targets each deploys to."""
    from exporter.routes import all_routes

    rows = [r.to_json() for r in all_routes()]
    if as_json:
        _print_json(rows)
        return

    t = Table("route", "title", "deployments (targets; host)")
    for r in rows:
        t.add_row(r["id"], r["title"], "\n".join(f"{d['name']}: {', '.join(d['targets'])}; host {d['host']}" for d in r["deployments"]))
    _out_console().print(t)


def _report(e: EdgeExportError, as_json: bool) -> None:
    if as_json:
        _print_json({"error": e.message, "fix": e.hint, "exit_code": e.exit_code, "kind": type(e).__name__})
    else:
        from rich.markup import escape

        _err_console().print(f"[red]error:[/red] {escape(e.message)}" + (f"\n  [bold]fix:[/bold] {escape(e.hint)}" if e.hint else ""), highlight=False)


def _on_signal(signum, _frame):
    from exporter.errors import Interrupted

    raise Interrupted(signum)


def main() -> None:
    import signal

    from typer.exceptions import Abort, Exit, TyperException  # typer bundles its own click: its usage errors derive from this

    from exporter.errors import Interrupted, filesystem_error_in

    as_json = "--json" in sys.argv
    # native libraries (QNN, ORT, ninja) print to file descriptor 1; stdout carries only the command's result (the
    # JSON document, a table, a plan), so fd 1 goes to stderr and Python's sys.stdout writes to the original stdout
    real = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = os.fdopen(real, "w")
    # SIGTERM (timeout, CI cancellation, docker stop) unwinds like Ctrl-C: staging directories are removed, locks released
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _on_signal)
    try:
        rc = app(standalone_mode=False)
    except EdgeExportError as e:
        _report(e, as_json)
        sys.exit(e.exit_code)
    except Interrupted as e:
        name = signal.Signals(e.signum).name
        _err_console().print(f"interrupted by {name}: finished stages stay cached and nothing half-written was published; rerun to resume",
                             highlight=False)
        sys.exit(e.exit_code)
    except Exit as e:
        sys.exit(e.exit_code)
    except Abort:
        _err_console().print("aborted")
        sys.exit(130)
    except TyperException as e:  # usage: a missing or unknown option, a value of the wrong type
        show = getattr(e, "show", None)
        if show:
            show()
        else:
            _err_console().print(f"error: {e}")
        sys.exit(2)
    except Exception as e:  # a full disk, a read-only file system, a file where a directory is needed: say which path
        fs = filesystem_error_in(e)
        if fs is None:
            raise
        _report(fs, as_json)
        sys.exit(fs.exit_code)
    if rc == 130:  # typer turned a KeyboardInterrupt that reached it into this code
        _err_console().print("interrupted: finished stages stay cached; rerun to resume")
    sys.exit(rc if isinstance(rc, int) else 0)

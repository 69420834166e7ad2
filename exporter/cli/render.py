"""How the commands show things: results on standard output (tables, plans, JSON), progress and errors on standard
error. No command logic here."""

from __future__ import annotations

import contextlib
import json
import sys
import time

from exporter.errors import EdgeExportError


def err_console():
    """Progress, notes and errors: standard error (unwrapped when it is not a terminal, so a log keeps whole lines)."""
    from rich.console import Console

    tty = sys.stderr.isatty()
    return Console(stderr=True, width=None if tty else 100_000, soft_wrap=not tty)


def out_console():
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


def print_json(obj) -> None:
    sys.stdout.write(json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


class RichReporter:
    """Shows each pipeline stage as a spinner while it runs and a line when it ends."""

    def __init__(self, quiet: bool = False):
        self.console = err_console()
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


def size(n: int) -> str:
    """Bytes in the largest binary unit that keeps a digit before the point (a tiny twin's part is KiB, not 0.00 GiB)."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n} B"


def print_plan(plan) -> None:
    from rich.markup import escape

    from exporter.plan import gib

    con = out_console()
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
        ws = m.get("weight_sharing") or {}
        if ws.get("accelerator") and ws.get("note"):
            con.print(f"weight sharing: {escape(ws['note'])}")
    bm = plan.build_memory
    if bm:
        budget = bm.get("budget")
        con.print(f"build: estimated peak {size(bm['estimated_peak_bytes'])} ({escape(bm['estimate'])}; largest part "
                  f"{size(bm['largest_part_fp32_bytes'])} float32)"
                  + (f", budget {size(budget['budget_bytes'])} ({escape(budget['source'])})" if budget else ", no build budget")
                  + (f"; parts cut by {escape(bm['parts_cut_by'])}" if bm["parts_cut_by"] != "none" else ""))
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


def print_groups(groups: dict) -> None:
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
    con = out_console()
    con.print(t)
    for g in groups["groups"]:
        if g["rejection"]:
            con.print(f"  {g['group']}: {escape(g['rejection']['reason'])}")
    tog = groups["admitted_together"]
    if tog["groups"]:
        con.print(f"admitted groups together ({', '.join(tog['groups'])}): {gib(tog['required_bytes'])} of {gib(tog['budget_bytes'])} "
                  + ("[green]fit[/green]" if tog["fits"] else "[red]do not fit at once[/red]") + f"  [dim]{escape(tog['rule'])}[/dim]")

def report_error(e: EdgeExportError, as_json: bool) -> None:
    if as_json:
        print_json({"error": e.message, "fix": e.hint, "exit_code": e.exit_code, "kind": type(e).__name__})
    else:
        from rich.markup import escape

        err_console().print(f"[red]error:[/red] {escape(e.message)}" + (f"\n  [bold]fix:[/bold] {escape(e.hint)}" if e.hint else ""), highlight=False)

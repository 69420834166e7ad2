"""Commands that list what the registries hold: recipes, targets, routes."""

from __future__ import annotations


import typer

from exporter.cli.app import app, targets_app
from exporter.cli.options import JSON_OPT
from exporter.cli.render import out_console, Table, print_json


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
        print_json(rows)
        return

    t = Table("recipe", "architecture", "precisions by target / kind", "status", "description")
    for r in rows:
        t.add_row(r["name"], r["architecture"], ", ".join(f"{k} ({'/'.join(v)})" for k, v in r["targets"].items()),
                  "buildable" if r["buildable"] else "buildable with --checkpoint DIR" if r["needs_checkpoint"] else f"plan-only: {r['blocked']}",
                  r["description"] + (f" (groups: {', '.join(r['groups'])})" if r.get("groups") else ""))
    out_console().print(t)


@targets_app.callback()
def targets_cmd(ctx: typer.Context, as_json: bool = JSON_OPT):
    """List the targets (`targets show T` for one in full)."""
    if ctx.invoked_subcommand:
        return
    from exporter.targets import all_targets

    rows = [t.to_json() for t in all_targets()]
    if as_json:
        print_json(rows)
        return

    t = Table("target", "aliases", "os / abi", "accelerator", "execution provider", "formats", "precisions", "memory GiB")
    for r in rows:
        a = r["accelerator"]
        acc = a["kind"] + (f" v{a['htp_arch']}" + (f" (soc_model {a['soc_model']})" if a["soc_model"] else "") if a["htp_arch"] else "")
        mem = f"{r['ram_bytes'] / 2**30:g} RAM" + (f" + {r['vram_bytes'] / 2**30:g} VRAM" if r["vram_bytes"] else "")
        t.add_row(r["name"], ", ".join(r["aliases"]), f"{r['os']} / {r['abi']}", acc, r["execution_provider"],
                  ", ".join(r["formats"]), ", ".join(r["precisions"]), mem)
    out_console().print(t)


@targets_app.command("show")
def targets_show(name: str = typer.Argument(..., help="Target name or alias."), as_json: bool = JSON_OPT):
    """Print one target's full profile, with the source of each fact."""
    from exporter.targets import get_target

    data = get_target(name).to_json()
    if as_json:
        print_json(data)
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
    out_console().print(t)


@app.command("routes")
def routes_cmd(as_json: bool = JSON_OPT):
    """List the roadmap's hardware routes and the targets each deploys to."""
    from exporter.routes import all_routes

    rows = [r.to_json() for r in all_routes()]
    if as_json:
        print_json(rows)
        return

    t = Table("route", "title", "deployments (targets; host)")
    for r in rows:
        t.add_row(r["id"], r["title"], "\n".join(f"{d['name']}: {', '.join(d['targets'])}; host {d['host']}" for d in r["deployments"]))
    out_console().print(t)

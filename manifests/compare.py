"""What changed between two builds of one cell (recipe / target / precision / format), from their manifests.

Tool and compiler versions, checkpoint digests, file digests, state layout, plan memory, thresholds,
and the parity figures per stage, component (one per bucket) and output, with their deltas.
Torch-free; reads manifests only (audit the bundles for integrity).
"""

from __future__ import annotations

from manifests import manifest as mf
from verify.thresholds import figures, has_decode


def _changed(a: dict, b: dict) -> list[dict]:
    return [{"key": k, "old": a.get(k), "new": b.get(k)} for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]


def _flatten(obj, prefix: str = "") -> dict:
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            out.update(_flatten(v, f"{prefix}{k}."))
        return out
    if isinstance(obj, list) and obj and all(isinstance(x, dict) for x in obj):
        out = {}
        for i, v in enumerate(obj):
            key = v.get("name", i) if isinstance(v, dict) else i
            out.update(_flatten(v, f"{prefix}{key}."))
        return out
    return {prefix.rstrip("."): obj}


def _figure(old, new, op: str) -> dict:
    delta = None if old is None or new is None else new - old
    worse = None if delta is None else (delta < 0 if op == ">=" else delta > 0) and abs(delta) > 1e-12
    return {"old": old, "new": new, "delta": delta, "worse": worse}


def _metrics(old_stages: list[dict], new_stages: list[dict]) -> list[dict]:
    """Every figure the metrics table knows (verify.thresholds), per stage, component and output, old against new."""
    output_figures, decode_figures = figures("output"), figures("decode")
    rows = []
    old_stages = {s["stage"]: s for s in old_stages}
    for s in new_stages:
        o = old_stages.get(s["stage"])
        if o is None:
            rows.append({"stage": s["stage"], "component": "*", "output": "*", "metric": "stage", "old": None, "new": "present", "delta": None, "worse": None})
            continue
        for comp, outs in s["outputs"].items():
            for out, m in outs.items():
                om = o["outputs"].get(comp, {}).get(out, {})
                for metric, op in output_figures.items():
                    if metric in m or metric in om:
                        rows.append({"stage": s["stage"], "component": comp, "output": out, "metric": metric,
                                     **_figure(om.get(metric), m.get(metric), op)})
        if not has_decode(s) and not has_decode(o):
            continue  # stateless encoders: no tokens on either side
        for metric, op in decode_figures.items():
            rows.append({"stage": s["stage"], "component": "decode", "output": "tokens", "metric": metric,
                         **_figure(o["decode"].get(metric), s["decode"].get(metric), op)})
    return rows


def compare(old_bundle, new_bundle) -> dict:
    old, new = mf.load(old_bundle), mf.load(new_bundle)
    cell = lambda d: {k: d["bundle"][k] for k in ("recipe", "target", "precision", "format")}
    files_old, files_new = old["files"], new["files"]
    files = [{"file": f, "old": files_old.get(f, {}).get("sha256"), "new": files_new.get(f, {}).get("sha256"),
              "old_size": files_old.get(f, {}).get("size"), "new_size": files_new.get(f, {}).get("size")}
             for f in sorted(set(files_old) | set(files_new)) if files_old.get(f) != files_new.get(f)]
    metrics = _metrics(mf.load_parity(old_bundle, old)["stages"], mf.load_parity(new_bundle, new)["stages"])
    return {
        "old": str(old_bundle), "new": str(new_bundle),
        "same_cell": cell(old) == cell(new), "cell": {"old": cell(old), "new": cell(new)},
        "created": {"old": old["bundle"]["created"], "new": new["bundle"]["created"]},
        "build_key_changed": old.get("build_key") != new.get("build_key"),
        "tools": _changed(old["tools"], new["tools"]),
        "checkpoint": _changed({**old["checkpoint"]["files"], "pinned": old["checkpoint"].get("pinned"), "revision": old["checkpoint"].get("revision")},
                               {**new["checkpoint"]["files"], "pinned": new["checkpoint"].get("pinned"), "revision": new["checkpoint"].get("revision")}),
        "files": files,
        "state_layout": _changed(_flatten(old["state_layout"]), _flatten(new["state_layout"])),
        "thresholds": _changed(_flatten(old["parity"].get("thresholds", {})), _flatten(new["parity"].get("thresholds", {}))),
        "memory": _changed({k: v for k, v in old["plan"].get("memory", {}).items() if isinstance(v, (int, float))},
                           {k: v for k, v in new["plan"].get("memory", {}).items() if isinstance(v, (int, float))}),
        "verdict": {"old": old["parity"]["verdict"], "new": new["parity"]["verdict"]},
        "metrics": metrics,
        "regressions": [m for m in metrics if m["worse"]],
    }


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.6g}"
    return "—" if v is None else str(v)


def render_text(d: dict) -> str:
    lines = [f"compare {d['old']} -> {d['new']}"]
    if not d["same_cell"]:
        lines.append(f"  NOTE: different cells: {d['cell']['old']} vs {d['cell']['new']}")
    lines.append(f"  built {d['created']['old']} -> {d['created']['new']}; verdict {d['verdict']['old']} -> {d['verdict']['new']}")
    for section in ("tools", "checkpoint", "state_layout", "thresholds", "memory"):
        rows = d[section]
        lines.append(f"  {section}: " + ("unchanged" if not rows else f"{len(rows)} changed"))
        lines += [f"    {r['key']}: {_fmt(r['old'])} -> {_fmt(r['new'])}" for r in rows[:40]]
    lines.append("  files: " + ("unchanged" if not d["files"] else f"{len(d['files'])} changed"))
    for f in d["files"]:
        state = "added" if f["old"] is None else "removed" if f["new"] is None else f"{f['old_size']} -> {f['new_size']} bytes, digest changed"
        lines.append(f"    {f['file']}: {state}")
    changed = [m for m in d["metrics"] if m["delta"] not in (None, 0, 0.0)]
    lines.append(f"  parity figures: {len(changed)} changed, {len(d['regressions'])} worse")
    for m in sorted(changed, key=lambda m: (not m["worse"], m["stage"], m["component"], m["output"], m["metric"]))[:60]:
        mark = "worse" if m["worse"] else "better"
        lines.append(f"    {m['stage']}/{m['component']}/{m['output']} {m['metric']}: {_fmt(m['old'])} -> {_fmt(m['new'])} "
                     f"({m['delta']:+.3g}, {mark})")
    return "\n".join(lines) + "\n"

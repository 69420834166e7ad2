"""The qualification matrix: five families x twelve routes, each cell's status from what is on disk.

Reads run records (``manifests/records.py``) and re-checks every bundle a
``verified`` record points at through the gate (signature, digests, target,
verdict); nothing is inferred from a plan that was never recorded. Torch-free.

Cell statuses (per target, then the least advanced over a deployment's targets
and a route's deployments):
  rejected               a recorded plan rejection (reason code)
  missing-prerequisite   the family has no buildable recipe yet, or the host lacked a tool (recorded)
  attempted-failed       a run failed: failing stage, reason, evidence, next repair
  unqualified            nothing attempted yet, or an artifact verified only off-target (e.g. the
                         x86 QNN simulator): numerics proven, device execution not
  functionally-qualified a signed bundle whose parity was measured on the target itself, or
                         that passed a (non-simulated) AI Hub device validation recorded beside it
Performance qualification is a separate field; nothing here measures it yet.
"""

from __future__ import annotations

import html
import json
from pathlib import Path

from exporter.errors import EdgeExportError

ORDER = ("rejected", "missing-prerequisite", "attempted-failed", "unqualified", "functionally-qualified")
PRECEDENCE = {s: i for i, s in enumerate(ORDER)}
# which attempt of a target counts when several precisions were tried: the most advanced
BEST = {"functionally-qualified": 5, "unqualified-verified": 4, "attempted-failed": 3, "missing-prerequisite": 2, "rejected": 1}


def _device_validation(bundle: Path, public_key: Path | None) -> dict:
    """What the AI Hub record beside a bundle says: device-validated, simulator-only, or failed."""
    from exporter.errors import EdgeExportError
    from exporter.hub.records import load_record, validation_state

    try:
        rec = load_record(bundle, public_key)
    except EdgeExportError as e:
        return {"on_device": False, "label": f"device-validation record rejected: {e.message}"}
    state = validation_state(rec)
    name = rec["device"]["name"] if rec else None
    label = {"none": "simulator-only (no device validation)",
             "failed": f"device validation on {name} failed" + (" (simulated)" if rec and rec["simulated"] else ""),
             "simulated": f"simulator-only (replayed validation for {name}, not a device run)",
             "device": f"device-validated on {name} (AI Hub)"}[state]
    return {"on_device": state == "device", "label": label}


def _groups_status(family: str, groups: tuple[str, ...], target: str, out_root: Path, public_key: Path | None, records) -> dict:
    """A multi-component family on one target: each group's status, and the least advanced of them for the cell
    (a deployment needs every group: a rejected language model rejects the cell, however good the towers are)."""
    per = [dict(_target_status(f"{family}.{g}", target, out_root, public_key, None, records), group=g) for g in groups]
    worst = min(per, key=lambda x: PRECEDENCE[x["status"]])
    detail = "; ".join(f"{x['group']}: {x['status']}" + (f" ({x['detail']})" if x["status"] != "functionally-qualified" else "") for x in per)
    return {**{k: worst.get(k) for k in ("code", "stage", "next_repair", "precision")}, "target": target, "status": worst["status"],
            "detail": detail, "record": worst["record"], "groups": per}


def _target_status(family: str, target: str, out_root: Path, public_key: Path | None, recipe_blocked: str | None, records,
                   groups: tuple[str, ...] = ()) -> dict:
    from exporter.errors import EdgeExportError
    from verify import gate

    if groups and any(str(r.get("recipe", "")).startswith(family + ".") and r.get("target") == target for _, r in records):
        return _groups_status(family, groups, target, out_root, public_key, records)
    mine = [(p, r) for p, r in records if r.get("recipe") == family and r.get("target") == target]
    if not mine:
        if recipe_blocked:
            return {"target": target, "status": "missing-prerequisite", "detail": recipe_blocked, "record": None}
        return {"target": target, "status": "missing-prerequisite", "detail": "not attempted: no record on disk", "record": None}
    options = []
    for path, r in mine:
        st, detail = r["status"], r.get("reason", "")
        cell = {"target": target, "precision": r.get("precision"), "record": str(path), "code": r.get("code"), "stage": r.get("stage"),
                "next_repair": r.get("next_repair"), "evidence": r.get("evidence", [])}
        if st == "verified":
            try:
                if public_key is None:
                    raise EdgeExportError("no public key to check the bundle's signature with", "pass --public-key")
                opened = gate.check_bundle(Path(r["bundle"]), public_key, target)
                v = opened.manifest.get("verification", {})
                gaps = []
                if opened.manifest["checkpoint"].get("synthetic"):
                    gaps.append(f"built from a synthetic tiny checkpoint ({opened.manifest['checkpoint']['revision']}), not the family's weights")
                device = _device_validation(Path(r["bundle"]), public_key)
                cell["validation"] = device["label"]
                if not v.get("on_target") and not device["on_device"]:
                    gaps.append("off-target: " + (v.get("note") or f"measured on {v.get('host_os')}/{v.get('host_abi')}, not on the target")
                                + f"; {device['label']}")
                if gaps:
                    cell |= {"status": "unqualified", "detail": "artifact verified, but " + "; ".join(gaps)}
                    rank = "unqualified-verified"
                else:
                    where = device["label"] if device["on_device"] else f"parity passed on {v.get('host_abi')}"
                    cell |= {"status": "functionally-qualified", "detail": f"{where} ({opened.manifest['bundle']['precision']})"}
                    rank = "functionally-qualified"
            except EdgeExportError as e:
                cell |= {"status": "attempted-failed", "stage": "gate", "detail": f"bundle fails the gate: {e.message}", "next_repair": e.hint}
                rank = "attempted-failed"
        elif st == "failed":
            cell |= {"status": "attempted-failed", "detail": f"{r.get('stage')}: {detail}"}
            rank = "attempted-failed"
        else:
            cell |= {"status": st, "detail": f"[{r.get('code')}] {detail}" if st == "rejected" else detail}
            rank = st
        options.append((BEST[rank], cell))
    return max(options, key=lambda x: x[0])[1]


# the tiny twins of each family: recipes whose records show toolchain readiness, never a qualification
TWINS = {"spark": ("tiny-spark",), "minicpm-o": ("tiny-minicpm-o",)}


def _best_plan(recipe, tgt, context=None):
    """The first of the recipe's precisions for the target whose real-size plan is admitted, else the first's rejection
    (a cell is rejected only when no precision the recipe defines there fits)."""
    from exporter.plan import make_plan

    plans = [make_plan(recipe, tgt, p, context) for p in (recipe.precisions_for(tgt, tgt.formats[0]) or (None,))]
    return next((p for p in plans if p.admitted), plans[0]), plans


def _plan_field(recipe, target_name: str) -> dict:
    """The real-size plan of the family on the target: the first precision it defines there that fits (each group of a
    multi-component recipe planned alone, at its own precisions)."""
    from dataclasses import replace

    from exporter.targets import get_target

    tgt = get_target(target_name)
    plan, tried = _best_plan(recipe, tgt)

    def summary(p) -> dict:
        m = p.memory or {}
        return {"verdict": "admitted" if p.admitted else "rejected", "precision": p.precision, "format": p.format,
                "code": p.rejection.code if p.rejection else None, "reason": p.rejection.reason if p.rejection else None,
                "required_bytes": m.get("required_bytes"), "budget_bytes": m.get("budget_bytes")}

    out = {**summary(plan), "cost_source": plan.cost_source, "missing": [x.name for x in plan.missing],
           "tried": [f"{p.precision}: " + ("admitted" if p.admitted else f"rejected [{p.rejection.code}]") for p in tried]}
    if recipe.cost.groups:
        built = recipe.group_recipes() if recipe.group_recipes else {}
        groups = []
        for g in recipe.cost.groups:
            cost = recipe.cost.group(g)
            own = built.get(g.name)
            sub = replace(recipe, name=f"{recipe.name}/{g.name}", cost=cost, group_recipes=None,
                          **({"precisions": own.precisions} if own else {}))
            best, _ = _best_plan(sub, tgt)
            groups.append({"group": g.name, **summary(best)})
        out["groups"] = groups
        if all(g["verdict"] == "admitted" for g in groups) and out["verdict"] == "rejected" and plan.rejection.code == "capacity":
            # each group fits alone; the whole recipe at once does not: a deployment loads groups as it needs them
            out["note"] = "every group fits alone; all at once they do not"
        elif any(g["verdict"] == "rejected" for g in groups):
            out["verdict"] = "rejected"
            first = next(g for g in groups if g["verdict"] == "rejected")
            out["code"], out["reason"] = first["code"], f"{first['group']}: {first['reason']}"
        else:
            out["verdict"] = "admitted"
    return out


def _manifest(bundle) -> dict:
    """A bundle's manifest read safely (not yet trusted: only to tell a twin's build from a real one; the gate judges)."""
    from exporter.safejson import load_json
    from manifests.manifest import MAX_MANIFEST_BYTES

    return load_json(Path(bundle) / "manifest.json", "the manifest", MAX_MANIFEST_BYTES)


def _record_kind(rec: dict, twins: tuple[str, ...]) -> str:
    """"twin" for an attempt on a family's synthetic tiny checkpoint, else "real"."""
    from recipes import base_recipe

    name = str(rec.get("recipe", ""))
    if base_recipe(name) in twins:
        return "twin"
    ck = rec.get("checkpoint") or {}
    if ck.get("twin") is not None:
        return "twin" if ck["twin"] else "real"
    if rec.get("status") == "verified" and rec.get("bundle"):
        try:
            data = _manifest(rec["bundle"])
            return "twin" if data["checkpoint"].get("synthetic") else "real"
        except (OSError, ValueError, KeyError, TypeError, AttributeError, EdgeExportError):
            return "real"  # unreadable: the gate will say why when the record is judged
    return "real"


def _checkpoint_field(real_records) -> str:
    """missing / present / pinned, from what real-checkpoint attempts recorded."""
    state = "missing"
    for _, r in real_records:
        ck = r.get("checkpoint") or {}
        pinned = ck.get("pinned")
        if pinned is None and r.get("status") == "verified" and r.get("bundle"):
            try:
                pinned = _manifest(r["bundle"])["checkpoint"].get("pinned")
            except (OSError, ValueError, KeyError, TypeError, AttributeError, EdgeExportError):
                pinned = None
        state = "pinned" if pinned or state == "pinned" else "present"
    return state


def _toolchain(name: str, twin_records, target: str, out_root: Path, public_key, groups) -> dict:
    if not twin_records:
        return {"status": "not built", "detail": "no tiny-twin build recorded for this target"}
    from recipes import base_recipe

    names = sorted({base_recipe(str(r.get("recipe", ""))) for _, r in twin_records})
    best = None
    for n in names:
        st = _target_status(n, target, out_root, public_key, None, twin_records, groups)
        if best is None or PRECEDENCE[st["status"]] > PRECEDENCE[best["status"]]:
            best = st
    status = {"unqualified": "verified", "functionally-qualified": "verified"}.get(best["status"], best["status"])
    when = next((r.get("time") for p, r in twin_records if str(p) == best.get("record")), None)
    return {"status": status, "detail": best["detail"], "record": best.get("record"), "precision": best.get("precision"), "time": when,
            "stage": best.get("stage"), "next_repair": best.get("next_repair"), **({"groups": best["groups"]} if "groups" in best else {})}


def _target_cell(fam: str, recipe, target: str, out_root: Path, public_key, records, groups) -> dict:
    from recipes import base_recipe

    twins = TWINS.get(fam, ())
    mine = [(p, r) for p, r in records if r.get("target") == target and base_recipe(str(r.get("recipe", ""))) in (fam, *twins)]
    twin = [(p, r) for p, r in mine if _record_kind(r, twins) == "twin"]
    real = [(p, r) for p, r in mine if _record_kind(r, twins) == "real"]
    plan = _plan_field(recipe, target)
    toolchain = _toolchain(fam, twin, target, out_root, public_key, groups)
    device = _target_status(fam, target, out_root, public_key, None, real, groups) if real else {"status": "none", "detail": "no build from a real checkpoint"}
    cell = {"target": target, "plan": plan, "toolchain": toolchain, "checkpoint": _checkpoint_field(real), "device": device,
            "performance": "not measured", "record": device.get("record") or toolchain.get("record"), "code": None, "stage": None,
            "next_repair": None, "precision": plan["precision"]}
    exportable = recipe.has_exporter
    if plan["verdict"] == "rejected" and plan["code"] == "precision-undefined":
        # not a rejected artifact: the recipe defines no build of that part for this target yet (a gap of ours)
        gaps = [g["group"] for g in plan.get("groups", ()) if g["code"] == "precision-undefined"]
        return cell | {"status": "missing-prerequisite", "code": "precision-undefined",
                       "detail": f"the recipe defines no build for {target}" + (f" of {', '.join(gaps)}" if gaps else "") + f": {plan['reason']}",
                       "next_repair": "define the precisions and parity thresholds of that part for this target in the recipe"}
    if plan["verdict"] == "rejected":
        rejected = [g for g in plan.get("groups", ()) if g["verdict"] == "rejected"]
        why = "; ".join(f"{g['group']}: [{g['code']}] {g['reason']}" for g in rejected) or f"[{plan['code']}] {plan['reason']}"
        return cell | {"status": "rejected", "code": plan["code"], "detail": f"real-size plan rejected: {why}",
                       "next_repair": "a target with more memory, or a smaller precision the recipe defines (never a smaller model)"}
    if device["status"] in ("functionally-qualified", "unqualified", "attempted-failed", "rejected"):
        return cell | {"status": device["status"], "detail": device["detail"], "code": device.get("code"), "stage": device.get("stage"),
                       "next_repair": device.get("next_repair"), "validation": device.get("validation")}
    if toolchain["status"] == "attempted-failed":
        return cell | {"status": "attempted-failed", "detail": f"on the tiny twin: {toolchain['detail']}", "stage": toolchain.get("stage"),
                       "next_repair": toolchain.get("next_repair")}
    if device["status"] == "missing-prerequisite":
        return cell | {"status": "missing-prerequisite", "detail": device["detail"], "next_repair": device.get("next_repair")}
    if not exportable:
        detail = f"no export path: {recipe.blocked}"
    else:
        ready = (f"toolchain verified on the tiny twin ({toolchain.get('precision')}, {toolchain.get('time')})" if toolchain["status"] == "verified"
                 else f"toolchain {toolchain['status']} on the tiny twin")
        detail = f"no real checkpoint built: {ready}"
    return cell | {"status": "missing-prerequisite", "detail": detail,
                   "next_repair": recipe.blocked_fix if not exportable else f"edge-export pin {fam} --checkpoint DIR, then edge-export recipe {fam} "
                                                                            f"--target {target} --checkpoint DIR --pin PIN"}


def build_matrix(out_root: Path, public_key: Path | None) -> dict:
    from exporter.routes import all_routes
    from manifests.records import read_records
    from recipes import FAMILIES, get_recipe

    out_root = Path(out_root)
    records = read_records(out_root)
    cells = []
    for fam in FAMILIES:
        recipe = get_recipe(fam)
        groups = tuple(g.name for g in recipe.cost.groups) if recipe.group_recipes else ()
        memo: dict[str, dict] = {}
        for route in all_routes():
            deps = []
            for d in route.deployments:
                ts = [memo.setdefault(t, _target_cell(fam, recipe, t, out_root, public_key, records, groups)) for t in d.targets]
                deps.append({"name": d.name, "host": d.host, "status": min((t["status"] for t in ts), key=PRECEDENCE.__getitem__), "targets": ts})
            targets = [t for dd in deps for t in dd["targets"]]
            status = min((dd["status"] for dd in deps), key=PRECEDENCE.__getitem__)
            recs = sorted({r for t in targets for r in (t["record"], t["toolchain"].get("record"), t["device"].get("record")) if r})
            cells.append({"family": fam, "route": route.id, "status": status, "performance": "not measured",
                          "plan": _least(t["plan"]["verdict"] for t in targets), "toolchain": _least_tool(t["toolchain"]["status"] for t in targets),
                          "checkpoint": min((t["checkpoint"] for t in targets), key=CHECKPOINT.index),
                          "device": min((t["device"]["status"] for t in targets), key=DEVICE.index),
                          "records": recs, "deployments": deps})
    counts = {s: sum(1 for c in cells if c["status"] == s) for s in ORDER}
    return {"schema": "edge-export.matrix/v2", "root": str(out_root), "families": list(FAMILIES),
            "routes": [r.to_json() for r in all_routes()], "cells": cells, "counts": counts,
            "fields": {"plan": "real-size plan verdict per target (and group)", "toolchain": "built and verified on the family's tiny twin",
                       "checkpoint": "missing / present / pinned (real weights)", "device": "qualification of a real-checkpoint build",
                       "performance": "performance qualification (separate; nothing measures it yet)"}}


CHECKPOINT = ("missing", "present", "pinned")
DEVICE = ("none", "rejected", "missing-prerequisite", "attempted-failed", "unqualified", "functionally-qualified")
TOOLCHAIN = ("not built", "rejected", "missing-prerequisite", "attempted-failed", "verified")


def _least(verdicts) -> str:
    return "rejected" if "rejected" in list(verdicts) else "admitted"


def _least_tool(states) -> str:
    return min(states, key=TOOLCHAIN.index)


SHORT = {"rejected": "rejected", "missing-prerequisite": "missing prereq", "attempted-failed": "failed",
         "unqualified": "unqualified", "functionally-qualified": "functional ✓"}


def _codes(c: dict) -> list[str]:
    return sorted({t.get("code") for d in c["deployments"] for t in d["targets"] if t.get("code")})


def _cell_text(c: dict) -> str:
    codes = _codes(c) if c["status"] in ("rejected",) else []
    return SHORT[c["status"]] + (f" ({', '.join(codes)})" if codes else "")


def _fields_text(c: dict) -> str:
    return f"plan {c['plan']}; twin {c['toolchain']}; checkpoint {c['checkpoint']}; device {c['device']}; perf {c['performance']}"


def _gib(b) -> str:
    return f"{b / 2**30:.2f} GiB" if isinstance(b, (int, float)) else "-"


def _plan_text(plan: dict) -> str:
    head = f"{plan['verdict']} ({plan['precision']}, {plan['format']}: {_gib(plan['required_bytes'])} of {_gib(plan['budget_bytes'])})"
    if plan["verdict"] == "rejected" and plan.get("code"):
        head = f"rejected [{plan['code']}] ({plan['precision']}, {plan['format']})"
    groups = plan.get("groups") or []
    if groups:
        head += "; groups: " + ", ".join(f"{g['group']} {g['verdict']}" + (f" [{g['code']}] {_gib(g['required_bytes'])} of {_gib(g['budget_bytes'])}"
                                                                          if g["verdict"] == "rejected" else "") for g in groups)
    return head


def render_markdown(m: dict) -> str:
    routes = m["routes"]
    lines = ["# Qualification matrix", "", f"From records under `{m['root']}` and the real-size plans. Each cell: its status, then the fields it is "
             "derived from (plan verdict, toolchain readiness on the tiny twin, checkpoint, device and performance qualification). "
             "Performance qualification: not measured in any cell.", ""]
    lines.append("| family | " + " | ".join(r["title"] for r in routes) + " |")
    lines.append("|---|" + "---|" * len(routes))
    for fam in m["families"]:
        row = [c for c in m["cells"] if c["family"] == fam]
        lines.append(f"| {fam} | " + " | ".join(f"**{_cell_text(c)}**<br>plan {c['plan']}<br>twin {c['toolchain']}<br>ckpt {c['checkpoint']}"
                                                 f"<br>device {c['device']}" for c in row) + " |")
    lines += ["", "Counts: " + ", ".join(f"{k} {v}" for k, v in m["counts"].items()), "", "## Cells", ""]
    for c in m["cells"]:
        for d in c["deployments"]:
            for t in d["targets"]:
                tc, dv = t["toolchain"], t["device"]
                lines.append(f"- **{c['family']} × {c['route']}** ({d['name']}, {t['target']}): **{t['status']}** — {t['detail']}")
                lines.append(f"  - plan (real size): {_plan_text(t['plan'])}")
                lines.append(f"  - toolchain (tiny twin): {tc['status']}" + (f" — {tc['detail']}" if tc.get("detail") else "")
                             + (f" (`{tc['record']}`)" if tc.get("record") else ""))
                lines.append(f"  - checkpoint: {t['checkpoint']}; device: {dv['status']}" + (f" — {dv['detail']}" if dv.get("detail") else "")
                             + f"; performance: {t['performance']}")
                if t.get("next_repair"):
                    lines.append(f"  - next: {t['next_repair']}")
    return "\n".join(lines) + "\n"


COLORS = {"rejected": "#f4c7c3", "missing-prerequisite": "#eeeeee", "attempted-failed": "#fce8b2", "unqualified": "#d2e3fc", "functionally-qualified": "#b7e1cd"}


def render_html(m: dict) -> str:
    e = html.escape
    head = "".join(f"<th>{e(r['title'])}</th>" for r in m["routes"])
    rows, details = [], []
    for fam in m["families"]:
        tds = []
        for c in (c for c in m["cells"] if c["family"] == fam):
            anchor = f"{c['family']}--{c['route']}"
            tip = " | ".join(f"{t['target']}: {t['detail']}" for d in c["deployments"] for t in d["targets"])
            tds.append(f'<td style="background:{COLORS[c["status"]]}" title="{e(tip)}"><a href="#{e(anchor)}"><b>{e(_cell_text(c))}</b></a>'
                       f'<br><small>plan {e(c["plan"])}<br>twin {e(c["toolchain"])}<br>ckpt {e(c["checkpoint"])}<br>device {e(c["device"])}</small></td>')
            items = []
            for d in c["deployments"]:
                for t in d["targets"]:
                    links = " ".join(f'<a href="{e(Path(r).resolve().as_uri())}">{e(Path(r).name)}</a>'
                                     for r in dict.fromkeys(x for x in (t["record"], t["toolchain"].get("record"), t["device"].get("record")) if x))
                    items.append(f"<li><b>{e(t['target'])}</b> ({e(d['name'])}): <b>{e(t['status'])}</b> — {e(t['detail'])}<ul>"
                                 f"<li>plan (real size): {e(_plan_text(t['plan']))}</li>"
                                 f"<li>toolchain (tiny twin): {e(t['toolchain']['status'])} — {e(t['toolchain'].get('detail') or '')}</li>"
                                 f"<li>checkpoint: {e(t['checkpoint'])}; device: {e(t['device']['status'])} — {e(t['device'].get('detail') or '')}; "
                                 f"performance: {e(t['performance'])}</li>"
                                 + (f"<li>next: {e(t['next_repair'])}</li>" if t.get("next_repair") else "")
                                 + (f"<li>records: {links}</li>" if links else "") + "</ul></li>")
            details.append(f'<h3 id="{e(anchor)}">{e(c["family"])} × {e(c["route"])}: {e(c["status"])}</h3><ul>{"".join(items)}</ul>')
        rows.append(f"<tr><th>{e(fam)}</th>{''.join(tds)}</tr>")
    legend = "".join(f'<span style="background:{v};padding:2px 6px;margin-right:6px">{e(k)}</span>' for k, v in COLORS.items())
    return ("<!doctype html><meta charset=utf-8><title>edge-export qualification matrix</title>"
            "<style>body{font-family:sans-serif}td,th{border:1px solid #999;padding:4px;font-size:12px;vertical-align:top}"
            "table{border-collapse:collapse}a{color:inherit}</style>"
            f"<h1>Qualification matrix</h1><p>From records under <code>{e(m['root'])}</code> and the real-size plans. Each cell shows its status "
            "and the fields it is derived from; click a cell for each target's detail and records. Performance qualification: not measured.</p>"
            f"<table><tr><th>family</th>{head}</tr>{''.join(rows)}</table><p>{legend}</p>"
            f"<pre>{e(json.dumps(m['counts']))}</pre><h2>Cells</h2>{''.join(details)}")

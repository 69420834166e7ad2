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
        return {"target": target, "status": "unqualified", "detail": "not attempted: no record on disk", "record": None}
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


def build_matrix(out_root: Path, public_key: Path | None) -> dict:
    from exporter.routes import all_routes
    from manifests.records import read_records
    from recipes import FAMILIES, REGISTRY, get_recipe

    out_root = Path(out_root)
    records = read_records(out_root)
    cells = []
    for fam in FAMILIES:
        recipe = get_recipe(fam) if fam in REGISTRY else None
        blocked = recipe.blocked if recipe else f"no recipe for {fam} yet"
        groups = tuple(g.name for g in recipe.cost.groups) if recipe and recipe.group_recipes else ()
        for route in all_routes():
            deps = []
            for d in route.deployments:
                ts = [_target_status(fam, t, out_root, public_key, blocked, records, groups) for t in d.targets]
                deps.append({"name": d.name, "host": d.host, "status": min((t["status"] for t in ts), key=PRECEDENCE.__getitem__), "targets": ts})
            status = min((d["status"] for d in deps), key=PRECEDENCE.__getitem__)
            recs = sorted({t["record"] for d in deps for t in d["targets"] if t["record"]})
            cells.append({"family": fam, "route": route.id, "status": status, "performance": "not measured",
                          "records": recs, "deployments": deps})
    counts = {s: sum(1 for c in cells if c["status"] == s) for s in ORDER}
    return {"schema": "edge-export.matrix/v1", "root": str(out_root), "families": list(FAMILIES),
            "routes": [r.to_json() for r in all_routes()], "cells": cells, "counts": counts}


SHORT = {"rejected": "rejected", "missing-prerequisite": "missing prereq", "attempted-failed": "failed",
         "unqualified": "unqualified", "functionally-qualified": "functional ✓"}


def _cell_text(c: dict) -> str:
    codes = sorted({t.get("code") for d in c["deployments"] for t in d["targets"] if t.get("code") and c["status"] == "rejected"})
    return SHORT[c["status"]] + (f" ({', '.join(codes)})" if codes else "")


def render_markdown(m: dict) -> str:
    routes = m["routes"]
    lines = ["# Qualification matrix", "", f"From records under `{m['root']}`. Performance qualification: not measured in any cell.", ""]
    lines.append("| family | " + " | ".join(r["title"] for r in routes) + " |")
    lines.append("|---|" + "---|" * len(routes))
    for fam in m["families"]:
        row = [c for c in m["cells"] if c["family"] == fam]
        lines.append(f"| {fam} | " + " | ".join(_cell_text(c) for c in row) + " |")
    lines += ["", "Counts: " + ", ".join(f"{k} {v}" for k, v in m["counts"].items()), "", "## Cells", ""]
    for c in m["cells"]:
        for d in c["deployments"]:
            for t in d["targets"]:
                lines.append(f"- **{c['family']} × {c['route']}** ({d['name']}, {t['target']}): {t['status']} — {t['detail']}"
                             + (f"; next: {t['next_repair']}" if t.get("next_repair") else "") + (f"; record `{t['record']}`" if t["record"] else ""))
    return "\n".join(lines) + "\n"


COLORS = {"rejected": "#f4c7c3", "missing-prerequisite": "#eeeeee", "attempted-failed": "#fce8b2", "unqualified": "#d2e3fc", "functionally-qualified": "#b7e1cd"}


def render_html(m: dict) -> str:
    e = html.escape
    head = "".join(f"<th>{e(r['title'])}</th>" for r in m["routes"])
    rows = []
    for fam in m["families"]:
        tds = []
        for c in (c for c in m["cells"] if c["family"] == fam):
            tip = " | ".join(f"{t['target']}: {t['detail']}" for d in c["deployments"] for t in d["targets"])
            tds.append(f'<td style="background:{COLORS[c["status"]]}" title="{e(tip)}">{e(_cell_text(c))}</td>')
        rows.append(f"<tr><th>{e(fam)}</th>{''.join(tds)}</tr>")
    legend = "".join(f'<span style="background:{v};padding:2px 6px;margin-right:6px">{e(k)}</span>' for k, v in COLORS.items())
    return ("<!doctype html><meta charset=utf-8><title>edge-export qualification matrix</title>"
            "<style>body{font-family:sans-serif}td,th{border:1px solid #999;padding:4px;font-size:12px}table{border-collapse:collapse}</style>"
            f"<h1>Qualification matrix</h1><p>From records under <code>{e(m['root'])}</code>. Performance qualification: not measured. "
            f"Hover a cell for each target's detail.</p><table><tr><th>family</th>{head}</tr>{''.join(rows)}</table><p>{legend}</p>"
            f"<pre>{e(json.dumps(m['counts']))}</pre>")

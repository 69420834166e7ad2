"""Parity and audit reports over bundles: JSON, Markdown (a CI job summary), JUnit XML, and HTML.

The report model is built from each bundle's manifest plus its audit (manifests.audit), so what a
person reads and what CI counts are the same checks: every audit check and every parity figure
against its threshold is one case. Torch-free and numpy-free.
"""

from __future__ import annotations

import math
from xml.sax.saxutils import escape as xml_escape

from verify.thresholds import TABLE, decode_checks, has_decode, output_checks, output_metrics


OP_SYMBOL = {">=": "≥", "<=": "≤"}

def _cases_for_stage(s: dict, th: dict) -> list[dict]:
    cases = []
    for comp, outs in sorted(s["outputs"].items()):
        for out, m in sorted(outs.items()):
            if m["calls"] == 0:
                cases.append({"name": f"{comp}.{out}.calls", "ok": False, "value": 0, "threshold": 1, "op": ">="})
                continue
            cases += [{"name": f"{comp}.{out}.{c['figure']}", "ok": c["ok"], "value": c["value"], "threshold": c["threshold"], "op": c["op"]}
                      for c in output_checks(m, th)]
    if has_decode(s):  # a stateless encoder has no tokens to judge
        cases += [{"name": f"decode.{c['metric']}", "ok": c["ok"], "value": c["value"], "threshold": c["threshold"], "op": c["op"]}
                  for c in decode_checks(s["decode"], th)]
    return cases


def _bad_calls(m: dict) -> int:
    return (m.get("nonfinite_calls") or 0) + (m.get("reference_nonfinite_calls") or 0)


def _worst_per_component(s: dict) -> list[dict]:
    """Per component, its worst output by each per-output figure of the metrics table; a figure that is None because
    nothing finite was measured counts as the worst of all (a None PSNR with finite calls is an exact match: infinite)."""
    rows = []
    for comp, outs in sorted(s["outputs"].items()):
        ran = {o: m for o, m in outs.items() if m["calls"]}
        if not ran:
            rows.append({"component": comp, "calls": 0})
            continue
        row = {"component": comp, "calls": max(m["calls"] for m in ran.values()),
               "nonfinite_calls": sum(_bad_calls(m) for m in ran.values()), "worst_output": {}}
        for x in TABLE.values():
            if x.scope != "output" or not all(x.figure in m for m in ran.values()):
                continue
            worst_value = -math.inf if x.op == ">=" else math.inf

            def key(o, x=x, worst_value=worst_value):
                v = x.read(ran[o])
                return worst_value if v is None else v

            out = min(ran, key=key) if x.op == ">=" else max(ran, key=key)
            row[x.figure] = ran[out][x.figure]
            row["worst_output"][x.figure] = out
        worst = row["worst_output"]
        psnr_out = worst.get("min_psnr_db") or next(iter(worst.values()), None)
        row.update({"cosine_output": worst.get("min_cosine"), "psnr_output": psnr_out,
                    "psnr_distribution": ((ran[psnr_out].get("distribution") or {}).get("psnr_db")) if psnr_out else None,
                    "quantiles": ((ran[psnr_out].get("distribution") or {}).get("quantiles")) if psnr_out else None})
        rows.append(row)
    return rows


def bundle_report(audit) -> dict:
    """The report of one audited bundle (manifests.audit.BundleAudit)."""
    rep = {"bundle": str(audit.path), "cell": audit.cell, "audit_ok": audit.ok, "checks": [c.to_json() for c in audit.checks]}
    data = audit.manifest
    if data is None:  # the audit's manifest check says why it cannot be read
        return {**rep, "readable": False, "verdict": "unreadable", "stages": [], "placement": []}
    p = data["parity"]
    full = audit.parity_stages or []  # unreadable: the audit's parity check says why
    stages = []
    for s in full:
        th = s["thresholds"]
        stages.append({
            "stage": s["stage"], "provider": s["provider"], "precision": s["precision"], "verdict": s["verdict"], "thresholds": th,
            "cases": _cases_for_stage(s, th), "components": _worst_per_component(s),
            "outputs": s["outputs"],
            "decode": {k: s["decode"].get(k) for k in ("applicable", "steps", "prompts", "token_agreement", "min_greedy_prefix", "all_greedy_exact",
                                                       "agreement_by_step", "per_prompt")},
        })
    placement = []
    for c in data["components"]:
        by = (c.get("placement") or {}).get("by_provider") or {}
        total = sum(by.values())
        placement.append({"component": c["name"], "by_provider": by, "share": {k: (v / total if total else 0.0) for k, v in by.items()}})
    return {
        **rep, "readable": True, "verdict": p["verdict"], "published": data["bundle"]["published"],
        "created": data["bundle"]["created"], "execution_provider": data["target"]["execution_provider"],
        "verification": data.get("verification", {}), "checkpoint": data["checkpoint"], "tools": data["tools"],
        "first_failure": p.get("first_failure"), "stages": stages, "placement": placement,
    }


def build_report(audits, policy) -> dict:
    bundles = [bundle_report(a) for a in audits]
    return {"schema": "edge-export.report/v1", "policy": policy.to_json(), "ok": all(b["audit_ok"] for b in bundles),
            "bundles": bundles, "summary": {"bundles": len(bundles), "failing": [b["bundle"] for b in bundles if not b["audit_ok"]]}}


def bundle_name(b: dict) -> str:
    c = b["cell"]
    return "/".join(str(c.get(k, "?")) for k in ("recipe", "target", "precision")) if c else b["bundle"]


def figure_text(v, missing: str = "inf") -> str:
    if v is None:
        return missing
    if isinstance(v, float):
        return f"{v:.6f}" if abs(v) < 10 and v != 0 and abs(v) >= 1e-3 else f"{v:.4g}"
    return str(v)


def agreement(stage: dict | None) -> str:
    """A stage's token agreement for a summary table; "—" where nothing was decoded."""
    if stage is None or not has_decode(stage):
        return "—"
    return figure_text(stage["decode"]["token_agreement"])


def decode_sentence(st: dict) -> str:
    th, d = st["thresholds"], st["decode"]
    if not has_decode(st):
        return f"Stateless graph measured on {d['prompts']} held-out inputs; no tokens to judge."
    return (f"Token agreement {figure_text(d['token_agreement'])} (≥ {th['min_token_agreement']}), shortest exact greedy prefix "
            f"{d['min_greedy_prefix']} (≥ {th['min_greedy_prefix']}, or a prompt’s whole decode where shorter) over {d['steps']} steps, {d['prompts']} prompts.")


def render_markdown(rep: dict) -> str:
    s = rep["summary"]
    lines = [f"# edge-export report: {s['bundles']} bundle(s), {len(s['failing'])} failing", "",
             f"Policy: `{rep['policy']['name']}` ({rep['policy']['source']})", "",
             "| bundle | verdict | audit | failing checks | worst final-stage cosine | token agreement |", "|---|---|---|---|---|---|"]
    for b in rep["bundles"]:
        last = b["stages"][-1] if b["stages"] else None
        worst = min((r["min_cosine"] if r["min_cosine"] is not None else -1.0 for r in last["components"] if r.get("calls")), default=None) if last else None
        fails = ", ".join(c["id"] for c in b["checks"] if not c["ok"]) or "—"
        lines.append(f"| `{bundle_name(b)}` | {b['verdict']} | {'✅ pass' if b['audit_ok'] else '❌ FAIL'} | {fails} | "
                     f"{figure_text(worst) if worst is not None else '—'} | {agreement(last)} |")
    for b in rep["bundles"]:
        lines += ["", f"## `{bundle_name(b)}`", "", f"Bundle `{b['bundle']}`" + (f", built {b['created']}" if b.get("created") else ""), ""]
        lines += ["| check | result | detail |", "|---|---|---|"]
        for c in b["checks"]:
            detail = c["message"].replace("|", "\\|") + (f" — fix: {c['fix']}" if not c["ok"] and c["fix"] else "")
            lines.append(f"| {c['id']} | {'pass' if c['ok'] else '**FAIL**'} | {detail} |")
        for st in b["stages"]:
            th = st["thresholds"]
            cols = output_metrics(th)
            lines += ["", f"### Stage `{st['stage']}` on {st['provider']} ({st['precision']}): {st['verdict']}", "",
                      decode_sentence(st), "",
                      "| component | calls | " + " | ".join(f"{x.title} ({OP_SYMBOL[x.op]} {th[x.name]})" for x in cols) + " | worst output |",
                      "|---|---|" + "---|" * len(cols) + "---|"]
            for r in st["components"]:
                if not r.get("calls"):
                    lines.append(f"| {r['component']} | 0 | " + "— | " * len(cols) + "never ran |")
                    continue
                ok = {c["figure"]: c["ok"] for c in output_checks(r, th)}
                cells = []
                for x in cols:
                    judged = x.read(r) if x.figure in r else None  # None: nothing finite was measured
                    cells.append(figure_text(judged, "n/a (NaN/Inf)") + ("" if ok.get(x.figure, True) else " ❌"))
                lines.append(f"| {r['component']} | {r['calls']} | " + " | ".join(cells) + f" | {r['psnr_output']}"
                             + (f" ❌ {r['nonfinite_calls']} call(s) with NaN/Inf" if r.get("nonfinite_calls") else "") + " |")
        if b["placement"]:
            lines += ["", "Placement: " + "; ".join(
                f"{p['component']} " + ", ".join(f"{k} {v:.0%}" for k, v in sorted(p["share"].items())) for p in b["placement"])]
    return "\n".join(lines) + "\n"


def junit_cases(b: dict) -> list[dict]:
    """One case per audit check and per parity figure against its threshold."""
    cases = [{"name": f"audit.{c['id']}", "ok": c["ok"], "message": c["message"], "fix": c.get("fix", "")} for c in b["checks"]]
    for st in b["stages"]:
        for c in st["cases"]:
            cases.append({"name": f"parity.{st['stage']}.{c['name']}", "ok": c["ok"],
                          "message": f"{c['name']} = {figure_text(c['value'])}, required {c['op']} {c['threshold']} ({st['provider']}, {st['precision']})", "fix": ""})
    return cases


def render_junit(rep: dict) -> str:
    suites = []
    total = failures = 0
    for b in rep["bundles"]:
        cases = junit_cases(b)
        n_fail = sum(not c["ok"] for c in cases)
        total += len(cases)
        failures += n_fail
        classname = bundle_name(b).replace("/", ".")
        body = []
        for c in cases:
            attrs = f'classname="{xml_escape(classname, {chr(34): "&quot;"})}" name="{xml_escape(c["name"], {chr(34): "&quot;"})}"'
            if c["ok"]:
                body.append(f"    <testcase {attrs}/>")
            else:
                msg = xml_escape(c["message"], {'"': "&quot;"})
                text = xml_escape(c["message"] + (f"\nfix: {c['fix']}" if c["fix"] else "") + f"\nbundle: {b['bundle']}")
                body.append(f'    <testcase {attrs}>\n      <failure message="{msg}" type="{c["name"].split(".")[0]}">{text}</failure>\n    </testcase>')
        q = {'"': "&quot;"}
        props = f'    <properties><property name="bundle" value="{xml_escape(b["bundle"], q)}"/></properties>'
        suites.append(f'  <testsuite name="{xml_escape(bundle_name(b), q)}" tests="{len(cases)}" failures="{n_fail}" errors="0" skipped="0">\n'
                      + props + "\n" + "\n".join(body) + "\n  </testsuite>")
    return (f'<?xml version="1.0" encoding="UTF-8"?>\n<testsuites name="edge-export" tests="{total}" failures="{failures}" errors="0">\n'
            + "\n".join(suites) + "\n</testsuites>\n")

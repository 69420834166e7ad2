"""Judging recorded parity figures against thresholds, on plain JSON (no numpy, no torch).

The build (verify.parity) and the audit (manifests.audit) both judge with these functions, so a
manifest's verdict can be re-derived from its own figures by anyone with the core install.
"""

from __future__ import annotations

import math

# direction of each threshold: a "min_" threshold is stricter when higher, "max_" when lower
METRICS = ("min_cosine", "min_psnr_db", "max_abs", "min_token_agreement", "min_greedy_prefix")


def stricter(a: float, b: float, metric: str) -> float:
    return min(a, b) if metric.startswith("max_") else max(a, b)


def looser_than(recorded: dict, required: dict) -> list[dict]:
    """Metrics where ``recorded`` thresholds accept more than ``required`` (missing counts as looser)."""
    out = []
    for metric in METRICS:
        if metric not in required:
            continue
        want, got = required[metric], recorded.get(metric)
        if got is None or (got > want if metric.startswith("max_") else got < want):
            out.append({"metric": metric, "recorded": got, "required": want})
    return out


def tightened(base: dict, extra: dict | None) -> dict:
    """``base`` thresholds with ``extra`` applied where it is stricter (a policy never loosens)."""
    out = dict(base)
    for metric, value in (extra or {}).items():
        out[metric] = stricter(out[metric], value, metric) if metric in out else value
    return out


def _ok(value, threshold, op: str) -> bool:
    """A figure meets a threshold; a missing or non-finite figure never does (NaN compares false both ways)."""
    if value is None or not isinstance(value, (int, float)) or math.isnan(value):
        return False
    return value >= threshold if op == ">=" else value <= threshold


def output_checks(m: dict, th: dict) -> list[dict]:
    """One output's recorded figures against the thresholds: cosine, PSNR (None with finite calls = exact: infinite),
    max abs, and (where recorded) that every call's output was finite where the reference is."""
    nonfinite = (m.get("nonfinite_calls") or 0) + (m.get("reference_nonfinite_calls") or 0)
    finite_calls = m["calls"] - nonfinite
    psnr = m["min_psnr_db"]
    if psnr is None:
        psnr = math.inf if finite_calls > 0 else None
    checks = [
        {"metric": "cosine", "figure": "min_cosine", "value": m["min_cosine"], "threshold": th["min_cosine"], "op": ">=",
         "ok": _ok(m["min_cosine"], th["min_cosine"], ">=")},
        {"metric": "psnr_db", "figure": "min_psnr_db", "value": psnr, "threshold": th["min_psnr_db"], "op": ">=",
         "ok": _ok(psnr, th["min_psnr_db"], ">=")},
        {"metric": "max_abs", "figure": "max_abs", "value": m["max_abs"], "threshold": th["max_abs"], "op": "<=",
         "ok": _ok(m["max_abs"], th["max_abs"], "<=")},
    ]
    if "nonfinite_calls" in m:  # recorded by builds since the non-finite rule; always judged for them
        checks.append({"metric": "nonfinite", "figure": "nonfinite_calls", "value": nonfinite, "threshold": 0, "op": "<=",
                       "ok": nonfinite == 0})
    return checks


def has_decode(stage: dict) -> bool:
    """Whether a stage judged tokens (a stateless encoder's stage records ``decode.applicable: false``)."""
    return stage.get("decode", {}).get("applicable", True) is not False


def stage_failures(stage: dict, th: dict) -> list[dict]:
    """Every threshold a stage's recorded figures miss: one entry per (component, output, metric)."""
    name = stage["stage"]
    fails = []
    for comp, outs in stage["outputs"].items():
        for out, m in outs.items():
            if m["calls"] == 0:  # a graph the evaluation never ran is not verified
                fails.append({"stage": name, "component": comp, "output": out, "metric": "calls", "value": 0, "threshold": 1})
                continue
            fails += [{"stage": name, "component": comp, "output": out, "metric": c["metric"], "value": c["value"], "threshold": c["threshold"]}
                      for c in output_checks(m, th) if not c["ok"]]
    d = stage["decode"]
    if not has_decode(stage):  # a stateless encoder: no tokens to judge
        return fails
    if not _ok(d["token_agreement"], th["min_token_agreement"], ">="):
        fails.append({"stage": name, "component": "decode", "output": "tokens", "metric": "token_agreement",
                      "value": d["token_agreement"], "threshold": th["min_token_agreement"]})
    # a prompt near the largest bucket decodes fewer steps; its exact prefix is judged against those
    short = [p for p in d["per_prompt"] if p["greedy_prefix"] < min(th["min_greedy_prefix"], p["steps"])]
    if short:
        fails.append({"stage": name, "component": "decode", "output": "tokens", "metric": "greedy_prefix",
                      "value": min(p["greedy_prefix"] for p in short), "threshold": th["min_greedy_prefix"]})
    return fails

"""Judging recorded parity figures against thresholds, on plain JSON (no numpy, no torch).

The build (verify.parity) and the audit (manifests.audit) both judge with these functions, so a
manifest's verdict can be re-derived from its own figures by anyone with the core install.

Metrics are a table (`TABLE`): each row names the threshold key, whether it judges every recorded output or a
stage's decode run, the figure it reads, its direction, and the name a failure carries. Thresholds are
{metric: value}; whatever metrics a recipe sets are judged, and a new metric (waveform SNR, action error) is one
row here plus the figure its family adapter records.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable


def _psnr(m: dict):
    """A recorded min PSNR: None with finite calls is an exact match (infinite); with none it is missing."""
    if m["min_psnr_db"] is not None:
        return m["min_psnr_db"]
    bad = (m.get("nonfinite_calls") or 0) + (m.get("reference_nonfinite_calls") or 0)
    return math.inf if m["calls"] - bad > 0 else None


@dataclass(frozen=True)
class Metric:
    name: str  # the threshold key
    scope: str  # "output": judged on every output's figures; "decode": on a stage's decode record
    op: str  # ">=" (a minimum: stricter when higher) or "<=" (a maximum: stricter when lower)
    label: str  # what a failure names
    figure: str  # the key of the recorded figure it judges
    title: str  # what a report's column says
    read: Callable[[dict], object]  # the recorded figure, as judged (None where nothing finite was measured)


TABLE: dict[str, Metric] = {m.name: m for m in (
    Metric("min_cosine", "output", ">=", "cosine", "min_cosine", "min cosine", lambda m: m["min_cosine"]),
    Metric("min_psnr_db", "output", ">=", "psnr_db", "min_psnr_db", "min PSNR dB", _psnr),
    Metric("max_abs", "output", "<=", "max_abs", "max_abs", "max abs", lambda m: m["max_abs"]),
    Metric("min_token_agreement", "decode", ">=", "token_agreement", "token_agreement", "token agreement", lambda d: d["token_agreement"]),
    Metric("min_greedy_prefix", "decode", ">=", "greedy_prefix", "min_greedy_prefix", "shortest greedy prefix", lambda d: d["min_greedy_prefix"]),
)}
METRICS = tuple(TABLE)
# Figures recorded for reading, not judged: (scope, op) where op says which direction is better
INFORMATIONAL = {"p05_cosine": ("output", ">=")}


def figures(scope: str) -> dict[str, str]:
    """Every recorded figure of a scope ("output" or "decode") with its better direction (">=": higher is better)."""
    out = {m.figure: m.op for m in TABLE.values() if m.scope == scope}
    out.update({f: op for f, (sc, op) in INFORMATIONAL.items() if sc == scope})
    return out


def output_metrics(th: dict) -> list[Metric]:
    """The per-output metrics a set of thresholds judges, in table order."""
    return [m for m in TABLE.values() if m.scope == "output" and m.name in th]


def stricter(a: float, b: float, metric: str) -> float:
    return min(a, b) if TABLE[metric].op == "<=" else max(a, b)


def looser_than(recorded: dict, required: dict) -> list[dict]:
    """Metrics where ``recorded`` thresholds accept more than ``required`` (missing counts as looser)."""
    out = []
    for metric in METRICS:
        if metric not in required:
            continue
        want, got = required[metric], recorded.get(metric)
        if got is None or (got > want if TABLE[metric].op == "<=" else got < want):
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
    """One output's recorded figures against the thresholds (every per-output metric they set), and, where recorded,
    that every call's output was finite where the reference is."""
    checks = [{"metric": x.label, "figure": x.figure, "value": x.read(m), "threshold": th[x.name], "op": x.op, "ok": _ok(x.read(m), th[x.name], x.op)}
              for x in output_metrics(th)]
    if "nonfinite_calls" in m:  # recorded by builds since the non-finite rule; always judged for them
        nonfinite = (m.get("nonfinite_calls") or 0) + (m.get("reference_nonfinite_calls") or 0)
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
    if has_decode(stage):  # a stateless encoder has no tokens to judge
        fails += [{"stage": name, "component": "decode", "output": "tokens", "metric": c["metric"], "value": c["failing_value"],
                   "threshold": c["threshold"]} for c in decode_checks(stage["decode"], th) if not c["ok"]]
    return fails


def _greedy_short(d: dict, threshold) -> list[dict]:
    """Prompts whose exact greedy prefix is short: a prompt near the largest bucket decodes fewer steps and is judged
    against those."""
    return [p for p in d["per_prompt"] if p["greedy_prefix"] < min(threshold, p["steps"])]


def decode_checks(d: dict, th: dict) -> list[dict]:
    """A stage's decode record against every decode metric the thresholds set (table order). ``failing_value`` is the
    figure a failure names (for the greedy prefix: the shortest prefix among the prompts that fall short)."""
    checks = []
    for x in TABLE.values():
        if x.scope != "decode" or x.name not in th:
            continue
        value = x.read(d)
        if x.name == "min_greedy_prefix":
            short = _greedy_short(d, th[x.name])
            ok, failing = not short, (min(p["greedy_prefix"] for p in short) if short else value)
        else:
            ok, failing = _ok(value, th[x.name], x.op), value
        checks.append({"metric": x.label, "figure": x.figure, "value": value, "failing_value": failing, "threshold": th[x.name],
                       "op": x.op, "ok": ok})
    return checks

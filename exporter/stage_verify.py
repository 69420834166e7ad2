"""The verify stage: every parity point the format's backend names, measured by the family adapter, in pipeline order.

Each point opens its graphs (exporter/loaders.py) on its provider (ORT CPU, the target's own EP, or the plan's declared
emulation), hands the runners to the adapter's `measure`, and releases the sessions (and their pages) before the next
point opens its own. The result is cached by the digests of every measured artifact, the evaluation set, the
thresholds, the target and the tools. Knows no format and no family.
"""

from __future__ import annotations

import json
from pathlib import Path

from exporter.cache import artifact_digest, code_digest


def verify(build, artifacts) -> tuple[dict, dict]:
    """(parity summary, placement per component of the last point)."""
    adapter = build.adapter
    ev = adapter.evaluation()
    adapter.check_disjoint(adapter.calibration(), ev)
    points = [(p, artifacts.paths(p.artifact), _where(build, p.where)) for p in build.backend.verify_points(build.plan.precision)]
    inputs = {
        "artifacts": {p.stage: {n: artifact_digest(path) for n, path in paths.items()} for p, paths, _ in points},
        "evaluation": ev.digest,
        "thresholds": {k: v.to_json() for k, v in build.recipe.thresholds.items()},
        "target": build.target.to_json(),
        "steps": build.recipe.decode_steps,
        "tools": build.tool_subset(build.tools),
        "code": code_digest(),
    }

    def make(tmp: Path) -> dict:
        from exporter.heap import release_free_heap
        from exporter.loaders import open_graphs, provider_of
        from verify.parity import summarize

        results, placement = [], {}
        comps = build.manifest_components()
        for point, paths, target in points:
            provider = provider_of(next(iter(paths.values())), target)
            with build.log.stage("verify", f"{point.stage} on {provider}"):
                runners, pl = open_graphs(paths, comps, target, artifacts.custom_ops, budget_bytes=build.budget.session_bytes)
                results.append(adapter.measure(point.stage, provider, point.precision, runners, comps))
                placement = {n: p.to_json() for n, p in pl.items()}
                del runners  # this point's sessions (a copy of the weights each) go before the next point's open
                release_free_heap()  # and their pages go back to the OS, not only to glibc's free lists
        summary = summarize(results)
        (tmp / "parity.json").write_text(json.dumps({"summary": summary, "placement": placement}, indent=1, sort_keys=True, allow_nan=False))
        return {}

    with build.log.stage("verify"):
        r = build.cache.run("verify", inputs, make)
    build.log.hit("verify", r.hit)
    data = json.loads((r.path / "parity.json").read_text())
    data["summary"]["evaluation"] = ev.to_json()
    return data["summary"], artifacts.placement or data["placement"]


def _where(build, where: str) -> dict:
    if where == "cpu":
        return build.cpu_target()
    if where == "run-target":
        return build.run_target()
    return build.target.to_json()

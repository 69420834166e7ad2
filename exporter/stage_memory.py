"""The memory stage: the plan's estimate beside the measured peak of opening and running every final graph in a fresh
process (verify/memprobe.py), on the target's EP or its declared emulation. Knows no format and no family."""

from __future__ import annotations

from pathlib import Path

from exporter.cache import artifact_digest, code_digest


def measure_memory(build, artifacts) -> dict:
    from verify.memprobe import compare, measure

    target = build.run_target()
    # where the build's budget cannot hold every graph's session at once, the probe opens them one at a time and sums
    files = {f for p in artifacts.final.values() for f in Path(p).parent.iterdir() if f.is_file()}  # graphs may share a folder
    one_at_a_time = sum(f.stat().st_size for f in files) > build.budget.session_bytes
    inputs = {"artifacts": {n: artifact_digest(p) for n, p in artifacts.final.items()}, "target": target,
              "tools": build.tool_subset(build.tools), "code": code_digest(), "one_at_a_time": one_at_a_time}
    how = "each graph alone, summed" if one_at_a_time else "every graph"
    with build.log.stage("memory", f"peak resident memory of opening and running {how} on {target['execution_provider']}"):
        r = build.cache.run("memory", inputs, lambda tmp: {"measured": measure(artifacts.final, build.manifest_components(), target,
                                                                               build.recipe.state_layout, custom_ops=artifacts.custom_ops,
                                                                               one_at_a_time=one_at_a_time)})
    build.log.hit("memory", r.hit)
    measured = r.info["measured"]
    out = {"estimate": build.plan.memory, "measured": measured, "comparison": compare(build.plan.memory, measured)}
    if artifacts.shipped is not None and artifacts.shipped != artifacts.final:
        # the bundle ships other files than the verified graphs (weight-shared contexts this host cannot open)
        out["measured_on"] = ("the verified graphs, one context per graph: each holds its own weights, so this is above what the "
                              "bundle's shared files need; the shipped files' own footprint is measured on a device")
    return out

"""The memory stage: the plan's estimate beside the measured peak of opening and running every final graph in a fresh
process (verify/memprobe.py), on the target's EP or its declared emulation. Knows no format and no family."""

from __future__ import annotations

from exporter.cache import artifact_digest, code_digest


def measure_memory(build, artifacts) -> dict:
    from verify.memprobe import compare, measure

    target = build.run_target()
    inputs = {"artifacts": {n: artifact_digest(p) for n, p in artifacts.final.items()}, "target": target,
              "tools": build.tool_subset(build.tools), "code": code_digest()}
    with build.log.stage("memory", f"peak resident memory of opening and running every graph on {target['execution_provider']}"):
        r = build.cache.run("memory", inputs, lambda tmp: {"measured": measure(artifacts.final, build.manifest_components(), target,
                                                                               build.recipe.state_layout, custom_ops=artifacts.custom_ops)})
    build.log.hit("memory", r.hit)
    measured = r.info["measured"]
    return {"estimate": build.plan.memory, "measured": measured, "comparison": compare(build.plan.memory, measured)}

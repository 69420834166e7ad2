"""Stages of `executorch`: one program per component, lowered (and quantized in the lowering) through XNNPACK from
the family adapter's step modules, load-checked in a fresh runtime; its delegation is its placement."""

from __future__ import annotations

from pathlib import Path

from exporter.backends.base import Artifacts
from exporter.backends.onnx_stages import FLOAT_ISA
from exporter.cache import code_digest


def produce(backend, build) -> Artifacts:
    from exporter.backends.executorch_export import METHODS

    programs, reports = lower(backend, build)
    precision = build.plan.precision
    scheme = {"precision": precision, "scheme": METHODS[precision], "backend": "XnnpackBackend", "calibration": None,
              "programs": reports, **({"isa": FLOAT_ISA} if precision == "fp32" else {})}
    # placement of a program is its delegation, known from the lowering (the runtime reports none)
    placement = {n: {"by_provider": {"XnnpackBackend": r["delegation"]["delegated_nodes"], "portable": r["delegation"]["non_delegated_nodes"]},
                     "delegated_share": r["delegation"]["delegated_share"], "not_delegated": r["delegation"]["not_delegated"]}
                 for n, r in reports.items()}
    return Artifacts(float=programs, quantized=programs, final=programs, scheme=scheme,
                     component_fields={n: {"kernel_libraries": r["kernel_libraries"]} for n, r in reports.items()}, placement=placement)


def lower(backend, build) -> tuple[dict[str, Path], dict[str, dict]]:
    """One load-checked .pte per component; returns paths and lowering reports."""
    from exporter.backends.executorch_export import load_check
    from exporter.backends.executorch_export import lower as lower_program

    precision = build.plan.precision
    out, reports = {}, {}
    mcomps = {c["name"]: c for c in build.manifest_components()}
    for comp in build.components:
        constants = build.adapter.program_constants(comp)
        inputs = {"checkpoint": build.ckpt.digest, "architecture": build.recipe.architecture, "model_config": build.recipe.model_config,
                  "component": mcomps[comp.name], "precision": precision, "constants": constants,
                  "tools": build.tool_subset(backend.tools(None)), "code": code_digest()}

        def make(tmp: Path, comp=comp, constants=constants) -> dict:
            with build.adapter.graph_module(comp, pooled_mean=True) as module:  # this program's tensors only, where the adapter loads by parts
                lowered = lower_program(module, comp, precision, tmp / f"{comp.graph_name}.pte", constants)
            return {**lowered.info, "load_check": load_check(lowered.path, constants, [t.name for t in comp.inputs], lowered.info["kernel_libraries"])}

        with build.log.stage("lower", f"{comp.graph_name} -> ExecuTorch XNNPACK ({precision})"):
            r = build.cache.run("lower-executorch", inputs, make)
        build.log.hit(f"lower/{comp.name}", r.hit)
        out[comp.name] = r.path / r.info["entry"]
        reports[comp.name] = r.info
    return out, reports

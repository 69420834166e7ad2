"""ExecuTorch programs (.pte) through XNNPACK: lowering, quantization, and the load check before publishing.

One program per component, exported from the same step module as the ONNX graphs (KV state as
program inputs and outputs, the layout the manifest already states), with constant methods a
runtime can query (``get_max_context_len``, ``get_ar``, ``get_n_layers``, ``get_vocab_size``).

Precisions (the numeric scheme is the precision's; the method is this backend's):

* ``fp32``  float program, XNNPACK fp32 kernels.
* ``int8``  PT2E with the XNNPACK quantizer: int8 per-channel symmetric weights, int8 dynamic
  activations (per call), ``torchao.quantization.pt2e`` prepare/convert.
* ``8da4w`` torchao ``Int8DynamicActivationIntxWeightConfig`` (int4 weights in groups of 32,
  int8 dynamic activations) on every Linear, and ``IntxWeightOnlyConfig`` int4 groups of 32 on
  the token embedding (fused into ``quantized_decomposed::embedding_4bit`` when lowered).

The load check runs the ExecuTorch runtime itself: the program is loaded with
``Verification.InternalConsistency``, every method is loaded, constant methods must return
what the manifest says, and operators left outside XNNPACK must be on the recipe's allow-list
(gathers and small reductions that run on portable kernels); anything else fails the build with
the operator names.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass
from pathlib import Path

from exporter.backends.executorch_format import ALLOWED_UNDELEGATED
from exporter.errors import EdgeExportError
from exporter.loaders import register_kernels

GROUP_SIZE = 32
METHODS = {
    "fp32": "float (XNNPACK fp32)",
    "int8": "pt2e-xnnpack: int8 per-channel symmetric weights, int8 dynamic activations",
    "8da4w": (f"torchao 8da4w: int4 weights in groups of {GROUP_SIZE} (HQQ scales), int8 dynamic activations; "
              f"int4 embedding groups of {GROUP_SIZE}"),
}


# kernel libraries a program of each precision needs beyond XNNPACK and the portable kernels; the
# manifest records them and every loader (load check, verify, gate) registers exactly these
KERNEL_LIBRARIES = {"fp32": (), "int8": (), "8da4w": ("executorch.kernels.quantized",)}


class LoadCheckError(EdgeExportError):
    exit_code = 3  # an artifact that cannot be trusted, as a compile or parity failure


@dataclass
class Lowered:
    path: Path
    info: dict


def _example_inputs(component) -> tuple:
    import torch

    return tuple(torch.zeros(tuple(t.shape), dtype=getattr(torch, t.dtype)) for t in component.inputs)


def _quantize(module, precision: str, example: tuple):
    import torch

    if precision == "fp32":
        return module
    if precision == "int8":
        from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import XNNPACKQuantizer, get_symmetric_quantization_config
        from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

        quantizer = XNNPACKQuantizer().set_global(get_symmetric_quantization_config(is_per_channel=True, is_dynamic=True))
        gm = torch.export.export(module, example, strict=False).module()
        gm = prepare_pt2e(gm, quantizer)
        gm(*example)  # dynamic activations: one pass records the graph, no ranges are kept
        return convert_pt2e(gm)
    if precision == "8da4w":
        from torchao.quantization import Int8DynamicActivationIntxWeightConfig, IntxWeightOnlyConfig, quantize_
        from torchao.quantization.granularity import PerGroup

        module = copy.deepcopy(module)  # quantize_ rewrites modules in place; the reference must stay float
        # scales by HQQ (scale only), as ExecuTorch's own LLM export does (extension/llm/export/quantize.py)
        quantize_(module, IntxWeightOnlyConfig(weight_dtype=torch.int4, granularity=PerGroup(GROUP_SIZE), intx_choose_qparams_algorithm="hqq_scale_only"),
                  lambda m, fqn: isinstance(m, torch.nn.Embedding))
        quantize_(module, Int8DynamicActivationIntxWeightConfig(weight_dtype=torch.int4, weight_granularity=PerGroup(GROUP_SIZE),
                                                                intx_choose_qparams_algorithm="hqq_scale_only"))
        return module
    raise EdgeExportError(f"the executorch backend has no method for precision {precision!r}", f"choose one of {sorted(METHODS)}")


def delegation_report(edge_program) -> dict:
    from executorch.devtools.backend_debug import get_delegation_info

    info = get_delegation_info(edge_program.exported_program().graph_module)
    df = info.get_operator_delegation_dataframe()
    rows = {r.op_type: (int(r.occurrences_in_delegated_graphs), int(r.occurrences_in_non_delegated_graphs)) for r in df.itertuples() if r.op_type != "Total"}
    left = {op: n for op, (_, n) in rows.items() if n}
    compute = {op: n for op, n in left.items() if op not in ("getitem", "alloc")}
    delegated = sum(d for d, _ in rows.values())
    return {
        "backend": "XnnpackBackend",
        "delegated_subgraphs": int(info.num_delegated_subgraphs),
        "delegated_nodes": delegated,
        "non_delegated_nodes": sum(compute.values()),
        "delegated_share": round(delegated / max(delegated + sum(compute.values()), 1), 4),
        "not_delegated": dict(sorted(left.items())),
        "unexpected": sorted(op for op in left if op not in ALLOWED_UNDELEGATED),
    }


def lower(module, component, precision: str, out: Path, constants: dict[str, int]) -> Lowered:
    """Quantize (if asked), export, lower to XNNPACK and write ``out`` (a .pte)."""
    import torch
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import ExecutorchBackendConfig, to_edge_transform_and_lower
    from executorch.exir.passes import MemoryPlanningPass

    register_kernels(KERNEL_LIBRARIES["8da4w"])  # the AOT side of the quantized ops the fusion emits

    t0 = time.perf_counter()
    example = _example_inputs(component)
    q = _quantize(module, precision, example)
    ep = torch.export.export(q, example, strict=False)
    edge = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()], constant_methods=dict(constants))
    report = delegation_report(edge)
    if report["unexpected"]:
        raise LoadCheckError(
            f"{component.name}: operators left outside XNNPACK that no allowed kernel covers: {report['unexpected']}",
            "rewrite those ops in the step module (exporter/models) or add a justified entry to ALLOWED_UNDELEGATED (exporter/backends/executorch_format.py)",
        )
    program = edge.to_executorch(ExecutorchBackendConfig(
        extract_delegate_segments=True, do_quant_fusion_and_const_prop=True,
        memory_planning_pass=MemoryPlanningPass(alloc_graph_input=False),
    ))
    out.write_bytes(program.buffer)
    return Lowered(out, {"entry": out.name, "bytes": out.stat().st_size, "lowering_s": round(time.perf_counter() - t0, 3),
                         "delegation": report, "method": METHODS[precision], "constant_methods": dict(constants),
                         "kernel_libraries": list(KERNEL_LIBRARIES[precision])})


_LOAD_CHECK = """
import json, sys
from pathlib import Path
from exporter.backends.executorch_export import _load_check_here
from exporter.errors import EdgeExportError
try:
    print("LOADCHECK " + json.dumps(_load_check_here(Path(sys.argv[1]), json.loads(sys.argv[2]), json.loads(sys.argv[3]), json.loads(sys.argv[4]))))
except EdgeExportError as e:
    print("LOADFAIL " + json.dumps({"message": e.message, "hint": e.hint}))
"""


def load_check(path: Path, constants: dict[str, int], input_names: list[str], kernel_libraries) -> dict:
    """The load check in a fresh process, so that only the declared kernel libraries are registered."""
    import json

    from exporter.child import run_python

    p = run_python(_LOAD_CHECK, str(path), json.dumps(constants), json.dumps(input_names), json.dumps(list(kernel_libraries)), timeout_s=600)
    line = next((x for x in p.stdout.splitlines() if x.startswith("LOADCHECK ")), None)
    if p.returncode == 0 and line:
        return json.loads(line[len("LOADCHECK "):])
    fail = next((x for x in p.stdout.splitlines() if x.startswith("LOADFAIL ")), None)
    missing = sorted({x.split("Missing operator: ")[1].split()[-1] for x in p.stdout.splitlines() + p.stderr.splitlines() if "Missing operator: " in x})
    if fail and not missing:
        f = json.loads(fail[len("LOADFAIL "):])
        raise LoadCheckError(f["message"], f["hint"])
    last = next((x for x in reversed(p.stderr.strip().splitlines()) if x.strip()), f"exit {p.returncode}")
    raise LoadCheckError(
        f"{path}: the program does not load in a fresh ExecuTorch runtime"
        + (f": missing operator kernels {missing}" if missing else f": {last[:300]}"),
        "link or register the kernel library that provides them (recorded as kernel_libraries), or keep those ops in XNNPACK",
    )


def _load_check_here(path: Path, constants: dict[str, int], input_names: list[str], kernel_libraries) -> dict:
    """Load with internal-consistency verification, load every method, check constants and arity."""
    from executorch.runtime import Runtime, Verification

    register_kernels(kernel_libraries)
    rt = Runtime.get()
    try:
        program = rt.load_program(Path(path), verification=Verification.InternalConsistency)
    except Exception as e:  # the runtime raises its own error types
        raise LoadCheckError(f"{path}: ExecuTorch refused the program: {str(e).splitlines()[0]}",
                             "rebuild it; a program that does not load is never published") from None
    names = sorted(program.method_names)
    loaded = {}
    for name in names:
        try:
            method = program.load_method(name)
        except Exception as e:
            raise LoadCheckError(f"{path}: method {name!r} does not load: {str(e).splitlines()[0]}",
                                 "a missing operator kernel is the usual cause: check the delegation report") from None
        if method is None:
            raise LoadCheckError(f"{path}: method {name!r} does not load", "rebuild the program")
        loaded[name] = method
    missing = sorted(set(constants) - set(loaded)) + ([] if "forward" in loaded else ["forward"])
    if missing:
        raise LoadCheckError(f"{path}: methods missing from the program: {missing}", "rebuild the program")
    wrong = {}
    for k, v in constants.items():
        got = loaded[k].execute([])
        got = int(got[0]) if len(got) else None
        if got != v:
            wrong[k] = {"program": got, "manifest": v}
    if wrong:
        raise LoadCheckError(f"{path}: the program's metadata methods disagree with the manifest: {wrong}", "rebuild the program")
    arity = loaded["forward"].metadata.num_inputs()
    if arity != len(input_names):
        raise LoadCheckError(f"{path}: forward takes {arity} inputs, the manifest lists {len(input_names)}", "rebuild the program")
    return {"verification": "InternalConsistency", "fresh_process": True, "kernel_libraries": list(kernel_libraries), "methods": names, "constants_checked": sorted(constants), "forward_inputs": arity,
            "backends_registered": sorted(rt.backend_registry.registered_backend_names)}

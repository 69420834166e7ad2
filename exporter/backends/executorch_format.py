"""`executorch`: ExecuTorch programs (.pte) through XNNPACK, for CPU routes.

One program per component, lowered from the same step modules as the ONNX graphs (the quantization happens in the
lowering: PT2E int8, torchao 8da4w), each load-checked in a fresh runtime before anything is published. Parity on the
program itself through executorch.runtime; placement is the delegation the lowering reports.
"""

from __future__ import annotations

from exporter.backends.base import Backend, Prerequisite, VerifyPoint
from exporter.loaders import PROGRAM_PROVIDER

# operators that may stay outside the XNNPACK delegate, and why (portable or quantized kernels run them)
ALLOWED_UNDELEGATED = {
    "aten_embedding_default": "gather (token embedding, rotary tables): portable kernel",
    "torchao_dequantize_affine_default": "int4 embedding weight: fused into quantized_decomposed::embedding_4bit at emission",
    "aten_mean_dim": "RMSNorm reduction over the hidden axis: portable kernel",
    "aten_expand_copy_default": "broadcast of a rotary table or mask: portable kernel",
    "aten_unsqueeze_copy_default": "view: portable kernel",
    "getitem": "tuple access of delegate outputs (no compute)",
    "alloc": "memory planning (no compute)",
}


class ExecutorchBackend(Backend):
    name = "executorch"
    entry_suffix = ".pte"
    stages_module = "exporter.backends.executorch_stages"
    modules = ("executorch", "torchao")
    methods = {"fp32": "float", "int8": "pt2e-int8", "8da4w": "torchao-8da4w"}

    def extra_prerequisites(self, target):
        if target.accelerator.kind == "htp":  # the QNN delegate: its precisions are the delegate's, named by the check
            return executorch_qnn_missing(), True
        return [], False

    def tools(self, method):
        return ("torch", "executorch", "torchao", "transformers", "safetensors")

    def verify_points(self, precision):
        return [VerifyPoint("program", "final", precision, "target")]

    def bundle_files(self, final, graph_name, staging):
        import shutil

        entry = f"{graph_name}{final.suffix}"
        shutil.copy2(final, staging / entry)
        return entry, [entry]

    def placement_findings(self, component, provider):
        pl = component.get("placement") or {}
        found = []
        if not (pl.get("by_provider") or {}).get("XnnpackBackend"):
            found.append(f"{component['name']}: nothing delegated to XNNPACK")
        odd = sorted(op for op in pl.get("not_delegated", {}) if op not in ALLOWED_UNDELEGATED)
        if odd:
            found.append(f"{component['name']}: operators outside the delegate that no allowed kernel covers: {odd}")
        return found

    def placement_summary(self, provider):
        return "every program delegated to XNNPACK, the rest on allow-listed portable kernels"

    def final_provider(self, manifest, emulated_provider):
        return PROGRAM_PROVIDER


BACKEND = ExecutorchBackend()


# the QAIRT release executorch 1.5.1's QnnBackend is built against (executorch/backends/qualcomm/scripts/
# download_qnn_sdk.py QNN_VERSION). With the QAIRT 2.51 that onnxruntime-qnn 2.7.0 ships, its HTP device
# creation fails: "Failed to set scatter gather parameters: unknown custom config socModel 0", error 14001
# (tests/test_executorch.py re-checks the version it reads from the installed executorch).
EXECUTORCH_QAIRT = "2.37.0.250724"


def qnn_sdk_build_id(root: str) -> str | None:
    """The build id string inside $QNN_SDK_ROOT's host libQnnHtp.so (read, not loaded)."""
    import re
    from pathlib import Path

    lib = Path(root) / "lib" / "x86_64-linux-clang" / "libQnnHtp.so"
    try:
        m = re.search(rb"v2\.\d+\.\d+\.\d{6,12}", lib.read_bytes())
    except OSError:
        return None
    return m.group().decode() if m else "unknown"


def executorch_qnn_missing(environ=None) -> list[Prerequisite]:
    """What the ExecuTorch QNN delegate needs on this host, named exactly."""
    import os

    env = os.environ if environ is None else environ
    want = f"QAIRT {EXECUTORCH_QAIRT} (the SDK executorch 1.5.1's QnnBackend is built against)"
    fix = (f"install Qualcomm AI Runtime {EXECUTORCH_QAIRT}, export QNN_SDK_ROOT=<its root> and put "
           "$QNN_SDK_ROOT/lib/x86_64-linux-clang on LD_LIBRARY_PATH; the QAIRT inside onnxruntime-qnn 2.7.0 (2.51) does not work with it")
    root = env.get("QNN_SDK_ROOT")
    if not root:
        return [Prerequisite("QNN_SDK_ROOT", f"not set; the ExecuTorch QNN delegate needs {want}", fix)]
    found = qnn_sdk_build_id(root)
    if found is None:
        return [Prerequisite("QNN_SDK_ROOT", f"{root}/lib/x86_64-linux-clang/libQnnHtp.so is missing; needs {want}", fix)]
    if not found.startswith("v" + EXECUTORCH_QAIRT.rsplit(".", 1)[0]):
        return [Prerequisite("QNN_SDK_ROOT", f"{root} holds QAIRT {found}; the ExecuTorch QNN delegate needs {want}", fix)]
    return [Prerequisite("ExecuTorch QNN lowering", f"QAIRT {found} is present, but edge-export does not lower to the ExecuTorch QNN delegate yet",
                         "build the HTP target as qnn-context (the default format), or add the QnnPartitioner path (issue #5 follow-up)")]

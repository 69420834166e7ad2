"""What this host lacks to build and verify a plan: tools, execution providers, backends.

Cheap checks only (``importlib.util.find_spec``; ONNX Runtime is imported only to
list its execution providers). Each missing item names itself and the fix.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

# formats the exporter builds today (with the python modules each needs), and the issue that adds the others
IMPLEMENTED_FORMATS = {"onnx": (), "qnn-context": (), "executorch": ("executorch", "torchao"), "ryzenai-qdq": ("quark",)}
PLANNED_FORMATS: dict[str, str] = {}
PIP_FOR_MODULE = {
    "onnxruntime": "pip install 'edge-export[runtime]'",
    "onnxruntime_qnn": "pip install 'edge-export[qnn]'",
    "executorch": "pip install 'edge-export[executorch]'",
    "torchao": "pip install 'edge-export[executorch]'",
    "quark": "pip install 'edge-export[ryzenai]'",
    "nncf": "pip install 'edge-export[ryzenai]'",
}
PROVIDER_FIX = {
    "CUDAExecutionProvider": "install onnxruntime-gpu (CUDA 12) on a host with an NVIDIA GPU",
    "DmlExecutionProvider": "install onnxruntime-directml on Windows with a DirectX 12 GPU",
    "VitisAIExecutionProvider": "install AMD's Ryzen AI Software (Vitis AI EP) on a Ryzen AI PC",
}


@dataclass(frozen=True)
class Prerequisite:
    name: str  # what is missing: a module, an execution provider, a backend, an export path
    reason: str
    fix: str

    def to_json(self) -> dict:
        return {"name": self.name, "reason": self.reason, "fix": self.fix}


def _has_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _providers() -> set[str]:
    if not _has_module("onnxruntime"):
        return set()
    import onnxruntime

    names = set(onnxruntime.get_available_providers())
    # plugin EPs (onnxruntime-qnn) register devices rather than providers
    if _has_module("onnxruntime_qnn"):
        names.add("QNNExecutionProvider")
    return names


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


def missing_for(requires: tuple[str, ...], fmt: str, precision, recipe_blocked: str | None, blocked_fix: str,
                accelerator_kind: str) -> list[Prerequisite]:
    out: list[Prerequisite] = []
    qnn_delegate = fmt == "executorch" and accelerator_kind == "htp"  # its precisions are the delegate's, named below
    if qnn_delegate:
        out += executorch_qnn_missing()
    if recipe_blocked:
        out.append(Prerequisite("recipe export path", recipe_blocked, blocked_fix))
    if fmt not in IMPLEMENTED_FORMATS:
        out.append(Prerequisite(f"{fmt} backend", f"edge-export does not build {fmt} artifacts yet", PLANNED_FORMATS.get(fmt, "not planned")))
    method = precision.method_for(fmt)
    if method is None and not qnn_delegate:
        out.append(Prerequisite(
            f"{precision.name} quantizer", f"no backend produces {precision.name} ({precision.method}) as {fmt} yet",
            "build a precision the exporter implements (onnx: fp32, fp16, int8, int8-wo, int4; qnn-context: w8a16; "
            "executorch: fp32, int8, 8da4w; ryzenai-qdq: w8a16, w8a8, xint8, bf16), or add the backend",
        ))
    from recipes.base import METHOD_MODULES

    needed = IMPLEMENTED_FORMATS.get(fmt, ()) + METHOD_MODULES.get(method or "", ())
    requires = tuple(requires) + tuple(f"module:{m}" for m in dict.fromkeys(needed))
    providers = None
    for req in requires:
        kind, _, name = req.partition(":")
        if kind == "module" and not _has_module(name):
            out.append(Prerequisite(name, f"python module {name} is not installed", PIP_FOR_MODULE.get(name, f"pip install {name}")))
        elif kind == "provider":
            providers = _providers() if providers is None else providers
            if name not in providers:
                out.append(Prerequisite(name, f"ONNX Runtime on this host has no {name}", PROVIDER_FIX.get(name, "install the execution provider")))
    return out


PLACEMENT_WORDS = {"vitisai": "NPU", "gpu": "GPU", "cuda": "GPU"}


def verification_plan(target) -> dict:
    """Where parity will be measured for `target` on this host. The target's own EP when present; its declared
    `emulated_by` EP otherwise, said as such: numerics of the artifact, placement on the accelerator unqualified."""
    ep = target.execution_provider
    if target.emulated_by is None or ep in _providers():
        return {"provider": ep, "emulated": False, "emulates": None, "placement": "measured", "note": ""}
    what = PLACEMENT_WORDS.get(target.accelerator.kind, target.accelerator.kind)
    built = "quantized for" if what == "NPU" else "built for"
    return {
        "provider": target.emulated_by,
        "emulated": True,
        "emulates": ep,
        "placement": "unqualified",
        "note": (f"{built} {what} ({ep}), emulated on {target.emulated_by.removesuffix('ExecutionProvider')}, {what} placement unqualified: "
                 f"this host has no {ep}; a run on a {target.name} host records the placement"),
    }

"""What this host lacks to build and verify a plan: tools, execution providers, backends.

Cheap checks only (``importlib.util.find_spec``; ONNX Runtime is imported only to
list its execution providers). Each missing item names itself and the fix.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

# formats the exporter builds today, and the issue that adds the others
IMPLEMENTED_FORMATS = {"onnx": None, "qnn-context": None}
PLANNED_FORMATS = {"executorch": "ExecuTorch .pte backend (issue #5)", "ryzenai-qdq": "Ryzen AI Quark QDQ backend (issue #9)"}
PIP_FOR_MODULE = {
    "onnxruntime": "pip install 'edge-export[runtime]'",
    "onnxruntime_qnn": "pip install 'edge-export[qnn]'",
    "executorch": "pip install 'edge-export[executorch]'",
    "quark": "pip install 'edge-export[ryzenai]'",
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


def missing_for(requires: tuple[str, ...], fmt: str, precision, recipe_blocked: str | None,
                blocked_fix: str = "the recipe's issue adds its checkpoint pin and exporter") -> list[Prerequisite]:
    out: list[Prerequisite] = []
    if recipe_blocked:
        out.append(Prerequisite("recipe export path", recipe_blocked, blocked_fix))
    if fmt not in IMPLEMENTED_FORMATS:
        out.append(Prerequisite(f"{fmt} backend", f"edge-export does not build {fmt} artifacts yet", PLANNED_FORMATS.get(fmt, "not planned")))
    if not precision.implemented:
        out.append(Prerequisite(
            f"{precision.name} quantizer", f"no backend produces {precision.name} ({precision.method}) yet",
            "build a precision the exporter implements (fp32, int8, w8a16), or add the backend",
        ))
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

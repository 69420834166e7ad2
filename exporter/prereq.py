"""What this host lacks to build and verify a plan: tools, execution providers, backends.

Cheap checks only (``importlib.util.find_spec``; ONNX Runtime is imported only to
list its execution providers). Each missing item names itself and the fix.
"""

from __future__ import annotations

import importlib.util

from exporter.backends.base import Prerequisite
from recipes.base import PRECISIONS

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


def _has_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _providers() -> set[str]:
    from exporter.runtime import available_providers

    return available_providers()


def missing_for(requires: tuple[str, ...], fmt: str, precision, recipe_blocked: str | None, blocked_fix: str, target) -> list[Prerequisite]:
    """What this host lacks to build `precision` as `fmt` for `target`: the format's backend, its quantizer for that
    precision, the python modules and execution providers, the recipe's export path."""
    from exporter import backends

    out: list[Prerequisite] = []
    backend = backends.find(fmt)
    extra, replaces_quantizer = backend.extra_prerequisites(target) if backend else ([], False)
    out += extra
    if recipe_blocked:
        out.append(Prerequisite("recipe export path", recipe_blocked, blocked_fix))
    if backend is None:
        out.append(Prerequisite(f"{fmt} backend", f"edge-export does not build {fmt} artifacts yet", "not planned"))
    method = backend.method_for(precision) if backend else None
    if backend is not None and method is None and not replaces_quantizer:
        built = "; ".join(f"{n}: " + ", ".join(p for p, pr in sorted(PRECISIONS.items()) if backends.get(n).method_for(pr)) for n in backends.names())
        out.append(Prerequisite(
            f"{precision.name} quantizer", f"no backend produces {precision.name} ({precision.method}) as {fmt} yet",
            f"build a precision the exporter implements ({built}), or add the backend",
        ))
    needed = backend.required_modules(method) if backend else ()
    requires = tuple(requires) + tuple(f"module:{m}" for m in needed)
    providers = None
    for req in dict.fromkeys(requires):
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

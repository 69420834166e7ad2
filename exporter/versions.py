"""Exact versions of every tool that can change an artifact's numerics.

Read from installed distribution metadata, so nothing heavy is imported.
"""

from __future__ import annotations

import platform
import sys
from importlib import metadata

TOOLS = (
    "torch",
    "onnx",
    "onnxscript",
    "onnxruntime",
    "onnxruntime-qnn",
    "executorch",
    "torchao",
    "nncf",
    "amd-quark",
    "transformers",
    "safetensors",
    "numpy",
    "model-signing",
    "edge-export",
)


def tool_versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in TOOLS:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    out["python"] = platform.python_version()
    out["qairt"] = qairt_version()
    return out


def qairt_version() -> str | None:
    """QAIRT (QNN SDK) version bundled in onnxruntime-qnn, read from its package file."""
    try:
        dist = metadata.distribution("onnxruntime-qnn")
    except metadata.PackageNotFoundError:
        return None
    for f in dist.files or []:
        if str(f).endswith("onnxruntime_qnn/build_and_package_info.py"):
            text = f.read_text()
            for line in text.splitlines():
                if line.startswith("qnn_version"):
                    return line.split("=", 1)[1].strip().strip("'\"")
    return None


def host_info() -> dict[str, str]:
    return {
        "machine": platform.machine(),
        "system": platform.system(),
        "release": platform.release(),
        "python": sys.version.split()[0],
        "node": platform.node(),
    }

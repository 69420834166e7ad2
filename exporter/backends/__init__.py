"""Backends by artifact format: a lazy registry, as recipes/__init__.py is for recipes.

Each entry names a module whose BACKEND (an exporter.backends.base.Backend) describes the format, torch-free; its
stages are imported only when a build runs. Adding a format is one module (its description), one stages module, and
one line here.
"""

from __future__ import annotations

import importlib

from exporter.errors import UnknownNameError

REGISTRY: dict[str, str] = {
    "onnx": "exporter.backends.onnx_format",
    "qnn-context": "exporter.backends.qnn_format",
    "executorch": "exporter.backends.executorch_format",
    "ryzenai-qdq": "exporter.backends.ryzenai_format",
}


def names() -> list[str]:
    return sorted(REGISTRY)


def get(name: str):
    """The backend of a format, or UnknownNameError naming the known ones."""
    if name not in REGISTRY:
        raise UnknownNameError("format", name, names())
    return importlib.import_module(REGISTRY[name]).BACKEND


def find(name: str):
    """The backend of a format, or None where edge-export has none."""
    return get(name) if name in REGISTRY else None

"""Recipe registry. Each recipe module defines RECIPE; modules are imported on demand."""

from __future__ import annotations

import importlib

from exporter.errors import UnknownNameError

# name -> module; kept as names so listing recipes imports nothing heavy
REGISTRY: dict[str, str] = {
    "tiny-lm": "recipes.tiny_lm",
}

DEFAULT_RECIPE = "tiny-lm"


def recipe_names() -> list[str]:
    return sorted(REGISTRY)


def get_recipe(name: str):
    key = name.strip().lower()
    if key not in REGISTRY:
        raise UnknownNameError("recipe", name, recipe_names())
    return importlib.import_module(REGISTRY[key]).RECIPE

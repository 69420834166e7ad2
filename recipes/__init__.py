"""Recipe registry. Each recipe module defines RECIPE; modules are imported on demand."""

from __future__ import annotations

import importlib

from exporter.errors import UnknownNameError

# name -> module; kept as names so listing recipes imports nothing heavy
REGISTRY: dict[str, str] = {
    "tiny-lm": "recipes.tiny_lm",
    "tiny-spark": "recipes.spark:TINY",
    # the roadmap's five families; plan-only until their issues add a pin and exporter
    "spark": "recipes.spark",
    "qwen3-tts": "recipes.qwen3_tts",
    "minicpm-o": "recipes.minicpm_o",
    "internvla-a1": "recipes.internvla_a1",
    "qwen3.8-27b": "recipes.qwen3_8_27b",
}

# the matrix rows, in the roadmap's order
FAMILIES = ("spark", "qwen3-tts", "minicpm-o", "internvla-a1", "qwen3.8-27b")

DEFAULT_RECIPE = "tiny-lm"


def recipe_names() -> list[str]:
    return sorted(REGISTRY)


def get_recipe(name: str):
    key = name.strip().lower()
    if key not in REGISTRY:
        raise UnknownNameError("recipe", name, recipe_names())
    module, _, attr = REGISTRY[key].partition(":")
    return getattr(importlib.import_module(module), attr or "RECIPE")

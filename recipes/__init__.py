"""Recipe registry. Each recipe module defines RECIPE; modules are imported on demand."""

from __future__ import annotations

import importlib

from exporter.errors import UnknownNameError

# name -> module; kept as names so listing recipes imports nothing heavy
REGISTRY: dict[str, str] = {
    "tiny-lm": "recipes.tiny_lm",
    "tiny-spark": "recipes.spark:TINY",
    "tiny-minicpm-o": "recipes.minicpm_o:TINY",
    "tiny-lm-split": "recipes.qwen3_split:TINY",  # tiny-lm's checkpoint as split graphs the build budget can cut
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


def base_recipe(name: str) -> str:
    """The registered recipe a name belongs to: itself, or for FAMILY.GROUP (minicpm-o.vision) the family; a dot inside
    a registered name (qwen3.8-27b) is not a group separator."""
    key = name.strip().lower()
    if key in REGISTRY:
        return key
    base, dot, _ = key.rpartition(".")
    return base if dot and base in REGISTRY else key


def recipe_names() -> list[str]:
    return sorted(REGISTRY)


def get_recipe(name: str):
    """A recipe by name; ``FAMILY.GROUP`` names one component group of a multi-component recipe (minicpm-o.vision)."""
    key = name.strip().lower()
    base, dot, group = key.partition(".")
    if dot and base in REGISTRY and key not in REGISTRY:
        parent = get_recipe(base)
        groups = parent.group_recipes() if parent.group_recipes else {}
        if groups.get(group) is None:
            raise UnknownNameError("recipe group", name, [f"{base}.{g}" for g, r in groups.items() if r is not None] or recipe_names())
        return groups[group]
    if key not in REGISTRY:
        raise UnknownNameError("recipe", name, recipe_names())
    module, _, attr = REGISTRY[key].partition(":")
    return getattr(importlib.import_module(module), attr or "RECIPE")

"""The reference driver that a state layout kind calls for."""

from __future__ import annotations


def driver_for(layout: dict):
    kind = layout.get("kind")
    if kind == "kv-cache":
        from verify import lm_driver

        return lm_driver
    if kind == "kv-ring+full":
        from verify import split_lm_driver

        return split_lm_driver
    raise ValueError(f"no reference driver for state layout kind {kind!r}")

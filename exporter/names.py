"""Nearest-name suggestions for unknown recipes, targets and options."""

from __future__ import annotations

import difflib


def nearest(name: str, known: list[str], n: int = 3) -> list[str]:
    lowered = {k.lower(): k for k in known}
    hits = difflib.get_close_matches(name.lower(), list(lowered), n=n, cutoff=0.5)
    prefix = [k for k in known if k.lower().startswith(name.lower()) and k.lower() not in hits]
    return [lowered[h] for h in hits] + prefix[: max(0, n - len(hits))]

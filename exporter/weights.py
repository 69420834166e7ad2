"""Checks on loaded weights before anything is exported from them."""

from __future__ import annotations

from pathlib import Path

from exporter.errors import IntegrityError


CHECK_CHUNK = 1 << 20  # elements per slice of the finiteness check


def count_non_finite(t) -> int:
    """NaN and +-Inf values in a floating tensor, counted one slice of CHECK_CHUNK elements at a time: the check's
    temporaries stay a megabyte however large the tensor (a whole-tensor `isfinite` allocates a mask of one byte per
    element, 62 MiB for a 32000 x 2048 head)."""
    import torch

    flat = t.reshape(-1)
    bad = 0
    for i in range(0, flat.numel(), CHECK_CHUNK):
        chunk = flat[i : i + CHECK_CHUNK]
        if not bool(torch.isfinite(chunk).all()):
            bad += int((~torch.isfinite(chunk)).sum())
    return bad


def non_finite(model) -> list[tuple[str, int, int]]:
    """(tensor name, non-finite count, size) of every floating parameter or buffer holding NaN or +-Inf."""
    found = []
    modules = model.items() if isinstance(model, dict) else [("", model)]
    for prefix, m in modules:
        named = list(m.named_parameters()) + list(m.named_buffers()) if hasattr(m, "named_parameters") else []
        for name, t in named:
            if t is None or not t.is_floating_point() or t.device.type == "meta":
                continue
            bad = count_non_finite(t)
            if bad:
                found.append((f"{prefix}.{name}" if prefix else name, bad, t.numel()))
    return found


def check_finite(model, where: Path) -> None:
    """Refuse a checkpoint with a NaN or infinite weight, naming the tensors (exit 5): an artifact built from it would
    compute NaN, and a reference built from it could not tell."""
    bad = non_finite(model)
    if bad:
        names = ", ".join(f"{n} ({k} of {size})" for n, k, size in bad[:5]) + (f" and {len(bad) - 5} more" if len(bad) > 5 else "")
        raise IntegrityError(f"{where}: non-finite (NaN or Inf) weights in {names}",
                             "the checkpoint is damaged or diverged in training: use a good snapshot (its pin names the digests)")

"""Deterministic tiny checkpoints: seeded tensors of a real architecture's names and shapes, as safetensors."""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path
from typing import Callable


def safetensors_header(shapes: dict[str, tuple[int, ...]], metadata: dict[str, str]) -> bytes:
    """The header `safetensors.numpy.save_file` writes for float32 tensors of these shapes: its length, then compact
    JSON (``__metadata__`` first, tensors in name order, which is also their data order), padded with spaces to a
    multiple of 8 bytes."""
    entries, offset = {"__metadata__": metadata}, 0
    for name in sorted(shapes):
        size = 4 * math.prod(shapes[name])
        entries[name] = {"dtype": "F32", "shape": list(shapes[name]), "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(entries, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text


def write_seeded_checkpoint(directory: object, cfg: dict, shapes: dict[str, tuple[int, ...]], seed: int,
                            init: Callable[[str, tuple[int, ...], object], object]) -> None:
    """config.json and model.safetensors; `init(name, shape, rng)` draws each tensor, in sorted name order.

    Streamed: each tensor is drawn and written in turn, so a checkpoint of real dimensions (bench/) never holds more than
    its largest tensor; the bytes are those `safetensors.numpy.save_file` writes for the same tensors
    (tests/test_synth.py). Written to a temporary name and renamed, so a failed or killed run leaves no
    truncated checkpoint under the real name."""
    import numpy as np

    out = Path(str(directory))
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.Generator(np.random.PCG64(seed))
    target = out / "model.safetensors"
    partial = out / "model.safetensors.partial"
    try:
        with open(partial, "wb") as f:
            f.write(safetensors_header(shapes, {"format": "pt"}))
            for name in sorted(shapes):
                t = np.ascontiguousarray(np.asarray(init(name, shapes[name], rng)).astype("<f4"))
                if t.shape != tuple(shapes[name]):
                    raise ValueError(f"seeded tensor {name}: drew shape {t.shape}, the layout says {tuple(shapes[name])}")
                f.write(memoryview(t).cast("B"))
        partial.replace(target)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    (out / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")

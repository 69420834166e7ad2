"""Deterministic tiny checkpoints: seeded tensors of a real architecture's names and shapes, as safetensors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable


def write_seeded_checkpoint(directory: object, cfg: dict, shapes: dict[str, tuple[int, ...]], seed: int,
                            init: Callable[[str, tuple[int, ...], object], object]) -> None:
    """config.json and model.safetensors; `init(name, shape, rng)` draws each tensor, in sorted name order."""
    import numpy as np
    from safetensors.numpy import save_file

    out = Path(str(directory))
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.Generator(np.random.PCG64(seed))
    tensors = {name: np.ascontiguousarray(np.asarray(init(name, shape, rng)).astype(np.float32)) for name, shape in sorted(shapes.items())}
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")

"""The seeded-checkpoint writer streams one tensor at a time (a real-size bench checkpoint never sits in memory whole)
and writes the bytes `safetensors.numpy.save_file` writes for the same tensors, so every pin of a tiny twin holds."""

from __future__ import annotations

import numpy as np
import pytest

from recipes.synth import write_seeded_checkpoint


def _init(name, shape, rng):
    return rng.standard_normal(shape) * (2.0 if name.endswith("bias") else 1.0)


@pytest.mark.parametrize("shapes", [
    {"b.weight": (3, 2), "a.bias": (5,), "c.x": (1, 1, 7)},  # header lengths that need padding
    {"model.layers.10.w": (4, 4), "model.layers.2.w": (2, 8), "lm_head.weight": (9, 3), "z": (1,)},  # string order, not numeric
])
def test_the_streamed_writer_writes_what_save_file_writes(tmp_path, shapes):
    from safetensors import safe_open
    from safetensors.numpy import save_file

    write_seeded_checkpoint(tmp_path / "s", {"k": 1}, shapes, 11, _init)
    rng = np.random.Generator(np.random.PCG64(11))
    want = {n: np.asarray(_init(n, s, rng)).astype(np.float32) for n, s in sorted(shapes.items())}
    save_file(want, str(tmp_path / "want.safetensors"), metadata={"format": "pt"})
    assert (tmp_path / "s" / "model.safetensors").read_bytes() == (tmp_path / "want.safetensors").read_bytes()
    with safe_open(str(tmp_path / "s" / "model.safetensors"), "np") as f:
        assert f.metadata() == {"format": "pt"} and all(np.array_equal(f.get_tensor(n), want[n]) for n in shapes)
    assert sorted(p.name for p in (tmp_path / "s").iterdir()) == ["config.json", "model.safetensors"]


def test_a_tensor_of_the_wrong_shape_stops_the_writer_and_leaves_no_checkpoint(tmp_path):
    with pytest.raises(ValueError, match="b.weight"):
        write_seeded_checkpoint(tmp_path, {}, {"a": (2,), "b.weight": (3, 2)}, 1, lambda n, s, rng: rng.standard_normal((2,)))
    assert list(tmp_path.iterdir()) == []  # no checkpoint, no partial file

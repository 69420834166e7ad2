"""Calibration feeds recorded along the calibration runs: copied at the call, kept in memory up to a budget, spilled to
disk beyond it (issue #30).

A driver's state buffers (the KV ring, a full KV buffer with one head) are updated in place after a call, so a feed is
copied when it is recorded, never kept by reference. A split model's calibration runs record every call of every graph
(the KV inputs of each call among them); past `memory_bytes` the recorder writes each further feed to an `.npz` under
a hidden, owner-tagged directory of the stage cache (swept like any staging directory once its writer is dead) and
hands the quantizer a sequence that reads them back one at a time. Torch-free.
"""

from __future__ import annotations

import secrets
import shutil
from collections.abc import Sequence
from pathlib import Path

import numpy as np


class FeedList(Sequence):
    """The feeds of one graph, in call order: dicts of arrays, from memory or from spilled files."""

    def __init__(self):
        self._items: list = []  # a dict (in memory) or a Path (spilled)

    def __len__(self) -> int:
        return len(self._items)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self._load(x) for x in self._items[i]]
        return self._load(self._items[i])

    @staticmethod
    def _load(x) -> dict:
        if isinstance(x, Path):
            with np.load(x) as z:
                return {k: z[k] for k in z.files}
        return x

    @property
    def spilled(self) -> int:
        return sum(isinstance(x, Path) for x in self._items)


class Feeds(dict):
    """graph name -> FeedList, and the spill directory behind them (removed by `cleanup` once they are consumed)."""

    recorder: "FeedRecorder | None" = None

    def cleanup(self) -> None:
        if self.recorder is not None:
            self.recorder.cleanup()


class FeedRecorder:
    def __init__(self, names, memory_bytes: int | None = None, spill_parent: Path | None = None):
        self.lists = Feeds({n: FeedList() for n in names})
        self.lists.recorder = self
        self.memory_bytes = memory_bytes
        self.spill_parent = Path(spill_parent) if spill_parent is not None else None
        self.in_memory = 0
        self.spill_dir: Path | None = None
        self._count = 0

    def add(self, name: str, feeds: dict) -> None:
        copy = {k: np.array(v, copy=True) for k, v in feeds.items()}
        size = sum(a.nbytes for a in copy.values())
        lst = self.lists.setdefault(name, FeedList())
        if self.memory_bytes is None or self.spill_parent is None or self.in_memory + size <= self.memory_bytes:
            lst._items.append(copy)
            self.in_memory += size
            return
        if self.spill_dir is None:
            from exporter.atomic import owner

            self.spill_parent.mkdir(parents=True, exist_ok=True)
            self.spill_dir = self.spill_parent / f".tmp-{self.spill_parent.name}-{owner()}-{secrets.token_hex(4)}"
            self.spill_dir.mkdir()
        path = self.spill_dir / f"{self._count:07d}.npz"
        self._count += 1
        np.savez(path, **copy)
        lst._items.append(path)

    def cleanup(self) -> None:
        if self.spill_dir is not None:
            shutil.rmtree(self.spill_dir, ignore_errors=True)
            self.spill_dir = None

    def stats(self) -> dict:
        return {"feeds": sum(len(v) for v in self.lists.values()), "in_memory_bytes": self.in_memory,
                "spilled": sum(v.spilled for v in self.lists.values())}

"""Content-addressed stage cache.

A stage's key is the SHA-256 of everything that can change its result (input
digests, recipe content, target, options, calibration digest, tool versions).
An entry is a directory published atomically with a `_done.json` that lists its
files and their digests; an entry is used only if every file is still there with
the same digest, so a corrupted entry is rebuilt, never trusted.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Callable

from exporter.atomic import staging_dir
from exporter.hashing import sha256_file, sha256_json

DONE = "_done.json"


@dataclass
class StageResult:
    path: Path
    key: str
    hit: bool
    info: dict


class StageCache:
    def __init__(self, root: Path, notice=lambda message: None):
        self.root = Path(root)
        self.notice = notice  # says what a run waits for when another process builds the same entry

    def key(self, stage: str, inputs: dict) -> str:
        return sha256_json({"stage": stage, "inputs": inputs})

    def _valid(self, entry: Path) -> dict | None:
        done = entry / DONE
        if not done.is_file():
            return None
        try:
            meta = json.loads(done.read_text())
            for name, digest in meta["files"].items():
                if sha256_file(entry / name) != digest:
                    return None
        except (OSError, ValueError, KeyError):
            return None
        return meta

    def has_entry(self, stage: str, inputs: dict) -> bool:
        """Whether (stage, inputs) has a published entry (not yet checked against its digests: `run` does that)."""
        k = self.key(stage, inputs)
        return (self.root / stage / k[:2] / k / DONE).is_file()

    def run(self, stage: str, inputs: dict, build: Callable[[Path], dict | None], notice=None) -> StageResult:
        """Return the cached entry for (stage, inputs) or build it into a fresh directory. One process builds a key at
        a time: a concurrent run waits for it, then finds its entry (exporter/locks.py)."""
        from exporter.locks import held

        k = self.key(stage, inputs)
        entry = self.root / stage / k[:2] / k
        meta = self._valid(entry)
        if meta is not None:
            return StageResult(entry, k, True, meta.get("info", {}))
        with held(self.root, f"stage:{stage}:{k}", f"the {stage} stage entry {k[:12]}", notice or self.notice):
            meta = self._valid(entry)  # published while this run waited
            if meta is not None:
                return StageResult(entry, k, True, meta.get("info", {}))
            return self._build(stage, inputs, k, entry, build)

    def _build(self, stage: str, inputs: dict, k: str, entry: Path, build) -> StageResult:
        if entry.exists():
            shutil.rmtree(entry)
        with staging_dir(entry) as tmp:
            info = build(tmp) or {}
            files = {
                str(p.relative_to(tmp)): sha256_file(p) for p in sorted(tmp.rglob("*")) if p.is_file()
            }
            (tmp / DONE).write_text(json.dumps({"stage": stage, "key": k, "inputs": inputs, "files": files, "info": info}, indent=1, sort_keys=True))
        return StageResult(entry, k, False, info)


@lru_cache(maxsize=1)
def code_digest() -> str:
    """Digest of edge-export's own sources: a code change invalidates every cached stage."""
    root = Path(__file__).resolve().parent.parent
    files = sorted(p for pkg in ("exporter", "recipes", "calibration", "verify") for p in (root / pkg).rglob("*.py"))
    return sha256_json({str(p.relative_to(root)): sha256_file(p) for p in files})


def artifact_digest(entry: Path) -> str:
    """Digest of a stage output: its entry file and every file beside it (e.g. a context .bin)."""
    return sha256_json({p.name: sha256_file(p) for p in sorted(entry.parent.iterdir()) if p.is_file() and p.name != DONE})

"""Advisory locks that serialise builds of one bundle and the building of one stage-cache entry.

Two `edge-export recipe` runs into the same output root would both do all the work and race at publish; with a lock per
bundle path (and per stage-cache key) the second waits, says what it waits for, and then finds the first one's work
(cache hits, an up-to-date bundle). `fcntl.flock` on a file under `ROOT/.locks/`: the kernel releases it when the holder
dies, however it dies, so a killed build never leaves a lock behind. Process-local (flock does not coordinate across
NFS clients: a shared cache on a cluster needs the fleet issue's protocol). POSIX only; elsewhere no locking is done
and the staging renames stay the only protection (said in docs/NOTES.md).
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path
from typing import Callable

from exporter.hashing import sha256_json

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None


@contextlib.contextmanager
def held(root: Path, name: str, what: str, notice: Callable[[str], None] = lambda m: None):
    """Hold the lock `name` under `root/.locks` for the duration; `what` says what is locked (in the waiting notice)."""
    if fcntl is None:
        yield
        return
    d = Path(root) / ".locks"
    d.mkdir(parents=True, exist_ok=True)
    path = d / f"{sha256_json(name)[:32]}.lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "another process"
            notice(f"waiting for {holder}, which is building {what}")
            t0 = time.monotonic()
            fcntl.flock(fd, fcntl.LOCK_EX)
            notice(f"lock on {what} acquired after {time.monotonic() - t0:.1f}s")
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"edge-export pid {os.getpid()}".encode(), 0)
        yield
    finally:
        os.close(fd)  # releases the lock

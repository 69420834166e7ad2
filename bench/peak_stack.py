"""Where a process's resident memory peaks: a thread samples this process's RSS (and its live descendants') every `period`
seconds and keeps the main thread's Python stack at each new high-water mark, plus a coarse timeline.

Used by `parts.py --trace PATH` to find what a stage holds at its peak (bench/README.md, "Parts"). A bench tool: the
exporter does not import it.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import traceback
from pathlib import Path

from scaling import _descendants  # every live descendant (forked exporters, workers), as the Pss sampler finds them

PAGE = os.sysconf("SC_PAGE_SIZE")


def _rss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * PAGE
    except OSError:
        return 0


def _anon_file() -> tuple[int, int]:
    """This process's anonymous and file-backed resident MiB (mapped checkpoint tensors are file-backed)."""
    anon = file = 0
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                anon = int(line.split()[1]) >> 10
            elif line.startswith("RssFile:"):
                file = int(line.split()[1]) >> 10
    return anon, file


class PeakStack:
    def __init__(self, path: Path, period: float = 0.1, step_bytes: int = 16 << 20, timeline_s: float = 2.0):
        self.path, self.period, self.step, self.timeline_s = path, period, step_bytes, timeline_s
        self.main = threading.main_thread().ident
        self.peaks: list[dict] = []
        self.timeline: list[dict] = []
        self._stop = threading.Event()
        self._t0 = time.perf_counter()

    def _stack(self) -> list[str]:
        frame = sys._current_frames().get(self.main)
        return [f"{Path(f.filename).name}:{f.lineno} {f.name}" for f in traceback.extract_stack(frame)][-14:] if frame else []

    def _loop(self) -> None:
        me, best, last_t = os.getpid(), 0, -1e9
        while not self._stop.wait(self.period):
            own = _rss(me)
            kids = sum(_rss(int(c)) for c, _ in _descendants(str(me)))
            now = time.perf_counter() - self._t0
            if own > best + self.step:
                best = own
                anon, file = _anon_file()
                self.peaks.append({"t": round(now, 1), "rss_mib": own >> 20, "anon_mib": anon, "file_mib": file, "children_mib": kids >> 20,
                                   "stack": self._stack()})
            if now - last_t >= self.timeline_s:
                last_t = now
                st = self._stack()
                anon, file = _anon_file()
                self.timeline.append({"t": round(now, 1), "rss_mib": own >> 20, "anon_mib": anon, "file_mib": file, "children_mib": kids >> 20,
                                      "at": st[-4:]})
                self._write()

    def __enter__(self):
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        return self

    def _write(self) -> None:
        self.path.write_text(json.dumps({"peaks": self.peaks, "timeline": self.timeline}, indent=1) + "\n")

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self._write()

"""Give the heap that a stage freed back to the operating system.

glibc keeps freed memory in its arenas for reuse: after verify drops a stage's ONNX Runtime sessions (each holds a
prepacked copy of the weights), the build's resident set stays at that stage's high-water mark through the memory
probe and signing (bench/README.md: 2.8 x the weights at 0.5b). `malloc_trim(0)` returns the free pages of every
arena (glibc 2.8 and newer: also the pages inside the heap, by madvise). Elsewhere (musl, macOS, Windows) it does
nothing and says so.
"""

from __future__ import annotations

import gc
import sys


def release_free_heap() -> bool:
    """Collect garbage and return the free heap pages to the OS; True where glibc's malloc_trim ran."""
    gc.collect()
    return trim_heap()


def trim_heap() -> bool:
    """Return the free heap pages to the OS without collecting garbage first (what a loop frees is C memory, and a
    collection over the build's objects costs more than the trim); True where glibc's malloc_trim ran."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    try:
        trim = ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):  # not glibc
        return False
    trim.argtypes = [ctypes.c_size_t]
    trim(0)
    return True


def anon_resident_bytes() -> int | None:
    """This process's resident memory that no file backs (heap, arenas, anonymous maps); None off Linux."""
    import os

    try:
        with open("/proc/self/statm") as f:
            fields = f.read().split()
    except OSError:
        return None
    return (int(fields[1]) - int(fields[2])) * os.sysconf("SC_PAGE_SIZE")


class HeapWatch:
    """Trim the heap when this process's anonymous memory has grown by `step_bytes` since the last look that trimmed.

    glibc keeps what a loop frees for reuse; where the loop interleaves its temporaries with allocations that live on
    (the streamed reference's generation: each layer's matmul buffers between the growing KV cache and activations),
    the kept heap grows with the number of layers run, not with what is live: 0.3 to 0.9 GB at 1.5b's first
    generation, all returned by malloc_trim (bench/README.md, "Parts"). `check()` costs one read of /proc/self/statm
    and trims only after growth, so a loop can call it per block."""

    def __init__(self, step_bytes: int = 64 << 20):
        self.step = step_bytes
        self.mark = anon_resident_bytes()

    def check(self) -> None:
        now = anon_resident_bytes()
        if now is None or self.mark is None:
            return
        if now - self.mark >= self.step:
            trim_heap()
            now = anon_resident_bytes()
        self.mark = min(self.mark, now) if now - self.mark < self.step else now

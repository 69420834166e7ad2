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

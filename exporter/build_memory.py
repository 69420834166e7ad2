"""The build's memory budget (issue #30): where it comes from, how it cuts a stack into parts and what it predicts.

A build holds one part at a time: export and lowering hold the part's float32 tensors (exporter/models/streamed.py),
quantize one graph, verify one reference block and a bounded set of sessions. Its peak is therefore a fixed working
set (interpreter, torch, ONNX Runtime, a compile child) plus a multiple of the largest part's float32 bytes. The
budget is `--max-memory` when given, else what the host has available less a margin; it chooses the part size where
the target sets no per-graph limit, and it bounds the torch reference and the open sessions of verify. Torch-free.
"""

from __future__ import annotations

from dataclasses import dataclass

GiB = 1 << 30
# Interpreter + torch + transformers + onnx + ONNX Runtime imported (0.5 GiB RSS, measured with the pinned versions),
# a compile or export child with the same imports, and the heap's fragmentation: stated, not measured per host
WORKING_SET_BYTES = int(1.5 * GiB)
# Peak per float32 byte of the largest part: the part's tensors, the ONNX proto the exporter builds from them (a second
# copy) and the quantizer's float + quantized graphs at the next stage. An estimate the bench measures (bench/README.md)
PART_FACTOR = 2.5
HOST_MARGIN = 0.10  # of MemAvailable, left to the OS and other processes when no --max-memory is given


@dataclass(frozen=True)
class BuildBudget:
    bytes: int
    source: str  # "--max-memory 12.0 GiB" | "host MemAvailable 21.3 GiB less 10 %"

    @property
    def part_limit_bytes(self) -> int:
        """The largest part (float32 bytes) a build under this budget can hold."""
        return max(0, int((self.bytes - WORKING_SET_BYTES) / PART_FACTOR))

    @property
    def reference_bytes(self) -> int:
        """What the streamed torch reference may keep resident between blocks (verify)."""
        return self.part_limit_bytes

    @property
    def session_bytes(self) -> int:
        """What verify's and calibration's open sessions may hold together (graph bytes on disk)."""
        return self.part_limit_bytes

    def to_json(self) -> dict:
        return {"budget_bytes": self.bytes, "source": self.source, "working_set_bytes": WORKING_SET_BYTES,
                "part_factor": PART_FACTOR, "part_limit_bytes": self.part_limit_bytes}


# the budget of a build whose plan was made without one (tests and benches that run single stages): nothing is bounded
UNBOUNDED = BuildBudget(1 << 62, "unbounded: the plan has no build budget")


def host_available_bytes() -> int | None:
    """MemAvailable of /proc/meminfo (Linux); None where the host does not say."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def budget_for(max_memory_gib: float | None) -> BuildBudget:
    """The budget of one build: `--max-memory` when given (checked), else the host's available memory less a margin."""
    from exporter.errors import UsageError

    if max_memory_gib is not None:
        if not (isinstance(max_memory_gib, (int, float)) and max_memory_gib == max_memory_gib and 0 < max_memory_gib < 1 << 20):
            raise UsageError(f"--max-memory {max_memory_gib!r} is not a positive number of GiB", "pass the memory the build may use, e.g. --max-memory 20")
        b = int(max_memory_gib * GiB)
        if b <= WORKING_SET_BYTES:
            raise UsageError(f"--max-memory {max_memory_gib} GiB is below the build's fixed working set ({WORKING_SET_BYTES / GiB:.1f} GiB)",
                             f"give the build more than {WORKING_SET_BYTES / GiB:.1f} GiB")
        return BuildBudget(b, f"--max-memory {max_memory_gib:g} GiB")
    avail = host_available_bytes()
    if avail is None:
        return BuildBudget(1 << 62, "unbounded: the host does not report its available memory (pass --max-memory)")
    return BuildBudget(int(avail * (1 - HOST_MARGIN)), f"host MemAvailable {avail / GiB:.1f} GiB less {HOST_MARGIN:.0%}")


def estimated_peak(largest_part_fp32_bytes: int) -> int:
    return int(WORKING_SET_BYTES + PART_FACTOR * largest_part_fp32_bytes)


def measured_peak_bytes() -> dict:
    """The most resident memory this process and its reaped children reached (getrusage maxrss; the children's figure
    is the largest single child, not their sum)."""
    import resource
    import sys

    scale = 1 if sys.platform == "darwin" else 1024  # Linux reports KiB, macOS bytes
    return {"self_max_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale,
            "largest_child_max_rss_bytes": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * scale,
            "how": "getrusage ru_maxrss of the build process and of its largest reaped child"}


def recorded_budget(plan: dict) -> BuildBudget | None:
    """The budget a plan (JSON, as a manifest records it) was made under: replaying a bundle cuts its parts the same."""
    b = (plan.get("build_memory") or {}).get("budget")
    return BuildBudget(int(b["budget_bytes"]), str(b["source"])) if isinstance(b, dict) and "budget_bytes" in b else None

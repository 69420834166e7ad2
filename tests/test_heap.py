"""exporter.heap: freed heap goes back to the operating system (what keeps the build's resident set from staying at
verify's high-water mark through the memory probe and signing)."""

import subprocess
import sys

import pytest

from exporter.heap import release_free_heap

# in a fresh interpreter: 256 MiB in 64 KiB blocks (below glibc's mmap threshold, so they come from the heap), all
# freed but the last (which pins the heap's top: glibc's own trimming cannot shrink it), then the trim
_CHILD = r"""
import sys
from pathlib import Path
from exporter.heap import release_free_heap
def rss():
    return next(int(l.split()[1]) for l in Path("/proc/self/status").read_text().splitlines() if l.startswith("VmRSS:")) * 1024
blocks = [bytearray(64 << 10) for _ in range(4096)]
last = blocks[-1]
del blocks
before = rss()
ran = release_free_heap()
print(ran, before, rss())
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="malloc_trim is glibc's; elsewhere release_free_heap returns False (tested below)")
def test_freed_heap_returns_to_the_os():
    out = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True, check=True).stdout.split()
    ran, before, after = out[0] == "True", int(out[1]), int(out[2])
    assert ran
    # without the trim the 256 MiB freed stays resident (glibc keeps it for reuse); with it, most of it goes
    assert before - after > 128 << 20, (before, after)


def test_reports_whether_it_ran(monkeypatch):
    monkeypatch.setattr(sys, "platform", "darwin")
    assert release_free_heap() is False


def test_the_model_is_released_after_verify(tmp_path):
    """The build drops its torch model once verify is done (one whole copy of the weights through memory probe and
    sign); nothing else may keep it alive, and asking for it again is an error, not a silent reload."""
    import weakref

    from exporter.pipeline import prepare
    from exporter.plan import make_plan
    from exporter.targets import get_target
    from recipes import get_recipe

    recipe, target = get_recipe("tiny-lm"), get_target("cpu")
    adapter = prepare(recipe, target, make_plan(recipe, target, "fp32", None, None, None), tmp_path / "cache").adapter
    model = weakref.ref(adapter.model())
    adapter.once("reference", lambda: [adapter.model()])  # what an adapter keeps: its reference holds the model too
    assert model() is not None
    adapter.release()
    assert model() is None
    with pytest.raises(RuntimeError, match="released after verify"):
        adapter.model()


def test_non_finite_values_are_counted_slice_by_slice(monkeypatch):
    """The finiteness check reads a tensor one slice at a time (its temporaries stay small); values at a slice's first
    and last element, in the short last slice, and in a tensor smaller than one slice are all counted."""
    import torch

    from exporter import weights

    monkeypatch.setattr(weights, "CHECK_CHUNK", 7)
    t = torch.zeros(5, 9)  # 45 elements: six full slices of 7 and one of 3
    assert weights.count_non_finite(t) == 0
    flat = t.view(-1)
    for i, v in ((0, float("nan")), (6, float("inf")), (7, float("-inf")), (44, float("nan"))):
        flat[i] = v
    assert weights.count_non_finite(t) == 4
    assert weights.count_non_finite(torch.tensor([1.0, float("nan")])) == 1
    assert weights.count_non_finite(t.t()) == 4  # a non-contiguous view is counted whole


def test_heap_watch_trims_after_growth_and_not_on_live_growth(monkeypatch):
    """HeapWatch trims once anonymous memory has grown by its step since its mark; after a trim that returned nothing
    (the growth is live) it moves its mark instead of trimming on every later look."""
    from exporter import heap

    anon = [100]
    trims = []
    monkeypatch.setattr(heap, "anon_resident_bytes", lambda: anon[0])
    monkeypatch.setattr(heap, "trim_heap", lambda: trims.append(anon[0]) or anon.__setitem__(0, anon[0] - freed[0]))
    freed = [0]
    w = heap.HeapWatch(step_bytes=50)
    anon[0] = 140
    w.check()
    assert trims == []  # below the step
    anon[0], freed[0] = 160, 55  # 60 over the mark, 55 of it free heap
    w.check()
    assert trims == [160] and anon[0] == 105 and w.mark == 100
    anon[0], freed[0] = 200, 0  # live growth: trimmed once, then the mark follows it
    w.check()
    assert trims == [160, 200] and w.mark == 200
    anon[0] = 230
    w.check()
    assert len(trims) == 2
    anon[0] = 80  # memory given back: the mark comes down with it
    w.check()
    assert w.mark == 80


def test_heap_watch_does_nothing_where_the_os_does_not_report_anonymous_memory(monkeypatch):
    """Off Linux (no /proc/self/statm) the watch never trims and never fails: a memory figure it cannot read is not
    growth."""
    from exporter import heap

    trims = []
    monkeypatch.setattr(heap, "anon_resident_bytes", lambda: None)
    monkeypatch.setattr(heap, "trim_heap", lambda: trims.append(1))
    w = heap.HeapWatch(step_bytes=1)
    for _ in range(3):
        w.check()
    assert trims == [] and w.mark is None

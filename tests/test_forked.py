"""Graphs exported side by side in forked copies of the build process (exporter/forked.py)."""

import os
import signal
from pathlib import Path

import pytest

from exporter import forked
from exporter.errors import EdgeExportError


def test_outcomes_name_what_happened_to_each_copy(tmp_path):
    def ok():
        (tmp_path / "ok.txt").write_text("done")

    def raises():
        raise RuntimeError("the exporter said no")

    def killed():
        os.kill(os.getpid(), signal.SIGKILL)

    out = forked.run_forked([("ok", ok), ("raises", raises), ("killed", killed)], 2, tmp_path / "logs")
    assert [o.name for o in out] == ["ok", "raises", "killed"]
    assert out[0].ok and (tmp_path / "ok.txt").read_text() == "done"
    assert out[1].exit_code == 1 and out[1].signal is None and "the exporter said no" in out[1].tail()
    assert out[2].signal == signal.SIGKILL and not out[2].ok


def test_workers_setting(monkeypatch):
    monkeypatch.setenv(forked.WORKERS_ENV, "1")
    assert forked.workers_for(5, 1) == 1
    monkeypatch.setenv(forked.WORKERS_ENV, "3")
    assert forked.workers_for(2, 1) == 2  # never more than the pending graphs
    monkeypatch.setenv(forked.WORKERS_ENV, "many")
    with pytest.raises(EdgeExportError, match="EDGE_EXPORT_EXPORT_WORKERS='many' is not a positive integer"):
        forked.workers_for(2, 1)
    monkeypatch.delenv(forked.WORKERS_ENV)
    assert forked.workers_for(8, 1 << 62) == 1  # no host has the memory for that: one at a time


def _export(tmp: Path, monkeypatch, workers: str) -> dict[str, bytes]:
    from exporter.backends import onnx_stages
    from exporter.build import Reporter
    from exporter.pipeline import prepare
    from exporter.plan import make_plan
    from exporter.targets import get_target
    from recipes import get_recipe

    monkeypatch.setenv(forked.WORKERS_ENV, workers)
    recipe, target = get_recipe("tiny-lm"), get_target("cpu")
    plan = make_plan(recipe, target, "fp32", None, None, None)
    build = prepare(recipe, target, plan, tmp)
    paths = onnx_stages.export(build.backend, build)
    assert not any(build.log.hits.values())
    stages = []

    class Seen(Reporter):
        def stage(self, name, detail=""):
            stages.append(detail)
            return super().stage(name, detail)

    build.log.reporter = Seen()
    assert onnx_stages.export(build.backend, build) == paths and all(build.log.hits.values())  # the second time, every graph is a cache hit
    assert not any("forked" in d for d in stages)
    return {f"{n}/{f.name}": f.read_bytes() for n, p in paths.items() for f in sorted(p.parent.iterdir())}


def test_side_by_side_export_writes_the_same_bytes(tmp_path, monkeypatch):
    one = _export(tmp_path / "one", monkeypatch, "1")
    two = _export(tmp_path / "two", monkeypatch, "2")
    assert set(one) == set(two) and len(one) >= 4  # two graphs, each with its external data and _done.json
    assert one == two
    assert not list((tmp_path / "two" / "logs" / "export").iterdir())  # a copy's log goes once it succeeded


def test_a_killed_copy_is_a_named_error_and_a_failed_one_raises_its_own(tmp_path, monkeypatch):
    from exporter.backends import onnx_export

    parent = os.getpid()

    def dies(step_module, component, out, opset=18):
        if os.getpid() != parent:
            os.kill(os.getpid(), signal.SIGKILL)
        raise AssertionError("the parent must not export after a copy was killed")

    monkeypatch.setattr(onnx_export, "export_component", dies)
    with pytest.raises(EdgeExportError, match=r"(?s)exporting (prefill|decode)\w* was killed by signal 9 .*EDGE_EXPORT_EXPORT_WORKERS=1"):
        _export(tmp_path / "killed", monkeypatch, "2")

    def fails(step_module, component, out, opset=18):
        raise RuntimeError(f"unsupported operator in {component.name} (pid {os.getpid()})")

    monkeypatch.setattr(onnx_export, "export_component", fails)
    # the copy's failure is raised again by the parent, which exports the graph itself: the user sees the real error
    with pytest.raises(RuntimeError, match=rf"unsupported operator in \w+ \(pid {parent}\)"):
        _export(tmp_path / "fails", monkeypatch, "2")
    logs = list((tmp_path / "fails" / "logs" / "export").iterdir())
    assert logs and "unsupported operator" in logs[0].read_text()  # and the copy's traceback stays in its log


def test_a_copy_of_a_process_that_used_openmp_runs_parallel_kernels(tmp_path):
    """The parent's OpenMP team is gone in a forked copy; without one intra-op thread there, the copy's first
    parallel kernel waits on libgomp's barrier forever (it hung the minicpm-o build). Runs in its own interpreter
    under a timeout, so a regression fails instead of hanging the suite."""
    import subprocess
    import sys

    code = f"""
import torch
from pathlib import Path
from exporter import forked
torch.set_num_threads(2)
x = torch.ones(1 << 22)
x.cos()  # the parent's OpenMP team is now started
out = forked.run_forked([("cos", lambda: Path({str(tmp_path / 'done')!r}).write_text(str(float(torch.ones(1 << 22).cos().sum()))))],
                        1, Path({str(tmp_path / 'logs')!r}))
print(out[0].exit_code, out[0].signal)
"""
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=Path(__file__).parents[1])
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.split() == ["0", "None"] and float((tmp_path / "done").read_text()) > 2e6


# -- a stop signal during a fork is never lost --------------------------------------------------------------------------

_SIGNAL_AT_FORK = r"""
import os, signal, sys, time
from pathlib import Path
from exporter.cli import _on_signal
from exporter.errors import Interrupted
signal.signal(signal.SIGTERM, _on_signal)
# the signal arrives while the interpreter is inside os.fork(): in its at-fork callbacks, which swallow exceptions
os.register_at_fork(after_in_parent=lambda: os.kill(os.getpid(), signal.SIGTERM))
try:
    from exporter import forked
    forked.run_forked([("slow", lambda: time.sleep(60))], 1, Path(sys.argv[1]))
except Interrupted as e:
    print("INTERRUPTED", e.signum)
    sys.exit(0)
print("RAN ON")
"""


def _python(code, *args, timeout=120):
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True, timeout=timeout,
                          cwd=Path(__file__).resolve().parents[1])


def test_a_sigterm_during_the_fork_of_an_export_copy_interrupts_the_build(tmp_path):
    p = _python(_SIGNAL_AT_FORK, tmp_path / "logs")
    assert p.returncode == 0 and f"INTERRUPTED {int(signal.SIGTERM)}" in p.stdout, p.stdout + p.stderr
    assert "Exception ignored" not in p.stderr


def test_a_child_interpreter_runs_no_python_between_fork_and_exec():
    # no preexec_fn: the interpreter's at-fork callbacks (where the signal above would be lost) do not run for a child
    p = _python("import os; from exporter.child import run_python; "
                "os.register_at_fork(before=lambda: print('AT-FORK CALLBACK RAN')); "
                "print(run_python('print(6 * 7)', timeout_s=60).stdout.strip())")
    assert p.returncode == 0 and p.stdout.split() == ["42"], p.stdout + p.stderr


def test_a_child_interpreter_dies_with_its_parent(tmp_path):
    import subprocess
    import sys
    import time

    pid_file = tmp_path / "child.pid"
    parent = subprocess.Popen([sys.executable, "-c", "import sys; from exporter.child import run_python; "
                               "run_python('import os, sys, time; open(sys.argv[1], \"w\").write(str(os.getpid())); time.sleep(120)', "
                               "sys.argv[1], timeout_s=None)", str(pid_file)], cwd=Path(__file__).resolve().parents[1])
    try:
        deadline = time.time() + 60
        while time.time() < deadline and not (pid_file.exists() and pid_file.read_text()):
            time.sleep(0.1)
        child = int(pid_file.read_text())
        os.kill(child, 0)  # alive while its parent is
        parent.kill()
        parent.wait()
        deadline = time.time() + 10
        while time.time() < deadline and Path(f"/proc/{child}").exists():
            time.sleep(0.1)
        assert not Path(f"/proc/{child}").exists(), "the child interpreter outlived its killed parent"
    finally:
        parent.kill()

"""Run independent jobs of a stage in forked copies of the build process (Linux), a few at a time.

For the export stage: torch.onnx's exporter and onnxscript's optimizer are single-threaded Python (about two thirds
of an export is onnxscript's rewrite-rule matching, bench/README.md), so graphs export side by side on the host's
cores; and each copy's memory (the weights it touched, what the exporter keeps alive after it returns) goes back to
the operating system when it exits, instead of staying resident in the build through quantize and verify. A job
publishes its result into the stage cache; the parent reads it back from there (a job that failed is run again in
the parent, which then raises the real error). A forked copy shares what the parent had already loaded, copy on
write, and dies with the parent.
"""

from __future__ import annotations

import os
import signal
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from exporter.atomic import owner
from exporter.errors import EdgeExportError

WORKERS_ENV = "EDGE_EXPORT_EXPORT_WORKERS"


@dataclass(frozen=True)
class Outcome:
    name: str
    exit_code: int | None  # 0: done; 1: the job raised (its traceback is in the log)
    signal: int | None  # killed (9 is usually the kernel's out-of-memory killer)
    log: Path

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    def tail(self, lines: int = 5) -> str:
        try:
            text = [ln for ln in self.log.read_text(errors="replace").splitlines() if ln.strip()]
        except OSError:
            text = []
        return "\n    ".join(text[-lines:] or ["no output"])


def _mem_available() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return None


def can_fork() -> bool:
    """Whether exports may run in forked copies here (Linux: fork after torch and ONNX Runtime are loaded is what this
    module is tested on)."""
    return hasattr(os, "fork") and sys.platform.startswith("linux")


def workers_set() -> bool:
    """Whether $EDGE_EXPORT_EXPORT_WORKERS decides the number of export copies (rather than cores and memory)."""
    return bool(os.environ.get(WORKERS_ENV, "").strip())


def workers_for(pending: int, per_job_bytes: int, budget_bytes: int | None = None) -> int:
    """How many jobs run at once: $EDGE_EXPORT_EXPORT_WORKERS if set (1 = in the build process, as before), else
    one per core this process may use, no more than the pending jobs, and no more than the available memory (and the
    build's budget, `budget_bytes`, where it has one) holds at `per_job_bytes` each. 1 also on hosts without fork (the
    jobs then run in the build process)."""
    if workers_set():
        raw = os.environ[WORKERS_ENV].strip()
        try:
            n = int(raw)
            if n < 1:
                raise ValueError
        except ValueError:
            raise EdgeExportError(f"{WORKERS_ENV}={raw!r} is not a positive integer",
                                  f"set {WORKERS_ENV} to how many graphs may export at once (1: one at a time, in the build process)") from None
        return min(n, max(pending, 1)) if hasattr(os, "fork") else 1
    if not can_fork():
        return 1
    cores = len(os.sched_getaffinity(0))
    n = min(cores, pending)
    avail = _mem_available()
    if budget_bytes is not None:
        avail = budget_bytes if avail is None else min(avail, budget_bytes)
    if avail is not None and per_job_bytes > 0:
        n = min(n, int(avail // per_job_bytes))
    return max(n, 1)


_STOPS = (signal.SIGINT, signal.SIGTERM)


def _child(fn: Callable[[], None], log: Path, parent: int, mask: set) -> None:  # pragma: no cover - runs in the forked copy
    code = 1
    try:
        for sig in _STOPS:  # the parent kills its copies when it is stopped; a copy stops as the signal says
            signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        from exporter.child import die_with

        die_with(parent)
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        sys.stdout = open(1, "w", buffering=1, closefd=False)
        sys.stderr = open(2, "w", buffering=1, closefd=False)
        if "torch" in sys.modules:
            # the parent's OpenMP team does not exist in a forked copy: a parallel region would wait for it forever
            # (libgomp's barrier; seen on the minicpm-o harness). One intra-op thread runs every kernel inline, as
            # PyTorch's DataLoader does in its forked workers; the exporter is single-threaded Python anyway.
            sys.modules["torch"].set_num_threads(1)
        fn()
        code = 0
    except BaseException:  # noqa: BLE001 - everything goes to the log; the parent reruns the job to raise it
        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


LOG_KEEP_S = 24 * 3600  # a dead run's logs (a failed copy's traceback) stay a day for its record's reader


def sweep_logs(log_dir: Path, keep_s: float = LOG_KEEP_S) -> list[Path]:
    """Remove the export logs of runs that are provably dead and older than `keep_s`."""
    import re

    from exporter.atomic import owner_alive

    removed = []
    pat = re.compile(r"-(\d+)x(\d+)-\d+\.log$")
    for p in log_dir.glob("*.log"):
        m = pat.search(p.name)
        try:
            old = time.time() - p.stat().st_mtime > keep_s
        except OSError:
            continue
        if m and old and not owner_alive(int(m.group(1)), int(m.group(2))):
            p.unlink(missing_ok=True)
            removed.append(p)
    return removed


def run_forked(jobs: list[tuple[str, Callable[[], None]]], workers: int, log_dir: Path) -> list[Outcome]:
    """Run each (name, fn) in a forked copy, at most `workers` at once; returns their outcomes in job order.
    If the parent is interrupted, every running copy is killed before the exception goes on."""
    log_dir.mkdir(parents=True, exist_ok=True)
    sweep_logs(log_dir)
    waiting = list(enumerate(jobs))
    running: dict[int, tuple[int, str, Path]] = {}
    done: dict[int, Outcome] = {}
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        while waiting or running:
            while waiting and len(running) < workers:
                i, (name, fn) = waiting.pop(0)
                log = log_dir / f"{name}-{owner()}-{i}.log"
                # SIGINT/SIGTERM wait while the interpreter forks: its at-fork callbacks swallow exceptions, so an
                # Interrupted raised in one would be lost and the build would go on to publish
                parent, mask = os.getpid(), signal.pthread_sigmask(signal.SIG_BLOCK, _STOPS)
                try:
                    pid = os.fork()
                    if pid == 0:  # pragma: no cover - the forked copy
                        _child(fn, log, parent, mask)
                    running[pid] = (i, name, log)
                finally:
                    signal.pthread_sigmask(signal.SIG_SETMASK, mask)
            for pid in list(running):
                got, status = os.waitpid(pid, os.WNOHANG)
                if got == 0:
                    continue
                i, name, log = running.pop(pid)
                sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
                done[i] = Outcome(name, os.WEXITSTATUS(status) if os.WIFEXITED(status) else None, sig, log)
            if running:
                time.sleep(0.05)
    finally:
        for pid in running:
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except OSError:
                pass
    return [done[i] for i in range(len(jobs))]

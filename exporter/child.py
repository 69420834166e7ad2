"""Run a snippet of Python in a fresh interpreter rooted at the project: for probes whose crash, or whose
process-wide registrations, must not reach the caller (QNN context loads, ExecuTorch load checks), and for
passes whose memory must go back to the operating system when they end (graph quantization)."""

from __future__ import annotations

import ctypes
import signal
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _die_with_parent() -> None:  # pragma: no cover - runs in a child
    """A killed build takes its workers with it (Linux): no orphan keeps writing into a cache entry."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def die_with(parent: int) -> None:  # pragma: no cover - runs first in a child interpreter
    """Ask to be killed with `parent`; and if it already died before the request was made, go now."""
    import os

    _die_with_parent()
    if os.getppid() != parent:
        os._exit(1)


def run_python(code: str, *args: str, timeout_s: int | None, cwd: Path | None = None, python: str | None = None) -> subprocess.CompletedProcess:
    """`code` in a fresh interpreter that imports this project; `cwd`: its working directory (default the project's);
    `python`: another environment's interpreter (default this one's).

    The child asks to die with this process from its first line, not from a `preexec_fn`: Python code between fork and
    exec runs the interpreter's at-fork callbacks, where a SIGTERM's Interrupted would be swallowed (and preexec_fn is
    unsafe with threads)."""
    import os

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH", "")]))}
    if sys.platform.startswith("linux"):
        code = f"import exporter.child as _c; _c.die_with({os.getpid()})\n{code}"
    return subprocess.run([python or sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=cwd or ROOT, timeout=timeout_s,
                          env=env)


RESULT = "EDGE_EXPORT_RESULT="  # the line a child interpreter prints its JSON result on


def child_result(p: subprocess.CompletedProcess) -> dict | None:
    """The JSON of a child interpreter's last RESULT line, or None where it failed or printed none."""
    import json

    line = next((ln for ln in reversed(p.stdout.splitlines()) if ln.startswith(RESULT)), None)
    return json.loads(line[len(RESULT):]) if p.returncode == 0 and line is not None else None


def child_failure(p: subprocess.CompletedProcess, how: str | None = None) -> str:
    """How a child interpreter ended (or `how`) and the last lines of its stderr, for an error message."""
    tail = [ln for ln in p.stderr.splitlines() if ln.strip()][-5:] or ["no output"]
    how = how or (f"killed by signal {-p.returncode}" if p.returncode < 0 else f"exit {p.returncode}")
    return f"({how}):\n    " + "\n    ".join(tail)

"""Run a snippet of Python in a fresh interpreter rooted at the project: for probes whose crash, or whose
process-wide registrations, must not reach the caller (QNN context loads, ExecuTorch load checks)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_python(code: str, *args: str, timeout_s: int) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=ROOT, timeout=timeout_s)

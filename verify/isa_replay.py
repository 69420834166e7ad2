"""Replay a CPU language-model bundle's graphs on the kernel path of another instruction-set level.

A parity verdict is measured on one host; a CPU target promises an ISA baseline (exporter/data/targets.toml). This
module runs the bundle's graphs through the manifest's own driver over fixed prompts and records every output of
every call, natively or inside ``qemu-user`` emulating a CPU model of the baseline (QEMU's TCG implements up to
AVX2 on x86-64, so ``-cpu Haswell-noTSX`` is exactly the AVX2/FMA path without VNNI or AVX-512; ``cortex-a57`` is
an armv8.0-a core without dotprod). ONNX Runtime picks its kernels by CPUID, which QEMU answers for the emulated
model, so the emulated run takes the baseline's real kernels, not a model of them. Outputs that are equal on both
paths mean the recorded verdict holds on the baseline too.

Torch-free (numpy and onnxruntime). ``python -m verify.isa_replay BUNDLE OUT.npz`` is the child both sides run.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

# QEMU CPU models that stand for a baseline (the oldest core of that level QEMU's TCG emulates)
QEMU_MODELS = {"x86-64-v3": ("qemu-x86_64", "Haswell-noTSX"), "armv8.0-a": ("qemu-aarch64", "cortex-a57")}
DEFAULT_PROMPTS = ((3, 1, 4, 1, 5, 9, 2, 6), tuple(range(40)))


def replay(bundle: Path, prompts=DEFAULT_PROMPTS, steps: int = 12, graphs: dict[str, Path] | None = None) -> dict:
    """{call index/component/output: array} for greedy generation over `prompts` through the bundle's graphs
    (`graphs` overrides a component's graph file, for experiments), on this process's CPU kernels."""
    import numpy as np

    from exporter.runtime import open_session
    from verify.drivers import driver_for

    bundle = Path(bundle)
    manifest = json.loads((bundle / "manifest.json").read_text())
    layout = manifest["state_layout"]
    driver = driver_for(layout)
    cpu = {**manifest["target"], "execution_provider": "CPUExecutionProvider"}
    runners, specs = {}, {}
    for c in manifest["components"]:
        path = (graphs or {}).get(c["name"], bundle / c["entry"])
        runners[c["name"]], _ = open_session(path, cpu)
        specs[c["name"]] = driver.GraphSpec.from_manifest_component(c)
    out: dict[str, np.ndarray] = {}
    calls = [0]

    def record(step):
        for name, value in step.outputs.items():
            out[f"{calls[0]:04d}/{step.component}/{name}"] = np.asarray(value)
        calls[0] += 1

    for prompt in prompts:
        driver.generate(runners, specs, layout, list(prompt), steps, on_step=record)
    return out


def qemu_for(baseline: str) -> list[str] | None:
    """The qemu-user command prefix that emulates `baseline`, or None when qemu-user is not installed."""
    binary, model = QEMU_MODELS[baseline]
    exe = shutil.which(binary)
    return [exe, "-cpu", model] if exe else None


def run_child(bundle: Path, out: Path, baseline: str | None = None, graphs: dict[str, Path] | None = None,
              timeout_s: int = 900) -> Path:
    """Replay in a fresh interpreter, natively (`baseline` None) or under qemu-user emulating `baseline`."""
    python = Path(sys.executable)
    cmd = [str(python), "-m", "verify.isa_replay", str(bundle), str(out), json.dumps({k: str(v) for k, v in (graphs or {}).items()})]
    if baseline is not None:
        prefix = qemu_for(baseline)
        if prefix is None:
            raise FileNotFoundError(f"{QEMU_MODELS[baseline][0]} is not installed (Debian/Ubuntu: apt-get install qemu-user)")
        # -0 keeps argv[0] the venv's python, so the emulated interpreter finds the same site-packages
        cmd = prefix + ["-0", str(python), str(python.resolve())] + cmd[1:]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=env, cwd=Path(__file__).resolve().parent.parent)
    if p.returncode != 0:
        raise RuntimeError(f"replay {'under ' + ' '.join(cmd[:3]) if baseline else 'natively'} failed ({p.returncode}):\n{p.stderr[-3000:]}")
    return out


def compare(a: dict, b: dict) -> dict:
    """Bit-identity and the largest difference between two replays of the same calls."""
    import numpy as np

    if sorted(a) != sorted(b):
        return {"same_calls": False, "identical": False, "max_abs": None, "differing": sorted(set(a) ^ set(b))[:10]}
    diffs = {k: float(np.max(np.abs(a[k].astype(np.float64) - b[k].astype(np.float64)))) if a[k].size else 0.0 for k in a}
    differing = sorted(k for k in a if not np.array_equal(a[k], b[k]))
    return {"same_calls": True, "identical": not differing, "max_abs": max(diffs.values(), default=0.0), "calls": len({k.split('/')[0] for k in a}),
            "differing": differing[:10], "differing_count": len(differing)}


def load(path: Path) -> dict:
    import numpy as np

    with np.load(path) as z:
        return {k: z[k] for k in z.files}


def _main(argv: list[str]) -> None:
    import numpy as np

    bundle, out = Path(argv[0]), Path(argv[1])
    graphs = {k: Path(v) for k, v in json.loads(argv[2]).items()} if len(argv) > 2 else None
    np.savez(out, **replay(bundle, graphs=graphs))


if __name__ == "__main__":
    _main(sys.argv[1:])

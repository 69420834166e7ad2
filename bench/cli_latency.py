"""CLI responsiveness: wall time of `edge-export --help`, `plan` and `audit`, each in a fresh interpreter, and
whether the command imported torch (it must not: those commands run where torch is absent or slow to import).

    python bench/cli_latency.py BUNDLE [--reps 5] [--json OUT.json]

BUNDLE: any signed bundle to audit (e.g. artifacts/tiny-lm/qcs6490/w8a16 after the README's first command).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROBE = """
import sys
from exporter.cli import main
sys.argv = ["edge-export", *sys.argv[1:]]
try:
    main()
except SystemExit:
    pass
heavy = sorted(m for m in ("torch", "transformers", "executorch", "onnx", "quark", "nncf") if m in sys.modules)
print("HEAVY=" + ",".join(heavy), file=sys.stderr)
"""


def run(args: list[str]) -> tuple[float, list[str], int]:
    t = time.perf_counter()
    p = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - t
    line = next((ln for ln in p.stderr.splitlines() if ln.startswith("HEAVY=")), "HEAVY=?")
    return wall, [m for m in line[6:].split(",") if m], p.returncode


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("bundle", type=Path)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    commands = {
        "edge-export --help": ["--help"],
        "edge-export plan tiny-lm --target qcs6490": ["plan", "tiny-lm", "--target", "qcs6490"],
        "edge-export plan spark --target sm8750 --json": ["plan", "spark", "--target", "sm8750", "--json"],
        f"edge-export audit {a.bundle}": ["audit", str(a.bundle)],
    }
    rows = {}
    for _ in range(a.reps):  # interleaved
        for name, args in commands.items():
            wall, heavy, rc = run(args)
            r = rows.setdefault(name, {"walls": [], "heavy_imports": heavy, "exit_codes": set()})
            r["walls"].append(wall)
            r["exit_codes"].add(rc)
    out = {name: {"median_s": round(statistics.median(r["walls"]), 3), "min_s": round(min(r["walls"]), 3),
                  "heavy_imports": r["heavy_imports"], "exit_codes": sorted(r["exit_codes"])} for name, r in rows.items()}
    base = subprocess.run([sys.executable, "-c", "pass"], capture_output=True)
    t = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], capture_output=True)
    out["python -c pass (interpreter start)"] = {"median_s": round(time.perf_counter() - t, 3), "heavy_imports": [], "exit_codes": [base.returncode]}
    text = json.dumps(out, indent=1)
    print(text)
    if a.json:
        a.json.write_text(text + "\n")
    heavy = {name: r["heavy_imports"] for name, r in out.items() if r["heavy_imports"]}
    if heavy:
        sys.exit(f"these commands imported heavy modules: {heavy}")


if __name__ == "__main__":
    main()

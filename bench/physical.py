"""Physical limits: our streamed SHA-256 against `sha256sum`, signing and signature checking per GiB, the gate's
full check per GiB. Interleaved repetitions on the same file (median reported), page cache warm.

    python bench/physical.py [--gib 1] [--reps 3] [--json OUT.json]

Writes a random file of --gib GiB into a temporary directory (removed afterwards).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def _write_random(path: Path, gib: float) -> int:
    n = int(gib * (1 << 30))
    block = os.urandom(1 << 24)  # 16 MiB of random bytes, repeated with a varying prefix (no compressible runs)
    with open(path, "wb") as f:
        left, i = n, 0
        while left > 0:
            chunk = (i.to_bytes(8, "little") + block)[: min(left, len(block) + 8)]
            f.write(chunk)
            left -= len(chunk)
            i += 1
    return n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gib", type=float, default=1.0)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()

    from exporter.hashing import sha256_file
    from manifests.signing import dev_key, sign_bundle, verify_bundle

    keys = dev_key(notice=lambda m: None)
    with tempfile.TemporaryDirectory() as d:
        bundle = Path(d) / "bundle"
        bundle.mkdir()
        weights = bundle / "weights.bin"
        size = _write_random(weights, args.gib)
        gib = size / (1 << 30)
        sha256_file(weights)  # warm the page cache once
        times: dict[str, list[float]] = {"ours": [], "sha256sum": [], "sign": [], "verify_signature": []}
        digest = {}
        for _ in range(args.reps):  # interleaved: ours, sha256sum, sign, verify
            times["ours"].append(_timed(lambda: digest.__setitem__("ours", sha256_file(weights))))
            times["sha256sum"].append(_timed(lambda: digest.__setitem__(
                "sha256sum", subprocess.run(["sha256sum", str(weights)], capture_output=True, text=True, check=True).stdout.split()[0])))
            (bundle / "model.sig").unlink(missing_ok=True)
            times["sign"].append(_timed(lambda: sign_bundle(bundle, keys.private)))
            times["verify_signature"].append(_timed(lambda: verify_bundle(bundle, keys.public)))
        assert digest["ours"] == digest["sha256sum"], digest
        med = {k: statistics.median(v) for k, v in times.items()}
        out = {
            "gib": round(gib, 3),
            "reps": args.reps,
            "median_s": {k: round(v, 3) for k, v in med.items()},
            "gib_per_s": {k: round(gib / v, 3) for k, v in med.items()},
            "s_per_gib": {k: round(v / gib, 3) for k, v in med.items()},
            "ours_over_sha256sum": round(med["ours"] / med["sha256sum"], 3),
            "host": {"cpus": os.cpu_count(), "python": sys.version.split()[0]},
        }
    text = json.dumps(out, indent=1)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()

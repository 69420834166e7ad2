"""Run one CPU bundle's graphs on the kernel paths of other instruction sets and compare every output (issue #27).

x86-64: natively, and under qemu-user as a Haswell core (AVX2 + FMA, no AVX-512, no VNNI: the x86-64-v3 baseline).
arm64: under qemu-aarch64 as cortex-a57 (armv8.0 NEON), neoverse-n1 (dotprod), a64fx (SVE) and `max` (i8mm, SVE2, SME),
with a Debian bookworm arm64 Python 3.11 and the aarch64 wheels of the pinned numpy/onnxruntime. ONNX Runtime picks its
kernels by CPUID / HWCAP, which QEMU answers for the emulated core, so each run takes that core's real kernels.
The runs replay the bundle through its manifest's own driver (verify/isa_replay.py) over fixed prompts.

Needs root (apt-get, and `unshare --mount` to show the emulated arm64 Python an arm64 /proc/cpuinfo: ORT's cpuinfo
library crashes reading the host's x86 one under qemu-user 7.2) and qemu-user (apt-get install qemu-user).

    python bench/isa_paths.py --bundle artifacts/tiny-lm/cpu-x86-linux/int8 --control artifacts/tiny-lm/cpu-x86-linux/fp32 \
        --json bench/results/isa_paths.json

`--control FP32_BUNDLE` also replays that bundle's graphs quantized the way int8 was built before issue #27 (int8 weights,
U8S8 products), to show which paths those differ on.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

ARM64_DEBS = ("python3.11-minimal libpython3.11-minimal libpython3.11-stdlib libc6 libexpat1 zlib1g libffi8 libssl3 libbz2-1.0 "
              "liblzma5 libstdc++6 libgcc-s1 libsqlite3-0 libncursesw6 libtinfo6 libreadline8 libuuid1 libcrypt1 libnsl2 libtirpc3 "
              "libdb5.3").split()
ARM64_CORES = ("cortex-a57", "neoverse-n1", "a64fx", "max")
ARM64_CPUINFO = "".join(f"processor\t: {i}\nFeatures\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 cpuid\nCPU implementer\t: 0x41\n"
                        f"CPU architecture: 8\nCPU variant\t: 0x1\nCPU part\t: 0xd07\nCPU revision\t: 0\n\n" for i in range(2))


def _pins() -> dict[str, str]:
    import re
    import tomllib

    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["runtime"]
    return dict(re.match(r"([A-Za-z0-9_.-]+)==(\S+)", d).groups() for d in deps)


def arm64_env(work: Path) -> dict:
    """A Debian arm64 Python 3.11 (unpacked, not installed) and the aarch64 wheels of the runtime pins."""
    root, site, debs = work / "root", work / "site", work / "debs"
    if not (root / "usr/bin/python3.11").is_file():
        debs.mkdir(parents=True, exist_ok=True)
        subprocess.run(["dpkg", "--add-architecture", "arm64"], check=True)
        subprocess.run(["apt-get", "update", "-qq"], check=True)
        subprocess.run(["apt-get", "download", *(f"{d}:arm64" for d in ARM64_DEBS)], cwd=debs, check=True)
        for d in sorted(debs.glob("*.deb")):
            subprocess.run(["dpkg", "-x", str(d), str(root)], check=True)
    if not (site / "onnxruntime").is_dir():
        wheels = work / "wheels"
        reqs = [f"{k}=={v}" for k, v in _pins().items()]
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--dest", str(wheels), "--only-binary=:all:", "--python-version", "3.11",
                        "--platform", "manylinux2014_aarch64", "--platform", "manylinux_2_28_aarch64", "--platform", "manylinux_2_27_aarch64", *reqs],
                       check=True)
        import zipfile

        for w in sorted(wheels.glob("*.whl")):
            zipfile.ZipFile(w).extractall(site)
    (work / "cpuinfo").write_text(ARM64_CPUINFO)
    return {"root": root, "site": site, "cpuinfo": work / "cpuinfo"}


def replay_arm64(env: dict, core: str, bundle: Path, out: Path, graphs: dict | None) -> Path:
    inner = ["qemu-aarch64", "-L", str(env["root"]), "-cpu", core, "-E", f"PYTHONPATH={env['site']}:{ROOT}",
             "-E", f"PYTHONHOME={env['root'] / 'usr'}", "-E", "OMP_NUM_THREADS=1", str(env["root"] / "usr/bin/python3.11"),
             "-m", "verify.isa_replay", str(bundle), str(out), json.dumps({k: str(v) for k, v in (graphs or {}).items()})]
    cmd = ["unshare", "--mount", "sh", "-c", f"mount --bind {env['cpuinfo']} /proc/cpuinfo && exec \"$@\"", "sh", *inner]
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=3600)
    if p.returncode != 0:
        raise RuntimeError(f"arm64 {core} replay failed ({p.returncode}): {p.stderr[-2000:]}")
    return out


def u8s8_graphs(fp32_bundle: Path, dest: Path) -> dict:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    manifest = json.loads((fp32_bundle / "manifest.json").read_text())
    out = {}
    for c in manifest["components"]:
        dst = dest / f"{c['name']}_u8s8.onnx"
        quantize_dynamic(str(fp32_bundle / c["entry"]), str(dst), weight_type=QuantType.QInt8, per_channel=True)
        out[c["name"]] = dst
    return out


def summarize(ref: dict, other: dict) -> dict:
    import numpy as np

    from verify.isa_replay import compare

    r = compare(ref, other)
    logits = sorted(k for k in ref if k.endswith("/logits"))
    same_tokens = [bool(np.array_equal(ref[k].argmax(-1), other[k].argmax(-1))) for k in logits]
    r["argmax_agreement"] = sum(same_tokens) / max(len(same_tokens), 1)
    return {k: r[k] for k in ("identical", "max_abs", "differing_count", "argmax_agreement", "calls")}


def main() -> None:
    from verify.isa_replay import load, run_child

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bundle", type=Path, required=True)
    ap.add_argument("--control", type=Path, help="fp32 bundle of the same model: also replay its U8S8-quantized graphs")
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "edge-export-isa")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    variants = {"bundle": None}
    if args.control:
        variants["u8s8-control"] = u8s8_graphs(args.control, args.work)
    env = arm64_env(args.work / "arm64")
    rows = []
    for name, graphs in variants.items():
        ref = load(run_child(args.bundle, args.work / f"{name}-native.npz", graphs=graphs))
        paths = {"x86-64 Haswell (AVX2, no VNNI)": lambda o, g=graphs: run_child(args.bundle, o, "x86-64-v3", graphs=g)}
        for core in ARM64_CORES:
            paths[f"arm64 {core}"] = lambda o, c=core, g=graphs: replay_arm64(env, c, args.bundle, o, g)
        for label, run in paths.items():
            out = args.work / f"{name}-{label.split()[0]}-{label.split()[1]}.npz"
            rows.append({"graphs": name, "path": label, **summarize(ref, load(run(out)))})
            print(json.dumps(rows[-1]), flush=True)
    from exporter.hostcpu import host_cpu

    result = {"bundle": str(args.bundle), "reference": {"path": "native", "host_cpu": host_cpu()}, "rows": rows}
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    print("| graphs | path | identical to native | max abs diff | argmax agreement |\n|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['graphs']} | {r['path']} | {r['identical']} | {r['max_abs']:.3g} | {r['argmax_agreement']:.3f} |")


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()

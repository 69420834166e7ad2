"""Build a fixed set of cells and record what a refactor must not change: every parity figure and every graph's bytes.

    python bench/equivalence.py --out /tmp/eq-before --json bench/results/equivalence-before.json   # on the old code
    python bench/equivalence.py --out /tmp/eq-after --json /tmp/after.json --compare bench/results/equivalence-before.json

Cells (issue #29): tiny-lm on cpu and qcs6490, tiny-spark on cpu, qcs6490 and cpu-arm64 (ExecuTorch, fp32 and 8da4w at
context 32), tiny-minicpm-o on qcs6490. Recorded per bundle: the parity summary with the per-call distributions, the
quantization scheme's figures, and the SHA-256 of every graph file (ONNX graphs and their data, context binaries,
programs) twice: raw, and normalised, i.e. without what names the place a build ran rather than what it computed:
the torch exporter's per-node stack traces (source paths of the checkout) and ONNX Runtime's metadef name of a QNN
EPContext node (a hash of the source model's path: it appears in the EPContext graph and, with its length fields, three
times in the context binary). Timings, dates, paths and the host are left out. `--compare` exits 1 listing every
difference of parity figures, schemes or normalised graph digests, and counts the raw differences.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

CELLS = [
    ("tiny-lm", "cpu", {}), ("tiny-lm", "qcs6490", {}),
    ("tiny-spark", "cpu", {}), ("tiny-spark", "qcs6490", {}),
    ("tiny-spark", "cpu-arm64", {"fmt": "executorch", "precision": "fp32", "context": 32}),
    ("tiny-spark", "cpu-arm64", {"fmt": "executorch", "precision": "8da4w", "context": 32}),
    ("minicpm-o", "qcs6490", {"checkpoint": "TINY-MINICPM-O"}),
]
GRAPH_SUFFIXES = (".onnx", ".data", ".bin", ".pte")
VOLATILE = {"timings_s", "created", "wall_s", "time", "lowering_s"}
METADEF = rb"QNNExecutionProvider_QNNExecutionProvider_\d+_\d+_\d+"


def _strip(obj):
    if isinstance(obj, dict):
        return {k: _strip(v) for k, v in obj.items() if k not in VOLATILE}
    if isinstance(obj, list):
        return [_strip(v) for v in obj]
    return obj


def normalised_digest(path: Path) -> str:
    """SHA-256 of a graph file without the build place's marks (see the module docstring)."""
    import hashlib
    import re

    data = path.read_bytes()
    if path.suffix == ".onnx":
        import onnx

        from exporter.backends.onnx_export import all_nodes

        m = onnx.load_model_from_string(data)
        for n in all_nodes(m):
            keep = [x for x in n.metadata_props if "stack_trace" not in x.key]
            del n.metadata_props[:]
            n.metadata_props.extend(keep)
            if n.op_type == "EPContext":
                n.name = re.sub(METADEF.decode(), "METADEF", n.name)
                for a in n.attribute:
                    if a.name == "partition_name":
                        a.s = re.sub(METADEF, b"METADEF", a.s)
        data = m.SerializeToString(deterministic=True)
    elif path.suffix == ".bin":
        # the name and the length fields in the 16 bytes before each copy of it
        data = re.sub(rb"[\s\S]{16}" + METADEF + rb"\x00*", b"METADEF", data)
    return hashlib.sha256(data).hexdigest()


def record(out: Path) -> dict:
    import subprocess

    from exporter.pipeline import build

    out.mkdir(parents=True, exist_ok=True)
    ckpt = out / "tiny-minicpm-o-ckpt"
    if not ckpt.exists():
        subprocess.run([sys.executable, "-m", "exporter", "synthesize", "tiny-minicpm-o", str(ckpt)], check=True)
    result = {}
    for name, target, kw in CELLS:
        kw = dict(kw)
        if kw.get("checkpoint") == "TINY-MINICPM-O":
            kw["checkpoint"] = ckpt
        precision = kw.pop("precision", None)
        for r in build(name, target, precision, out_root=out / "bundles", **kw):
            if r.status not in ("published", "up-to-date", "parity-failed"):
                result[f"{r.recipe}/{r.target}/{r.precision}"] = {"status": r.status}
                continue
            b = r.bundle
            m = json.loads((b / "manifest.json").read_text())
            key = f"{r.recipe}/{r.target}/{b.name}"
            result[key] = {
                "status": r.status,
                "parity": _strip(json.loads((b / "parity.json").read_text())),
                "quantization": _strip({k: v for k, v in m["quantization"].items() if k not in ("calibration",)}),
                "graphs": {f: meta["sha256"] for f, meta in sorted(m["files"].items()) if f.endswith(GRAPH_SUFFIXES)},
                "normalised": {f: normalised_digest(b / f) for f in sorted(m["files"]) if f.endswith(GRAPH_SUFFIXES)},
            }
            print(key, r.status, flush=True)
    return result


def diff(a, b, path="") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                out.append(f"{path}/{k}: {'added' if k not in a else 'removed'}")
            else:
                out += diff(a[k], b[k], f"{path}/{k}")
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [x for i, (u, v) in enumerate(zip(a, b)) for x in diff(u, v, f"{path}[{i}]")]
    return [] if a == b else [f"{path}: {a!r} -> {b!r}"[:400]]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--json", type=Path, required=True)
    ap.add_argument("--compare", type=Path)
    args = ap.parse_args()
    res = record(args.out)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(res, indent=1, sort_keys=True) + "\n")
    if args.compare:
        before = json.loads(args.compare.read_text())
        d = diff(before, res)
        raw = [x for x in d if "/graphs/" in x]
        normalised = [x for x in d if "/normalised/" in x]
        figures = [x for x in d if "/graphs/" not in x and "/normalised/" not in x]
        print(f"{len(figures)} parity/scheme differences, {len(normalised)} normalised graph differences, "
              f"{len(raw)} raw graph-byte differences (build-place marks only where the normalised digests agree)")
        for x in figures[:50] + normalised[:50]:
            print("  " + x)
        sys.exit(1 if figures or normalised else 0)


if __name__ == "__main__":
    main()

"""Lowering time and program size per ExecuTorch variant (tiny-lm on cpu-arm64): `python bench/executorch_lowering.py [OUT]`.

Measures, does not assert. Run it in a fresh OUT directory, or the stage cache makes lowering free.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path


def main(out: Path) -> None:
    from exporter.pipeline import build
    from manifests import manifest as mf

    rows = []
    for r in build("tiny-lm", "cpu-arm64", fmt="executorch", out_root=out):
        data = mf.load(r.bundle)
        for name, prog in data["quantization"]["programs"].items():
            rows.append({"precision": r.precision, "program": name, "lowering_s": prog["lowering_s"], "bytes": prog["bytes"],
                         "xnnpack_share": prog["delegation"]["delegated_share"]})
    print(json.dumps(rows, indent=1))
    print("\n| precision | program | lowering s | bytes | XNNPACK share |\n|---|---|---|---|---|")
    for x in rows:
        print(f"| {x['precision']} | {x['program']} | {x['lowering_s']} | {x['bytes']} | {x['xnnpack_share']} |")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="bench-et-")))

"""Calibration upstream: float or quantized, measured on one model (issue #30, item 2).

    python bench/calibration_upstream.py WORK [--recipe tiny-spark] [--target qcs6490] [--part-kib 342] [--json OUT.json]

Builds the recipe's w8a16 bundle twice with the real pipeline, cut into layer-range parts by one build budget
(`--part-kib` float32 KiB per part): once with every graph calibrated on the float graphs' outputs before it
(`calibration_upstream="float"`, the default), once on the quantized graphs' outputs before it ("quantized"). Prints,
per parity stage, the worst output cosine and PSNR over every graph and the decode figures, side by side.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("work", type=Path)
    ap.add_argument("--recipe", default="tiny-spark")
    ap.add_argument("--target", default="qcs6490")
    ap.add_argument("--precision", default="w8a16")
    ap.add_argument("--context", type=int, default=None)
    ap.add_argument("--part-kib", type=float, default=342.0)
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()

    from exporter import build_memory as bm
    from exporter.pipeline import build_one
    from exporter.targets import get_target
    from recipes import get_recipe

    budget = bm.BuildBudget(bm.WORKING_SET_BYTES + int(bm.PART_FACTOR * a.part_kib * 1024) + 1, f"bench: part {a.part_kib:g} KiB")
    rows = {}
    for mode in ("float", "quantized"):
        recipe = replace(get_recipe(a.recipe), calibration_upstream=mode)
        r = build_one(recipe, get_target(a.target), a.precision, out_root=a.work / mode, context=a.context, budget=budget)
        parity = json.loads((r.bundle / "parity.json").read_text())
        graphs = json.loads((r.bundle / "manifest.json").read_text())["components"]
        stages = {}
        for s in parity["stages"]:
            outs = [m for comp in s["outputs"].values() for m in comp.values()]
            d = s["decode"]
            stages[s["stage"]] = {
                "worst_cosine": min(m["min_cosine"] for m in outs if m["min_cosine"] is not None),
                "worst_psnr_db": min(m["min_psnr_db"] for m in outs if m["min_psnr_db"] is not None),
                "token_agreement": d.get("token_agreement"), "min_greedy_prefix": d.get("min_greedy_prefix"),
                "logits_vs_hf_min_cosine": (d.get("logits_vs_hf") or {}).get("min_cosine"),
                "worst_by_graph": {c: round(min(m["min_cosine"] for m in o.values() if m["min_cosine"] is not None), 6)
                                   for c, o in s["outputs"].items()},
            }
        rows[mode] = {"status": r.status, "verdict": parity["verdict"], "graphs": len(graphs), "stages": stages}
    print(json.dumps({m: {"verdict": v["verdict"], "graphs": v["graphs"],
                          "stages": {k: {x: y for x, y in s.items() if x != "worst_by_graph"} for k, s in v["stages"].items()}}
                      for m, v in rows.items()}, indent=1))
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()

"""w4a16 against w8a16, and LPBQ against per-channel int4, on one model (issue #31).

    python bench/w4a16.py WORK [--recipe tiny-lm] [--target sm8750] [--block-size 32] [--checkpoint DIR] [--json OUT.json]

Builds the recipe for the target three times with the real pipeline (HTP simulator, CPU fallback disabled): w8a16 (the
recipe's own options), w4a16 with int4 per-channel MatMul weights, and w4a16 with LPBQ blocks of `--block-size`.
Reports per build: bundle bytes and graph (context binary) bytes, the quantize stage's wall seconds, and per parity
stage the decode chain's teacher-forced agreement, greedy prefix and worst logits cosine/PSNR against torch.
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
    ap.add_argument("--recipe", default="tiny-lm")
    ap.add_argument("--target", default="sm8750")
    ap.add_argument("--block-size", type=int, default=32)
    ap.add_argument("--checkpoint", type=Path, help="a checkpoint directory for a recipe without its own (minicpm-o.language)")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()

    from exporter.pipeline import build_one
    from exporter.targets import get_target
    from recipes import get_recipe

    base, target = get_recipe(a.recipe), get_target(a.target)
    if a.checkpoint is not None:
        from exporter.pipeline import read_checkpoint_config

        base = base.for_checkpoint(read_checkpoint_config(a.checkpoint))
    runs = [("w8a16", "w8a16", base.quant_options),
            ("w4a16 per-channel", "w4a16", {**base.quant_options, "w4a16": {"weights": "per-channel"}}),
            (f"w4a16 LPBQ {a.block_size}", "w4a16", {**base.quant_options, "w4a16": {"weights": "lpbq", "block_size": a.block_size}})]
    rows = []
    for label, precision, options in runs:
        out = a.work / label.replace(" ", "-")
        r = build_one(replace(base, quant_options=options), target, precision, out_root=out, checkpoint=a.checkpoint)
        files = [p for p in r.bundle.iterdir() if p.is_file()]
        row = {"build": label, "status": r.status, "verdict": r.parity.get("verdict"),
               "bundle_bytes": sum(p.stat().st_size for p in files),
               "context_binary_bytes": sum(p.stat().st_size for p in files if p.suffix == ".bin"),
               "quantize_s": r.timings.get("quantize"), "verify_s": r.timings.get("verify"), "stages": {}}
        for st in r.parity["stages"]:
            d = st["decode"]
            row["stages"][st["stage"]] = {"token_agreement": d["token_agreement"], "min_greedy_prefix": d["min_greedy_prefix"],
                                          "min_logits_cosine": round(d["logits_vs_hf"]["min_cosine"], 4),
                                          "min_logits_psnr_db": round(d["logits_vs_hf"]["min_psnr_db"], 1)}
        rows.append(row)
        print(json.dumps(row), flush=True)
    print("\n| build | bundle | context binaries | quantize s | fake-quant agreement / prefix / cos / PSNR | compiled agreement / prefix / cos / PSNR |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        f, c = row["stages"].get("fake-quant", {}), row["stages"].get("compiled", {})
        fmt = lambda s: f"{s.get('token_agreement')} / {s.get('min_greedy_prefix')} / {s.get('min_logits_cosine')} / {s.get('min_logits_psnr_db')}"
        print(f"| {row['build']} | {row['bundle_bytes']} | {row['context_binary_bytes']} | {row['quantize_s']} | {fmt(f)} | {fmt(c)} |")
    if a.json:
        a.json.write_text(json.dumps({"recipe": a.recipe, "target": a.target, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()

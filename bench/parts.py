"""Parts: a build's peak memory against its largest part, for several checkpoint sizes under one part size.

    python bench/parts.py WORK [--sizes L6,L12,L24] [--part-mib 40] [--precision int8] [--json OUT.json]

For each size, a seeded Gemma3ForCausalLM checkpoint (spark's architecture and tensor names, window 64: prefill AR-16,
the 64-slot bucket only; one width, 6, 12 or 24 layers, so every size's parts are the same size: one decoder layer) is written under WORK/ckpt-SIZE (kept out of git; reused when present) and built for the cpu
target with the real pipeline (`exporter.pipeline.build_one`) under one build budget, `--max-memory` =
working set + part factor x `--part-mib` (exporter/build_memory.py), so every size is cut into parts of at most that
many float32 bytes; verify runs `--decode-steps` greedy steps per held-out prompt (16; the recipe's 128 is for
qualification, not for this measurement). The sampler of bench/scaling.py charges the Pss of the build and its live children to the stage
running. Reported per size: peak Pss (whole build and per stage), the largest part's float32 bytes, the peak less the
baseline (interpreter and libraries imported) over the largest part, the manifest's estimate and its measured peak, and
what the streamed reference held. One fresh process per size.

`--layout qwen3` builds bench/scaling.py's Qwen3ForCausalLM sizes (0.1b, 0.5b, 1.5b, 3b; the layout, buckets (prefill
AR-32, context 256) and 40 greedy steps of its whole-graph table) as split graphs (recipes/qwen3_split.py) cut by the
same budget, so that table and this one compare side by side; `--part-mib` 600 there makes every size's largest part
about the same (nine, three and two layers of 0.5b, 1.5b and 3b).
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

SIZES = {
    # name -> (hidden, layers, intermediate, heads, head_dim, vocab): 8.3 M parameters (33 MB float32) per layer
    "L6": (768, 6, 3072, 12, 64, 4096),
    "L12": (768, 12, 3072, 12, 64, 4096),
    "L24": (768, 24, 3072, 12, 64, 4096),
}


def config_for(size: str) -> dict:
    from recipes.spark import REAL_CONFIG

    hidden, layers, inter, heads, head_dim, vocab = SIZES[size]
    return {**REAL_CONFIG, "vocab_size": vocab, "hidden_size": hidden, "intermediate_size": inter, "num_hidden_layers": layers,
            "num_attention_heads": heads, "num_key_value_heads": 1, "head_dim": head_dim, "query_pre_attn_scalar": head_dim,
            "sliding_window": 64, "max_position_embeddings": 4096, "bos_token_id": None, "eos_token_id": None, "pad_token_id": 0,
            "torch_dtype": "float32"}


def qwen3_recipe_for(size: str, ckpt: Path, decode_steps: int):
    """bench/scaling.py's Qwen3 recipe at `size`, as split graphs the budget can cut (same buckets and thresholds)."""
    from exporter.hashing import sha256_file
    from recipes.base import CheckpointPin
    from recipes.qwen3_split import make_recipe
    from recipes.tiny_lm import PREFILL, RECIPE
    from scaling import config_for as qwen3_config

    pin = CheckpointPin(source=f"local:{ckpt}", revision=f"bench-{size}",
                        files={n: sha256_file(ckpt / n) for n in ("config.json", "model.safetensors")})
    r = make_recipe(RECIPE, qwen3_config(size), pin, f"bench-qwen3-split-{size}", PREFILL.ar, (PREFILL.context,))
    return replace(r, decode_steps=decode_steps)


def recipe_for(size: str, ckpt: Path, decode_steps: int):
    from exporter.hashing import sha256_file
    from recipes.base import CheckpointPin
    from recipes.spark import make_recipe

    pin = CheckpointPin(source=f"local:{ckpt}", revision=f"bench-{size}",
                        files={n: sha256_file(ckpt / n) for n in ("config.json", "model.safetensors")})
    return replace(make_recipe(config_for(size), pin, f"bench-spark-{size}"), decode_steps=decode_steps)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("work", type=Path)
    ap.add_argument("--sizes", default="L6,L12,L24")
    ap.add_argument("--part-mib", type=float, default=40.0)
    ap.add_argument("--precision", default="int8")
    ap.add_argument("--decode-steps", type=int, help="greedy steps per held-out prompt in verify (default: 16 for spark, whose recipe "
                    "has 128; 40 for qwen3, tiny-lm's and bench/scaling.py's)")
    ap.add_argument("--layout", choices=("spark", "qwen3"), default="spark")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--trace", type=Path, help="write the build process's RSS timeline and its Python stack at each new "
                    "high-water mark to this JSON (bench/peak_stack.py); one size only")
    ap.add_argument("--keep", action="store_true", help="keep each size's output root (bundle and stage cache); by default it is "
                    "measured and removed, so the sizes fit one disk (3b's is about 40 GB)")
    a = ap.parse_args()
    if a.decode_steps is None:
        a.decode_steps = 16 if a.layout == "spark" else 40
    sizes = a.sizes.split(",")
    if len(sizes) > 1:  # one fresh process per size: no size's memory in another's figures
        rows = []
        for size in sizes:
            with tempfile.NamedTemporaryFile(suffix=".json") as f:
                subprocess.run([sys.executable, __file__, str(a.work), "--sizes", size, "--part-mib", str(a.part_mib),
                                "--precision", a.precision, "--decode-steps", str(a.decode_steps), "--layout", a.layout, "--json", f.name, *(["--keep"] if a.keep else [])], check=True)
                rows += json.loads(Path(f.name).read_text())
        if a.json:
            a.json.write_text(json.dumps(rows, indent=1) + "\n")
        return

    import onnxruntime  # noqa: F401  (the fixed working set: interpreter and libraries, in the baseline)
    import torch  # noqa: F401

    from exporter import build_memory as bm
    from exporter.pipeline import build_one
    from exporter.targets import get_target
    from recipes.shapes import gemma3_text_tensor_shapes
    from recipes.spark import synthesize
    from scaling import sampled

    (size,) = sizes
    if a.layout == "qwen3":
        import scaling

        ckpt = a.work / f"ckpt-qwen3-{size}"
        params = scaling.write_checkpoint(size, ckpt)
        recipe, context = qwen3_recipe_for(size, ckpt, a.decode_steps), None
    else:
        cfg = config_for(size)
        ckpt = a.work / f"ckpt-{size}"
        if not (ckpt / "model.safetensors").is_file():
            synthesize(ckpt, cfg, seed=7)
        params = sum(math.prod(s) for s in gemma3_text_tensor_shapes(cfg).values())
        recipe, context = recipe_for(size, ckpt, a.decode_steps), 64
    part = int(a.part_mib * (1 << 20))
    budget = bm.BuildBudget(bm.WORKING_SET_BYTES + int(bm.PART_FACTOR * part) + 1, f"bench: part {a.part_mib:g} MiB")
    out = a.work / f"out-{a.layout}-{size}-{a.precision}"
    import contextlib

    from peak_stack import PeakStack

    with PeakStack(a.trace) if a.trace else contextlib.nullcontext():
        r, s, base, total = sampled(out, lambda rep: build_one(recipe, get_target("cpu"), a.precision, out_root=out, checkpoint=ckpt,
                                                              reporter=rep, context=context, budget=budget))
    m = json.loads((r.bundle / "manifest.json").read_text())
    largest = m["plan"]["build_memory"]["largest_part_fp32_bytes"]
    peak = max(s.peak.values())
    row = {
        "layout": a.layout, "size": size, "parameters": params, "decode_steps": a.decode_steps, "part_mib": a.part_mib, "fp32_bytes": 4 * params, "status": r.status, "verdict": r.parity.get("verdict"),
        "graphs": len(m["components"]), "largest_part_fp32_bytes": largest, "baseline_pss_bytes": base, "peak_pss_bytes": peak,
        "peak_over_largest_part": round((peak - base) / largest, 2), "peak_over_fp32_checkpoint": round((peak - base) / (4 * params), 3),
        "total_s": round(total, 1), "s_per_fp32_gib": round(total / (4 * params / (1 << 30)), 1),
        "estimated_peak_bytes": m["build_memory"]["estimated_peak_bytes"], "measured": m["build_memory"]["measured"],
        "reference_held": m["build_memory"]["checkpoint_tensors_held"],
        "stages": {n: {"wall_s": round(s.wall.get(n, 0.0), 1), "peak_pss_bytes": s.peak.get(n),
                       "over_largest_part": round((s.peak[n] - base) / largest, 2) if s.peak.get(n) else None,
                       "peak_by_process": s.by_process.get(n)} for n in sorted(s.peak)},
    }
    row["output_root_bytes"] = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())  # bundle + stage cache
    row["bundle_bytes"] = sum(p.stat().st_size for p in r.bundle.rglob("*") if p.is_file())
    if not a.keep:
        import shutil

        shutil.rmtree(out)
    print(json.dumps({k: v for k, v in row.items() if k != "stages"}, indent=1), flush=True)
    if a.json:
        a.json.write_text(json.dumps([row], indent=1) + "\n")


if __name__ == "__main__":
    main()

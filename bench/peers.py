"""Side by side with the tools a user would pick instead, on the same machine, checkpoint and run (interleaved).

    python bench/peers.py WORK [--size 0.1b] [--reps 3] [--optimum-env /path/to/venv] [--json OUT.json]

Ours: our `export` and `quantize` stage functions (exporter.pipeline), in a fresh interpreter, on the recipe the
scaling bench builds (no compile, verify or sign: those have no counterpart in the peers).
Export: our `export` stage (two static graphs: prefill AR-32 and decode AR-1 over a 256-slot KV, dynamo, opset 18)
against a plain `torch.onnx.export` of the transformers model (one static [1, 32] graph, no cache, dynamo, opset 18)
and `optimum-cli export onnx --task text-generation-with-past` (optimum-onnx, run from its own virtual environment:
it needs transformers < 4.58). Quantization, on our float decode graph: our int8 stage against a plain
`onnxruntime.quantization.quantize_dynamic` call; our w8a16 QDQ stage (qcs6490: calibration feeds made by running
the float graphs, then ORT's QNN QDQ) against a plain `quantize(get_qnn_qdq_config(...))` with as many random feeds.
Each tool runs in a fresh process; the ratios (ours / theirs) are what to read, not the absolute seconds.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

OURS = """
import json, sys, shutil, time
from pathlib import Path
sys.path.insert(0, {root!r})
sys.path.insert(0, {bench!r})
from scaling import recipe_for
from exporter.backends import onnx_stages
from exporter.pipeline import prepare
from exporter.plan import make_plan
from exporter.targets import get_target
size, ckpt, cache, target, precision = sys.argv[1:6]
recipe, tgt = recipe_for(size, Path(ckpt)), get_target(target)
plan = make_plan(recipe, tgt, precision, None, None, None)
for stage in ("quantize",):  # quantize afresh each run; the float export is cached only when asked
    shutil.rmtree(Path(cache) / stage, ignore_errors=True)
if precision == "fp32":
    shutil.rmtree(cache, ignore_errors=True)
b = prepare(recipe, tgt, plan, Path(cache), Path(ckpt))
fp32 = onnx_stages.export(b.backend, b)
q, scheme, _ = onnx_stages.quantize(b.backend, b, fp32)
print("RESULT=" + json.dumps({{"timings": b.log.timings, "hits": b.log.hits, "fp32": {{k: str(v) for k, v in fp32.items()}},
                               "calibration": scheme.get("calibration") or {{}}, "feeds": scheme.get("calibration_samples")}}))
"""

PLAIN_EXPORT = """
import sys, torch
from transformers import AutoModelForCausalLM
ckpt, out = sys.argv[1:3]
model = AutoModelForCausalLM.from_pretrained(ckpt, dtype=torch.float32, attn_implementation="eager").eval()
ids = torch.zeros(1, 32, dtype=torch.long)
with torch.no_grad():
    torch.onnx.export(model, (ids,), out, input_names=["input_ids"], output_names=["logits"], dynamo=True, opset_version=18,
                      external_data=True, kwargs={"use_cache": False})
"""

PLAIN_DYNAMIC = """
import sys
from onnxruntime.quantization import QuantType, quantize_dynamic
quantize_dynamic(sys.argv[1], sys.argv[2], weight_type=QuantType.QInt8, per_channel=True)
"""

PLAIN_STATIC = """
import sys, numpy as np, onnxruntime as ort
from onnxruntime.quantization import CalibrationDataReader, CalibrationMethod, QuantType, quantize
from onnxruntime.quantization.execution_providers.qnn import get_qnn_qdq_config
src, dst, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
inputs = ort.InferenceSession(src, providers=["CPUExecutionProvider"]).get_inputs()
rng = np.random.default_rng(0)
def feed():
    # token ids from the first 1000 of the vocabulary; positions inside the graph's KV window (the rotary table's rows)
    return {i.name: (rng.integers(0, 200 if "position" in i.name else 1000, i.shape).astype(np.int32) if "int" in i.type
                     else rng.standard_normal(i.shape).astype(np.float32))
            for i in inputs}
class Reader(CalibrationDataReader):
    def __init__(self): self.it = iter([feed() for _ in range(n)])
    def get_next(self): return next(self.it, None)
cfg = get_qnn_qdq_config(src, Reader(), calibrate_method=CalibrationMethod.MinMax, activation_type=QuantType.QUInt16,
                         weight_type=QuantType.QUInt8)
quantize(src, dst, cfg)
"""


def timed(cmd: list[str], **kw) -> tuple[float, subprocess.CompletedProcess]:
    t = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, **kw)
    wall = time.perf_counter() - t
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[:4])}... failed:\n{p.stderr[-3000:]}")
    return wall, p


def ours(size: str, ckpt: Path, cache: Path, target: str, precision: str) -> dict:
    """fp32: a fresh cache (the export runs); otherwise the fp32 run's cache (export hit, quantize afresh)."""
    code = OURS.format(root=str(ROOT), bench=str(ROOT / "bench"))
    wall, p = timed([sys.executable, "-c", code, size, str(ckpt), str(cache), target, precision], cwd=ROOT)
    line = next(ln for ln in p.stdout.splitlines() if ln.startswith("RESULT="))
    return {"wall_s": wall, **json.loads(line[7:])}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("work", type=Path)
    ap.add_argument("--size", default="0.1b")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--optimum-env", type=Path, default=None)
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    sys.path.insert(0, str(ROOT / "bench"))
    from scaling import write_checkpoint

    ckpt = a.work / f"ckpt-{a.size}"
    write_checkpoint(a.size, ckpt)
    runs: dict[str, list[float]] = {}

    def add(k, v):
        runs.setdefault(k, []).append(round(v, 3))

    notes = {}
    for rep in range(a.reps):
        cache = a.work / "peers-cache"
        o = ours(a.size, ckpt, cache, "cpu", "fp32")
        add("ours: export stage (2 graphs)", o["timings"]["export"])
        add("ours: resolve + export, process wall", o["wall_s"])
        out = a.work / "peers-plain.onnx"
        for f in a.work.glob("peers-plain.onnx*"):
            f.unlink()
        add("plain torch.onnx.export (1 graph, no cache), process wall", timed([sys.executable, "-c", PLAIN_EXPORT, str(ckpt), str(out)], cwd=ROOT)[0])
        if a.optimum_env:
            od = a.work / "peers-optimum"
            shutil.rmtree(od, ignore_errors=True)
            cli = a.optimum_env / "bin" / "optimum-cli"
            w, _ = timed([str(cli), "export", "onnx", "--model", str(ckpt), "--task", "text-generation-with-past", "--opset", "18", str(od)])
            add("optimum-cli export onnx (text-generation-with-past), process wall", w)
        # quantization on our float decode graph
        fp32 = Path(o["fp32"]["decode"])
        q = ours(a.size, ckpt, cache, "cpu", "int8")
        add("ours: quantize stage int8 (2 graphs)", q["timings"]["quantize"])
        add("plain quantize_dynamic (1 graph), process wall",
            timed([sys.executable, "-c", PLAIN_DYNAMIC, str(fp32), str(a.work / "peers-dyn.onnx")])[0])
        s = ours(a.size, ckpt, cache, "qcs6490", "w8a16")
        add("ours: quantize stage w8a16 QDQ incl. calibration runs (2 graphs)", s["timings"]["quantize"])
        n = 64
        add(f"plain QNN QDQ quantize, {n} random feeds (1 graph), process wall",
            timed([sys.executable, "-c", PLAIN_STATIC, str(fp32), str(a.work / "peers-qdq.onnx"), str(n)])[0])
        notes["ours_w8a16_calibration"] = {"set": s["calibration"].get("name"), "feeds_per_graph": s["feeds"], "plain_feeds": n}
        print(json.dumps(runs), flush=True)
    med = {k: statistics.median(v) for k, v in runs.items()}
    out = {"size": a.size, "reps": a.reps, "runs_s": runs, "median_s": med, "notes": notes}
    text = json.dumps(out, indent=1)
    print(text)
    if a.json:
        a.json.write_text(text + "\n")


if __name__ == "__main__":
    main()

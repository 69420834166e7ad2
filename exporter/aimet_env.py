"""The separate environment aimet-onnx runs in, and the w4a16 pass that runs there.

aimet-onnx 2.42.0 installs beside the project's pins (torch 2.13.0, onnxruntime 1.32.0), but its dependency onnx2torch
pulls torchvision, and the only torchvision for torch 2.13 on the package index is a CUDA build: beside the CPU torch
its extension fails to load (libc10_cuda.so), and transformers, which imports torchvision when it is installed, then
cannot import Qwen3ForCausalLM or any other model class (docs/NOTES.md, issue #31). So AIMET gets its own virtual
environment, built from exact pins by ``python -m exporter.aimet_env``; a build runs AIMET's pass there in a child
process that sees only the float graph, the calibration feeds and the options, and checks the result here (the 4-bit
guard, then compile and parity as for every w4a16 graph).

Where: ``$EDGE_EXPORT_AIMET_ENV`` (a virtual environment directory), else ``~/.cache/edge-export/aimet-<pins digest>``.
"""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

PINS = ("aimet-onnx==2.42.0", "torch==2.13.0", "onnxruntime==1.32.0", "onnx==1.22.0", "numpy==2.4.6")
ENV_VAR = "EDGE_EXPORT_AIMET_ENV"
SETUP = "python -m exporter.aimet_env"


def env_dir() -> Path:
    if os.environ.get(ENV_VAR):
        return Path(os.environ[ENV_VAR])
    digest = hashlib.sha256("\n".join(PINS).encode()).hexdigest()[:12]
    return Path.home() / ".cache" / "edge-export" / f"aimet-{digest}"


def python() -> Path | None:
    """The environment's interpreter, if the environment has been set up (its marker is written last)."""
    d = env_dir()
    return d / "bin" / "python" if (d / "edge-export-aimet.done").is_file() else None


def create(directory: Path | None = None) -> Path:
    """Build the environment from PINS (idempotent); return its directory."""
    import subprocess

    d = directory or env_dir()
    if (d / "edge-export-aimet.done").is_file():
        return d
    subprocess.run([sys.executable, "-m", "venv", str(d)], check=True)
    pip = [str(d / "bin" / "python"), "-m", "pip", "install", "--quiet"]
    subprocess.run(pip + ["--upgrade", "pip"], check=True)
    subprocess.run(pip + list(PINS), check=True)
    (d / "edge-export-aimet.done").write_text("\n".join(PINS) + "\n")
    return d


# Runs in the AIMET environment: only aimet-onnx, onnx and numpy. argv: source graph, output graph, feeds (.npz, keys
# "<i>/<input name>"), options JSON. Prints one EDGE_EXPORT_RESULT= line.
_WORKER = r"""
import json, sys, tempfile
from importlib import metadata
import numpy as np, onnx
from aimet_onnx.quantsim import QuantizationSimModel, set_grouped_blockwise_quantization_for_weights
from aimet_onnx.sequential_mse.seq_mse import apply_seq_mse

src, dst, feeds_path, opts = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
with np.load(feeds_path) as z:
    n = 1 + max(int(k.split("/", 1)[0]) for k in z.files)
    feeds = [{k.split("/", 1)[1]: z[k] for k in z.files if k.split("/", 1)[0] == str(i)} for i in range(n)]
with tempfile.TemporaryDirectory(prefix="edge-export-aimet-") as work:
    sim = QuantizationSimModel(onnx.load(src), param_type="int8", activation_type="int16", quant_scheme="min_max",
                               config_file=opts["config"], path=work, session_options_kwargs={"intra_op_num_threads": 1})
    set_grouped_blockwise_quantization_for_weights(sim, ("MatMul",), bitwidth=4, decompressed_bw=8, block_size=opts["block_size"])
    if opts["seq_mse"]:
        apply_seq_mse(sim, feeds, num_candidates=20)
    sim.compute_encodings(feeds)
    model = sim.to_onnx_qdq(prequantize_constants=True, force_activation_as="unsigned")
big = model.ByteSize() > (1 << 30)
onnx.save(model, dst, **({"save_as_external_data": True, "location": dst.rsplit("/", 1)[-1] + ".data"} if big else {}))
blocks = sum(1 for nd in model.graph.node if nd.op_type == "DequantizeLinear" and any(a.name == "block_size" for a in nd.attribute))
print("EDGE_EXPORT_RESULT=" + json.dumps({
    "lpbq_weights": blocks, "opset": max(o.version for o in model.opset_import if o.domain in ("", "ai.onnx")),
    "versions": {p: metadata.version(p) for p in ("aimet-onnx", "torch", "onnxruntime", "onnx", "numpy")}}))
"""


def run_w4a16(src: Path, dst: Path, feeds: list[dict], block_size: int, seq_mse: bool, config: str = "default") -> dict:
    """AIMET's LPBQ pass on `src`, written to `dst`, in the AIMET environment; returns what the worker reports (the
    LPBQ weights, the opset, the environment's versions, checked against PINS)."""
    import json
    import tempfile

    import numpy as np

    from exporter.child import child_failure, child_result, run_python
    from exporter.errors import EdgeExportError, MissingPrerequisite

    py = python()
    if py is None:
        raise MissingPrerequisite(f"the recipe's w4a16 quantizer is aimet-onnx, and its environment is not set up at {env_dir()}",
                                  f"run `{SETUP}` (aimet-onnx cannot live in the project's environment: see exporter/aimet_env.py)")
    with tempfile.TemporaryDirectory(prefix="edge-export-aimet-feeds-") as tmp:
        path = Path(tmp) / "feeds.npz"
        np.savez(path, **{f"{i}/{k}": v for i, f in enumerate(feeds) for k, v in f.items()})
        p = run_python(_WORKER, str(src), str(dst), str(path), json.dumps({"block_size": block_size, "seq_mse": seq_mse, "config": config}),
                       timeout_s=None, python=str(py))
    result = child_result(p)
    if result is None:
        raise EdgeExportError(f"{src}: aimet-onnx's w4a16 pass failed in {env_dir()} {child_failure(p)}",
                              f"check the environment (`{SETUP}` rebuilds a missing one; delete {env_dir()} to rebuild it)")
    want = dict(p.split("==") for p in PINS)
    off = {k: v for k, v in result["versions"].items() if want.get(k) != v.split("+")[0]}  # a local build tag (+cpu) is the pin
    if off:
        raise EdgeExportError(f"the aimet-onnx environment {env_dir()} has {off}, not the pinned {[p for p in PINS if p.split('==')[0] in off]}",
                              f"delete {env_dir()} and run `{SETUP}`")
    return result


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description="Create the separate aimet-onnx environment edge-export's aimet-onnx w4a16 method runs in.")
    ap.add_argument("--dir", type=Path, default=None, help=f"where (default: ${ENV_VAR} or {env_dir()})")
    a = ap.parse_args()
    print(create(a.dir))

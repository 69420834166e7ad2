"""Quantization passes over ONNX graphs, through ONNX Runtime's quantization package."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from pathlib import Path
from typing import Iterable


@contextlib.contextmanager
def tool_output_to(log: Path):
    """Send everything a tool prints to `log`: Python's sys.stdout/sys.stderr (Quark's and NNCF's tables, ORT's
    calibrator) and the process's file descriptors 1 and 2 (ninja, g++), so the CLI's --json stream stays clean."""
    log.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with open(log, "a", buffering=1) as f:
        os.dup2(f.fileno(), 1)
        os.dup2(f.fileno(), 2)
        try:
            with contextlib.redirect_stdout(f), contextlib.redirect_stderr(f):
                yield
        finally:
            f.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])


class _Feeds:
    """An onnxruntime CalibrationDataReader over a list of feed dicts."""

    def __init__(self, feeds: Iterable[dict]):
        self._it = iter(feeds)  # lazily: spilled feeds (exporter/feed_store.py) are read one at a time

    def get_next(self):
        return next(self._it, None)


def _quiet():
    logging.getLogger().setLevel(logging.ERROR)


# Passes that take only paths run in a worker process (`in_worker`): a quantizer's high-water mark (ORT's dynamic
# one held three copies of the float weights before `_without_extra_copies`) would otherwise stay resident in
# the build's own process through verify.
WORKER_PASSES = ("dynamic_int8", "fp16_convert", "nncf_weight_only")

_WORKER = """
import json, sys
from exporter.backends import quantize as q
info = getattr(q, sys.argv[1])(*json.loads(sys.argv[2]))
print("EDGE_EXPORT_RESULT=" + json.dumps(info))
"""


def in_worker(pass_name: str, src: Path, dst: Path, *args: str, timeout_s: int | None = None) -> dict:
    """Run `pass_name(src, dst, *args)` in a fresh interpreter; its memory returns to the OS when it exits and
    a crash in the tool cannot take the build with it. What the tool printed is kept beside `dst` (worker.log)."""
    import json

    from exporter.child import child_failure, child_result, run_python
    from exporter.errors import EdgeExportError

    if pass_name not in WORKER_PASSES:
        raise ValueError(f"{pass_name} is not a worker pass ({', '.join(WORKER_PASSES)})")
    p = run_python(_WORKER, pass_name, json.dumps([str(src), str(dst), *args]), timeout_s=timeout_s)
    (Path(dst).parent / "worker.log").write_text(p.stdout + p.stderr)
    result = child_result(p)
    if result is None:
        raise EdgeExportError(f"{src}: {pass_name} failed in its worker process {child_failure(p)}",
                              "fix what the tool says above; a worker killed by signal 9 is usually the kernel's out-of-memory "
                              "killer (free memory, or build a smaller precision or bucket)")
    return result


def _op_types(graph) -> set[str]:
    """Every op type in a graph and in its subgraphs (If/Loop/Scan bodies)."""
    import onnx

    ops = set()
    for node in graph.node:
        ops.add(node.op_type)
        for a in node.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                ops |= _op_types(a.g)
            elif a.type == onnx.AttributeProto.GRAPHS:
                for g in a.graphs:
                    ops |= _op_types(g)
    return ops


@contextlib.contextmanager
def _without_extra_copies():
    """ORT's `quantize_dynamic` loads the float graph with inferred shapes and keeps that model referenced to the
    end; its ONNXQuantizer then refreshes value_info by `save_and_reload_model_with_shape_infer` (a deepcopy, saved
    with external data to a temporary directory, loaded back with inferred shapes): three copies of the float
    weights at the peak (bench/README.md: 3.1 x in the worker). Where the graph has no Gemm (the one rewrite that
    comes between the load and that reload), the same save-and-reload is done right after the load instead, of
    the loaded model itself (nothing reads it again, so no deepcopy) and before quantize_dynamic holds it; the
    quantizer's own call then receives the model that reload returned and passes it through. Same files saved and
    loaded in the same order, same bytes out (tested); with a Gemm the tool's path runs unchanged."""
    import importlib
    import tempfile

    import onnx
    from onnxruntime.quantization import onnx_quantizer

    qmod = importlib.import_module("onnxruntime.quantization.quantize")  # the module: the package's name is the function
    tool_load, tool_reload = qmod.load_model_with_shape_infer, onnx_quantizer.save_and_reload_model_with_shape_infer
    done: list = []  # the model our reload returned (compared by identity)

    def load(path):
        model = tool_load(path)
        if "Gemm" in _op_types(model.graph):
            return model
        with tempfile.TemporaryDirectory(prefix="ort.quant.") as tmp:
            saved = Path(tmp) / "model.onnx"
            onnx.save_model(model, saved.as_posix(), save_as_external_data=True)  # what the tool saves from its deepcopy
            # the save cleared the model's raw data, but protobuf keeps a cleared field's bytes in the message's arena
            # until the message goes: drop it before loading the copy, or both are resident (2 x the graph at the peak)
            del model
            done.append(tool_load(saved))
        return done[-1]

    def reload(model):
        return model if any(model is m for m in done) else tool_reload(model)

    qmod.load_model_with_shape_infer, onnx_quantizer.save_and_reload_model_with_shape_infer = load, reload
    try:
        yield
    finally:
        qmod.load_model_with_shape_infer, onnx_quantizer.save_and_reload_model_with_shape_infer = tool_load, tool_reload


# ORT dynamic int8 for CPU targets: uint8 weights (per output channel, asymmetric) so every integer product is U8U8,
# which MLAS computes in exact int32 on every kernel path (x86: SSE2, AVX2 and AVX-512 vpmaddwd on zero-extended
# words, AVX-VNNI-INT8 vpdpbuud; arm64: NEON, dotprod, i8mm). int8 weights (U8S8) run vpmaddubsw on AVX2 and on
# AVX-512 without VNNI, whose 16-bit pair sums saturate: the same graph gave prefill logits cosine 0.9896 there
# against 0.9996 on a VNNI host (docs/NOTES.md, "int8 on every host").
DYNAMIC_INT8 = {"weight_type": "QUInt8", "per_channel": True, "reduce_range": False}


INLINE_LIMIT_BYTES = int(1.8 * (1 << 30))  # a float graph larger than this writes its quantized weights as external data


def dynamic_int8(src: Path, dst: Path, reload: bool = False) -> dict:
    """ORT dynamic int8 (uint8 per-channel asymmetric weights, uint8 dynamic activations), then the integer-kernel
    guard: every integer product must be exact on every CPU kernel path. `reload=True` keeps ORT's own
    deepcopy-and-reload (tests compare the two)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    _quiet()
    # the int8 graph's weights go to dst.onnx.data where it could pass protobuf's 2 GiB: not only past 8 GiB of float
    # weights (a quarter of them), since what dynamic int8 does not quantize stays float (an embedding's Gather: a split
    # embedding graph of a 152k x 4096 vocabulary is 2.3 GiB and stays so)
    large = sum(p.stat().st_size for p in Path(src).parent.iterdir() if p.name.startswith(Path(src).name)) > INLINE_LIMIT_BYTES
    with contextlib.nullcontext() if reload else _without_extra_copies():
        quantize_dynamic(str(src), str(dst), weight_type=getattr(QuantType, DYNAMIC_INT8["weight_type"]),
                         per_channel=DYNAMIC_INT8["per_channel"], reduce_range=DYNAMIC_INT8["reduce_range"],
                         use_external_data_format=large)
    kernels = integer_kernel_report(dst)
    if not kernels["exact_on_every_path"]:
        from exporter.errors import EdgeExportError

        bad = kernels["saturating"][:5]
        raise EdgeExportError(f"{dst}: {len(kernels['saturating'])} integer products may saturate on CPUs without VNNI "
                              f"(vpmaddubsw 16-bit pair sums), e.g. {bad}: the verdict would depend on the build host",
                              "quantize those weights as uint8 (U8U8) or with reduce_range; see docs/NOTES.md, 'int8 on every host'")
    return {"scheme": "ort-dynamic", "weights": "uint8 per-channel asymmetric", "activations": "uint8 dynamic",
            "options": dict(DYNAMIC_INT8), "integer_kernels": kernels,
            "isa": {"dependent": False,
                    "why": "every integer product is U8U8 or provably saturation-free U8S8: exact int32 on every MLAS path "
                           "(SSE2/AVX2/AVX-512/AVX-VNNI-INT8, NEON/dotprod/i8mm); float ops differ only in rounding"}}


# integer matrix products and the input index of their constant right-hand side
_INTEGER_PRODUCTS = {"MatMulInteger": 1, "ConvInteger": 1, "DynamicQuantizeMatMul": 1, "QLinearMatMul": 3, "QLinearConv": 3}
_VPMADDUBSW_LIMIT = 32767  # int16 saturation of a pair sum u8*s8 + u8*s8


def saturating_pairs(b, k_axis: int = 0) -> int:
    """Pairs of consecutive reduction rows of an int8 weight (as MLAS packs them for vpmaddubsw) whose worst-case
    sum with uint8 activations, 255 * (|b0| + |b1|) with equal signs, exceeds int16: the count that may saturate."""
    import numpy as np

    w = np.moveaxis(np.asarray(b, dtype=np.int32), k_axis, 0)
    w = w.reshape(w.shape[0], -1)
    if w.shape[0] % 2:
        w = np.concatenate([w, np.zeros((1, w.shape[1]), np.int32)])
    b0, b1 = w[0::2], w[1::2]
    same = np.sign(b0) == np.sign(b1)
    return int(np.count_nonzero(same & (255 * (np.abs(b0) + np.abs(b1)) > _VPMADDUBSW_LIMIT)))


def integer_kernel_report(path: Path) -> dict:
    """Every integer matrix product of a quantized graph, the type of its constant operand, and whether its result
    is the same on every CPU kernel path (uint8 operands, or int8 ones no pair of which can saturate vpmaddubsw)."""
    import numpy as np
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(path), load_external_data=True)
    inits = {i.name: i for i in model.graph.initializer}
    types: dict[str, int] = {}
    saturating = []
    count = 0
    produced_by = {o: n.op_type for n in model.graph.node for o in n.output}
    for node in model.graph.node:
        idx = _INTEGER_PRODUCTS.get(node.op_type)
        if idx is None or len(node.input) <= idx:
            continue
        count += 1
        init = inits.get(node.input[idx])
        if init is None:  # a product of two activations: exact when both are quantized per call to uint8
            kind = "uint8 (dynamic)" if produced_by.get(node.input[idx]) == "DynamicQuantizeLinear" else "activation of unknown type"
            types[kind] = types.get(kind, 0) + 1
            if kind != "uint8 (dynamic)":
                saturating.append(f"{node.name or node.op_type}:{node.input[idx]} (operand type not provable)")
            continue
        dtype = onnx.helper.tensor_dtype_to_np_dtype(init.data_type).name
        types[dtype] = types.get(dtype, 0) + 1
        if np.dtype(dtype) == np.int8:
            k_axis = 1 if node.op_type in ("ConvInteger", "QLinearConv") else 0
            n = saturating_pairs(numpy_helper.to_array(init), k_axis)
            if n:
                saturating.append(f"{node.name or node.op_type}:{init.name} ({n} pairs)")
    return {"products": count, "weight_types": dict(sorted(types.items())), "saturating": saturating,
            "exact_on_every_path": not saturating}


def _matmul_weight_overrides(src: Path, quant_type: str = "QInt8") -> dict:
    """Per-output-channel symmetric quantization (int8, or `quant_type`) of every constant MatMul weight [K, N] (axis 1)."""
    import onnx
    from onnxruntime.quantization import QuantType

    g = onnx.load(str(src), load_external_data=False).graph
    inits = {i.name: len(i.dims) for i in g.initializer}
    return {n.input[1]: [{"axis": 1, "quant_type": getattr(QuantType, quant_type), "symmetric": True}]
            for n in g.node if n.op_type == "MatMul" and inits.get(n.input[1]) == 2}


def static_w8a16(src: Path, dst: Path, feeds: list[dict], matmul_per_channel: bool = False) -> dict:
    """Calibrated QDQ for the HTP integer path: uint8 weights, uint16 activations (MinMax). With
    `matmul_per_channel`, MatMul weights are int8 symmetric per output channel instead (HTP v68+ runs both)."""
    from onnxruntime.quantization import CalibrationDataReader, CalibrationMethod, QuantType, quantize
    from onnxruntime.quantization.execution_providers.qnn import get_qnn_qdq_config

    _quiet()

    class Reader(_Feeds, CalibrationDataReader):
        pass

    overrides = _matmul_weight_overrides(src) if matmul_per_channel else None
    cfg = get_qnn_qdq_config(
        str(src),
        Reader(feeds),
        calibrate_method=CalibrationMethod.MinMax,
        activation_type=QuantType.QUInt16,
        weight_type=QuantType.QUInt8,
        init_overrides=overrides,
    )
    # not CalibMaxIntermediateOutputs: in onnxruntime 1.32 MinMaxCalibrater.collect_data clears each full batch without
    # computing its ranges, so only the last partial batch is calibrated (measured: embed_ar1's hidden scale 0.00034
    # instead of 0.00046 on tiny-spark; docs/NOTES.md). The calibrator keeps every feed's activations until the end.
    quantize(str(src), str(dst), cfg)
    return {
        "scheme": "ort-qdq-static",
        "weights": ("int8 per-channel symmetric (MatMul weights, axis 1); uint8 per-tensor asymmetric (the rest)" if matmul_per_channel
                    else "uint8 per-tensor asymmetric"),
        "activations": "uint16 asymmetric (MinMax)",
        "calibration_samples": len(feeds),
    }


def fp16_convert(src: Path, dst: Path) -> dict:
    """The float graph in float16 (onnxruntime.transformers.float16), inputs and outputs kept float32 so the
    graph keeps the recipe's tensor specs; the casts at the edges are part of the graph."""
    import onnx
    from onnxruntime.transformers.float16 import convert_float_to_float16

    _quiet()
    model = convert_float_to_float16(onnx.load(str(src)), keep_io_types=True)
    onnx.save(model, str(dst))
    return {"scheme": "fp16-convert", "weights": "float16", "activations": "float16 (float32 graph inputs and outputs)",
            "converter": "onnxruntime.transformers.float16.convert_float_to_float16(keep_io_types=True)"}


NNCF_MODES = {
    # precision -> (NNCF CompressWeightsMode, options, description of what it writes at the exporter's opset 18)
    "int4": ("INT4_SYM", {"group_size": 128, "ratio": 1.0},
             "int4 symmetric, groups of 128 (MatMulNBits); embedding and last projection int8 asymmetric per channel (NNCF's backup mode)"),
    "int8-wo": ("INT8_ASYM", {}, "int8 asymmetric per output channel (DequantizeLinear before MatMul/Gather)"),
}


def nncf_weight_only(src: Path, dst: Path, precision: str) -> dict:
    """Weight-only compression with NNCF `compress_weights` on the ONNX graph (no calibration data:
    data-free min/max per channel or group). The group size is halved until it divides every MatMul's
    reduction dimension (a tiny twin's are smaller than 128); the manifest records the size used."""
    import onnx

    with tool_output_to(Path(dst).parent / "nncf.log"):
        import nncf
    _quiet()
    mode, options, what = NNCF_MODES[precision]
    model = onnx.load(str(src))
    if "group_size" in options:
        inits = {i.name: tuple(i.dims) for i in model.graph.initializer}
        ks = [inits[n.input[1]][0] for n in model.graph.node if n.op_type == "MatMul" and len(inits.get(n.input[1], ())) == 2]
        g = options["group_size"]
        while g > 1 and any(k % g for k in ks):
            g //= 2
        options = {**options, "group_size": g}
    # Conv weights stay float: NNCF 3.4 writes their per-channel DequantizeLinear scale with the wrong shape for ORT
    # ("For per axis quantization, scale must be 1D tensor with size 32" on SigLIP's patch embedding)
    convs = [n.name for n in model.graph.node if n.op_type == "Conv"]
    ignored = nncf.IgnoredScope(types=["Conv"]) if convs else None
    with tool_output_to(Path(dst).parent / "nncf.log"):  # NNCF prints its tables to stdout (the CLI's --json stream)
        model = nncf.compress_weights(model, mode=getattr(nncf.CompressWeightsMode, mode), ignored_scope=ignored, **options)
    onnx.save(model, str(dst))
    return {"scheme": f"nncf-{mode.lower()}", "weights": what.replace("128", str(options.get("group_size", 128))),
            "activations": "float (unchanged)", "nncf": {"mode": mode, **options, "float_conv_weights": len(convs)}}


# -- w4a16: 4-bit weights, 16-bit activations, for HTP v73+ ------------------------------------------------------------
#
# Measured on onnxruntime 1.32 + onnxruntime-qnn 2.7.0 (x86 HTP simulator, CPU fallback disabled; docs/NOTES.md, "w4a16"):
# int4 per-channel symmetric MatMul weights run on the HTP (cosine 0.99998 against the same QDQ graph on ORT CPU); block
# int4 in the explicit LPBQ form (a uint8 DequantizeLinear of per-block integers 1..16 times a per-channel float scale,
# feeding the scale of the int4 DequantizeLinear) runs through the EP's low-power block-quantization fusion and matches
# the CPU graph to 1e-8 in cosine; asymmetric block int4 builds and runs and returns garbage (cosine 0.05); a block
# size below opset 21 writes an invalid model. So: standard opset-21 Q/DQ, symmetric weights only, LPBQ written by us.
LPBQ_SCALE_BITS = 4  # the per-block integer scales' width the HTP's LPBQ encoding takes (1..16)
INT4_MIN, INT4_MAX = -8, 7


def static_w4a16(src: Path, dst: Path, feeds: list[dict], weights: str = "lpbq", block_size: int = 64, quantizer: str = "ort",
                 seq_mse: bool = False, aimet_config: str = "default", matmul_bits: int = 4) -> dict:
    """Calibrated QDQ for the HTP v73+ integer path: every constant MatMul weight int4 symmetric (per output channel,
    or LPBQ blocks of `block_size` along the reduction axis), the other weights uint8 per-tensor as in w8a16, uint16
    activations (MinMax), standard opset-21 Q/DQ; then the 4-bit guard (`int4_findings`). `quantizer` "aimet-onnx":
    AIMET's LPBQ instead of ORT's quantizer and our rewrite (`aimet_w4a16`), optionally after SeqMSE. `matmul_bits` 8
    (a recipe's role option, e.g. for the LM head): that graph's MatMul weights int8 symmetric per channel instead."""
    import onnx
    from onnxruntime.quantization import CalibrationDataReader, CalibrationMethod, QuantType, quantize
    from onnxruntime.quantization.execution_providers.qnn import get_qnn_qdq_config

    from exporter.errors import UsageError

    if weights not in ("lpbq", "per-channel"):
        raise UsageError(f"w4a16 weights {weights!r} is neither 'lpbq' nor 'per-channel'", "set the recipe's w4a16 quant option 'weights' to one of them")
    if weights == "lpbq" and (not isinstance(block_size, int) or block_size < 2):
        raise UsageError(f"w4a16 block_size {block_size!r} is not an integer of at least 2", "set the recipe's w4a16 'block_size' (64 by default)")
    if matmul_bits not in (4, 8):
        raise UsageError(f"w4a16 matmul_bits {matmul_bits!r} is neither 4 nor 8", "set the recipe's role option 'matmul_bits' to 4 or 8")
    if matmul_bits == 8 and quantizer != "ort":
        raise UsageError("8-bit MatMul weights inside a w4a16 build are written by the ORT quantizer only", "set that role's 'quantizer' to 'ort'")
    if quantizer not in ("ort", "aimet-onnx"):
        raise UsageError(f"w4a16 quantizer {quantizer!r} is neither 'ort' nor 'aimet-onnx'", "set the recipe's w4a16 quant option 'quantizer' to one of them")
    if seq_mse and quantizer != "aimet-onnx":
        raise UsageError("w4a16 seq_mse needs quantizer 'aimet-onnx' (ONNX Runtime's quantizer has no SeqMSE)", "set 'quantizer': 'aimet-onnx' or drop 'seq_mse'")
    if quantizer == "aimet-onnx":
        if weights != "lpbq":
            raise UsageError("the aimet-onnx w4a16 method writes LPBQ weights only", "set the recipe's w4a16 'weights' to 'lpbq', or 'quantizer' to 'ort'")
        return _guarded(dst, aimet_w4a16(src, dst, feeds, block_size, seq_mse, aimet_config))
    _quiet()

    class Reader(_Feeds, CalibrationDataReader):
        pass

    if matmul_bits == 8:
        weights = "int8-per-channel"
    overrides = _matmul_weight_overrides(src, "QInt4" if matmul_bits == 4 else "QInt8")
    cfg = get_qnn_qdq_config(str(src), Reader(feeds), calibrate_method=CalibrationMethod.MinMax, activation_type=QuantType.QUInt16,
                             weight_type=QuantType.QUInt8, init_overrides=overrides)
    cfg.extra_options["UseQDQContribOps"] = False  # standard Q/DQ at opset 21 (int4 and block_size are opset-21 types)
    quantize(str(src), str(dst), cfg)
    lpbq = {}
    if weights == "lpbq":
        from exporter.backends.onnx_export import external_data_files

        data = external_data_files(dst)  # what the quantizer wrote beside the graph: rewritten below
        model = onnx.load(str(dst))
        lpbq = to_lpbq(model, _float_initializers(src, set(overrides)), block_size)
        for loc in data:
            (Path(dst).parent / loc).unlink()
        onnx.save(model, str(dst), **({"save_as_external_data": True, "location": data[0]} if data else {}))
    what = {"lpbq": f"int4 symmetric LPBQ blocks of {block_size} (4-bit block scales x per-channel float scale; MatMul weights)",
            "per-channel": "int4 symmetric per-channel (MatMul weights, axis 1)",
            "int8-per-channel": "int8 symmetric per-channel (MatMul weights, axis 1: this role at 8 bits)"}[weights]
    int4 = {"int4": {"form": weights, "block_size": block_size if weights == "lpbq" else None,
                     "block_scale_bits": LPBQ_SCALE_BITS if weights == "lpbq" else None, "matmul_weights": len(overrides),
                     **({"lpbq": lpbq} if lpbq else {}), "guard": "symmetric int4, zero point 0, positive finite scales: checked"}}
    return _guarded(dst, {
        "scheme": "ort-qdq-static-w4",
        "weights": what + "; uint8 per-tensor asymmetric (the rest: embeddings' Gather)",
        "activations": "uint16 asymmetric (MinMax)",
        **(int4 if matmul_bits == 4 else {"matmul_bits": 8}),
        "opset": 21,
        "calibration_samples": len(feeds),
    })


def _guarded(dst: Path, info: dict) -> dict:
    """`info`, once every 4-bit weight of `dst` passed the guard (before compile)."""
    from exporter.errors import EdgeExportError

    findings = int4_findings(dst)
    if findings:
        raise EdgeExportError(f"{dst}: {len(findings)} 4-bit weights the HTP would run wrongly: " + "; ".join(findings[:5]),
                              "4-bit weights must be symmetric (int4, zero point 0) with positive finite scales; fix the quantizer's options")
    return info


def aimet_w4a16(src: Path, dst: Path, feeds: list[dict], block_size: int, seq_mse: bool, config: str = "default") -> dict:
    """AIMET's w4a16 (aimet-onnx, the quantizer qai-hub-models' LLM exports use), run in its own environment
    (exporter/aimet_env.py): MatMul weights in LPBQ blocks of `block_size` (4-bit values, 4-bit block scales under an
    8-bit decompressed width), the rest at AIMET's int8, int16 activations exported unsigned, calibrated on `feeds`
    (MinMax) with AIMET's quantsim `config`, optionally after SeqMSE (weight encodings chosen to minimise each layer's
    output error on the feeds). Written as standard Q/DQ with the weights prequantized: the explicit LPBQ pattern
    `to_lpbq` writes. The config defaults to AIMET's "default" (every op output quantized): its "htp_v73" leaves the
    RMSNorm chain's inner tensors in float, expecting the HTP to fuse them, and through ONNX Runtime's QNN EP the
    prefill graph's logits then drift from the CPU's past tiny-lm's thresholds (bench/README.md)."""
    from exporter import aimet_env

    r = aimet_env.run_w4a16(src, dst, feeds, block_size, seq_mse, config)
    return {
        "scheme": "aimet-onnx-w4",
        "quantizer": f"aimet-onnx {r['versions']['aimet-onnx']}",
        "quantsim_config": config,
        "quantizer_environment": {"pins": list(aimet_env.PINS), "versions": r["versions"]},
        "weights": (f"int4 symmetric LPBQ blocks of {block_size} (4-bit block scales x per-channel float scale; MatMul weights)"
                    + (", encodings by SeqMSE" if seq_mse else "") + f"; int8 (AIMET's {config} config) the rest"),
        "activations": "uint16 (AIMET int16, exported unsigned; MinMax)",
        "int4": {"form": "lpbq", "block_size": block_size, "block_scale_bits": LPBQ_SCALE_BITS, "matmul_weights": r["lpbq_weights"],
                 "lpbq": {"weights": r["lpbq_weights"]}, "seq_mse": seq_mse,
                 "guard": "symmetric int4, zero point 0, positive finite scales: checked"},
        "opset": r["opset"],
        "calibration_samples": len(feeds),
    }


def _float_initializers(src: Path, names: set[str]) -> dict:
    import onnx
    from onnx import numpy_helper

    g = onnx.load(str(src), load_external_data=True).graph
    return {i.name: numpy_helper.to_array(i) for i in g.initializer if i.name in names}


def lpbq_blocks(w, block_size: int):
    """LPBQ of a float weight [K, N] along K: (int4 values [K, N], per-block integer scales [ceil(K/B), N] in
    1..2**LPBQ_SCALE_BITS, per-channel float scale [N]); the weight is values × (integer × channel scale) of its block.
    The block's own scale is max|w| / 7 (symmetric int4), its integer the ceiling of that over the channel's scale
    (max block scale / 16), so no value is clipped by the rounding of the block scale."""
    import numpy as np

    w = np.asarray(w, dtype=np.float32)
    k, n = w.shape
    blocks = -(-k // block_size)
    padded = np.zeros((blocks * block_size, n), np.float32)
    padded[:k] = w
    amax = np.abs(padded.reshape(blocks, block_size, n)).max(axis=1)
    scale = np.maximum(amax / INT4_MAX, np.finfo(np.float32).tiny)
    top = 1 << LPBQ_SCALE_BITS
    channel = scale.max(axis=0) / top
    ints = np.clip(np.ceil(scale / channel * (1 - 1e-7)), 1, top).astype(np.uint8)
    eff = np.repeat(ints.astype(np.float32) * channel, block_size, axis=0)[:k]
    q = np.clip(np.rint(w / eff), INT4_MIN, INT4_MAX).astype(np.int8)
    return q, ints, channel.astype(np.float32)


def to_lpbq(model, float_weights: dict, block_size: int) -> dict:
    """Rewrite every per-channel int4 DequantizeLinear of a MatMul weight in `model` (in place) into the explicit LPBQ
    form, from the float weights: DQ(uint8 block integers, float channel scale, axis 1) computes the block scales that
    DQ(int4 values, axis 0, block_size) reads. Returns counts for the manifest."""
    import ml_dtypes  # onnx's own dependency: numpy_helper packs its int4 arrays two values per byte
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    g = model.graph
    inits = {i.name: i for i in g.initializer}
    source_of = {f"{n}_quantized": n for n in float_weights}  # ORT's name for a quantized initializer
    nodes, rewritten, blocks = [], 0, 0
    for node in g.node:
        q_init = inits.get(node.input[0]) if node.op_type == "DequantizeLinear" and node.domain in ("", "ai.onnx") else None
        source = source_of.get(node.input[0])
        if q_init is None or q_init.data_type != TensorProto.INT4 or source is None:
            nodes.append(node)
            continue
        q, ints, channel = lpbq_blocks(float_weights[source], block_size)
        for name in node.input[1:]:
            if name in inits:
                g.initializer.remove(inits.pop(name))
        g.initializer.remove(inits.pop(node.input[0]))
        stem = node.input[0]
        ints_name, channel_name, scale_name = f"{stem}_lpbq_block_ints", f"{stem}_lpbq_channel_scale", f"{stem}_lpbq_block_scale"
        zp_name = f"{stem}_lpbq_zero_point"  # explicit zeros: the EP's LPBQ fusion matches only a DequantizeLinear with three inputs
        g.initializer.extend([numpy_helper.from_array(q.astype(ml_dtypes.int4), stem),
                              numpy_helper.from_array(np.zeros(ints.shape, ml_dtypes.int4), zp_name),
                              numpy_helper.from_array(ints, ints_name), numpy_helper.from_array(channel, channel_name)])
        nodes.append(helper.make_node("DequantizeLinear", [ints_name, channel_name], [scale_name], name=f"{stem}_lpbq_scale", axis=1))
        del node.input[1:]
        node.input.extend([scale_name, zp_name])
        del node.attribute[:]
        node.attribute.extend([helper.make_attribute("axis", 0), helper.make_attribute("block_size", block_size)])
        nodes.append(node)
        rewritten += 1
        blocks += int(ints.size)
    del g.node[:]
    g.node.extend(nodes)
    return {"weights": rewritten, "blocks": blocks, "block_scale_range": [1, 1 << LPBQ_SCALE_BITS]}


def int4_findings(path: Path) -> list[str]:
    """The 4-bit guard, before anything compiles: every 4-bit DequantizeLinear input must be int4 (not uint4) with no
    zero point or an all-zero one (symmetric), and its scale positive and finite: an initializer, or an LPBQ scale
    DequantizeLinear of uint8 integers in 1..16 times a positive finite channel scale. Each finding names the tensor."""
    import numpy as np
    import onnx
    from onnx import TensorProto, numpy_helper

    model = onnx.load(str(path), load_external_data=True)
    g = model.graph
    inits = {i.name: i for i in g.initializer}
    made_by = {o: n for n in g.node for o in n.output}
    found = []

    def positive(name: str, what: str) -> None:
        a = numpy_helper.to_array(inits[name]).astype(np.float64)
        if not np.all(np.isfinite(a)) or np.any(a <= 0):
            found.append(f"{what} {name}: {int(np.count_nonzero(~np.isfinite(a) | (a <= 0)))} scales not positive and finite")

    for node in g.node:
        if node.op_type != "DequantizeLinear" or node.input[0] not in inits:
            continue
        x = inits[node.input[0]]
        if x.data_type not in (TensorProto.INT4, TensorProto.UINT4):
            continue
        if x.data_type == TensorProto.UINT4:
            found.append(f"{x.name}: uint4 (asymmetric) weights")
        if len(node.input) > 2 and node.input[2]:
            zp = inits.get(node.input[2])
            if zp is None or np.any(numpy_helper.to_array(zp) != 0):
                found.append(f"{x.name}: non-zero zero point {node.input[2]} (asymmetric)")
        scale = node.input[1]
        if scale in inits:
            positive(scale, f"{x.name} scale")
        elif scale in made_by and made_by[scale].op_type == "DequantizeLinear":
            ints, channel = made_by[scale].input[0], made_by[scale].input[1]
            if ints not in inits or channel not in inits or inits[ints].data_type != TensorProto.UINT8:
                found.append(f"{x.name}: block scale {scale} is not uint8 integers times a constant channel scale")
                continue
            a = numpy_helper.to_array(inits[ints])
            if a.min() < 1 or a.max() > 1 << LPBQ_SCALE_BITS:
                found.append(f"{x.name}: LPBQ block integers {ints} outside 1..{1 << LPBQ_SCALE_BITS}")
            positive(channel, f"{x.name} channel scale")
        else:
            found.append(f"{x.name}: scale {scale} is neither a constant nor an LPBQ scale")
    return found

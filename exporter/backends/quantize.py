"""Quantization passes over ONNX graphs, through ONNX Runtime's quantization package."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Iterable


class _Feeds:
    """An onnxruntime CalibrationDataReader over a list of feed dicts."""

    def __init__(self, feeds: Iterable[dict]):
        self._it = iter(list(feeds))

    def get_next(self):
        return next(self._it, None)


def _quiet():
    logging.getLogger().setLevel(logging.ERROR)


def dynamic_int8(src: Path, dst: Path) -> dict:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    _quiet()
    quantize_dynamic(str(src), str(dst), weight_type=QuantType.QInt8, per_channel=True)
    return {"scheme": "ort-dynamic", "weights": "int8 per-channel symmetric", "activations": "uint8 dynamic"}


def _matmul_weight_overrides(src: Path) -> dict:
    """Per-output-channel int8 symmetric quantization of every constant MatMul weight [K, N] (axis 1)."""
    import onnx
    from onnxruntime.quantization import QuantType

    g = onnx.load(str(src), load_external_data=False).graph
    inits = {i.name: len(i.dims) for i in g.initializer}
    return {n.input[1]: [{"axis": 1, "quant_type": QuantType.QInt8, "symmetric": True}]
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
    quantize(str(src), str(dst), cfg)
    return {
        "scheme": "ort-qdq-static",
        "weights": ("int8 per-channel symmetric (MatMul weights, axis 1); uint8 per-tensor asymmetric (the rest)" if matmul_per_channel
                    else "uint8 per-tensor asymmetric"),
        "activations": "uint16 asymmetric (MinMax)",
        "calibration_samples": len(feeds),
    }

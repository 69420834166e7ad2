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


def static_w8a16(src: Path, dst: Path, feeds: list[dict]) -> dict:
    """Calibrated QDQ for the HTP integer path: uint8 weights, uint16 activations (MinMax)."""
    from onnxruntime.quantization import CalibrationDataReader, CalibrationMethod, QuantType, quantize
    from onnxruntime.quantization.execution_providers.qnn import get_qnn_qdq_config

    _quiet()

    class Reader(_Feeds, CalibrationDataReader):
        pass

    cfg = get_qnn_qdq_config(
        str(src),
        Reader(feeds),
        calibrate_method=CalibrationMethod.MinMax,
        activation_type=QuantType.QUInt16,
        weight_type=QuantType.QUInt8,
    )
    quantize(str(src), str(dst), cfg)
    return {
        "scheme": "ort-qdq-static",
        "weights": "uint8 per-tensor asymmetric",
        "activations": "uint16 asymmetric (MinMax)",
        "calibration_samples": len(feeds),
    }

"""Stages of `ryzenai-qdq`: the ONNX export at the opset Ryzen AI takes, then AMD Quark's preset quantization
calibrated on the build's calibration runs (exporter/backends/ryzenai.py)."""

from __future__ import annotations

from exporter.backends import onnx_stages
from exporter.backends.base import Artifacts

bundle_files = onnx_stages.bundle_files  # an ONNX graph with its external data, as for `onnx`


def produce(backend, build) -> Artifacts:
    from exporter.backends import ryzenai

    def quark(method, src, dst, feeds, options):
        return ryzenai.quantize(src, dst, feeds, build.plan.precision, build.cache.root, build.reporter, **options)

    def libraries(b):
        return (ryzenai.custom_ops_library(b.cache.root, b.reporter),)

    fp32 = onnx_stages.export(backend, build)
    quantized, scheme, custom_ops = onnx_stages.quantize(backend, build, fp32, quark, libraries)
    return Artifacts(float=fp32, quantized=quantized, final=quantized, scheme=scheme, custom_ops=custom_ops)

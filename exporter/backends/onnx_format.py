"""`onnx`: ONNX graphs for ONNX Runtime's CPU, CUDA and DirectML execution providers.

Float graphs from the family's step modules (torch.onnx, dynamo, external data), then a path-only pass in a worker
interpreter: ORT dynamic int8 (uint8 weights, U8U8, exact on every CPU kernel path), fp16 conversion, or NNCF weight-only
int4/int8; a calibrated QDQ pass where a precision asks for one. Parity: the float export on ORT CPU, then the final
graphs on the target's EP or the plan's declared emulation.
"""

from __future__ import annotations

from exporter.backends.base import Backend

EXPORT_TOOLS = ("torch", "onnx", "onnxscript", "transformers", "safetensors", "numpy")


class OnnxBackend(Backend):
    name = "onnx"
    stages_module = "exporter.backends.onnx_stages"
    implemented = frozenset({"float", "ort-dynamic", "ort-qdq-static", "fp16-convert", "nncf-int4", "nncf-int8-wo"})
    calibrated_methods = frozenset({"ort-qdq-static"})
    method_modules = {"nncf-int4": ("nncf",), "nncf-int8-wo": ("nncf",)}

    def tools(self, method):
        return ("onnx", "onnxruntime", "numpy") + (("nncf",) if (method or "").startswith("nncf-") else ())

    def hub_options(self, qairt):
        return (f"--target_runtime qnn_context_binary --compute_unit npu --qairt_version {qairt}",
                f"--compute_unit npu --qairt_version {qairt}")


BACKEND = OnnxBackend()

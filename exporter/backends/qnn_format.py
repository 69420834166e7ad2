"""`qnn-context`: QNN context binaries for Qualcomm HTP through ONNX Runtime's EPContext (onnxruntime-qnn).

Float graphs, a calibrated QDQ pass for the HTP integer path (uint8/int8 weights, or int4 LPBQ/per-channel MatMul weights on
v73+, with uint16 activations), then each graph
compiled on the QNN EP (CPU fallback disabled) into an EPContext model plus its context binary. Parity at three points:
the float export and the fake-quantized QDQ graph on ORT CPU, the compiled context on the HTP (the x86 simulator of
onnxruntime-qnn on a build host). Where the plan shares weights (v73+), the bundle ships each weight set's graphs in one
weight-shared context binary compiled from the same QDQ graphs; parity is the per-graph contexts' (exporter/htp_sharing.py).
"""

from __future__ import annotations

from exporter.backends.base import Backend, VerifyPoint


class QnnBackend(Backend):
    name = "qnn-context"
    stages_module = "exporter.backends.qnn_stages"
    modules = ("onnxruntime_qnn",)
    implemented = frozenset({"float", "ort-dynamic", "ort-qdq-static", "qnn-lpbq"})
    calibrated_methods = frozenset({"ort-qdq-static", "qnn-lpbq"})
    shares_weights = True  # weight-shared context binaries on v73+ (qnn_stages.compile_shared_groups)

    def verify_points(self, precision):
        points = [VerifyPoint("float-export", "float", "fp32", "cpu")]
        if precision != "fp32":
            points += [VerifyPoint("fake-quant", "quantized", precision, "cpu"), VerifyPoint("compiled", "final", precision, "target")]
        return points

    def bundle_files(self, final, graph_name, staging):
        """The EPContext model and the files it names (its context binary, one binary shared by a sharing group's
        graphs), under the names the compile gave them."""
        import shutil

        from manifests.onnx_refs import named_files

        names = [final.name] + named_files(final)
        for n in names:
            src, dst = final.parent / n, staging / n
            if not (dst.exists() and dst.stat().st_size == src.stat().st_size):  # a shared binary is copied once
                shutil.copy2(src, dst)
        return final.name, names

    def component_findings(self, component):
        found = super().component_findings(component)
        if not any(f.endswith(".bin") for f in component["files"]):
            found.append(f"component {component['name']} carries no compiled context binary")
        return found

    def hub_options(self, qairt):
        return f"--target_runtime precompiled_qnn_onnx --qairt_version {qairt}", f"--compute_unit npu --qairt_version {qairt}"


BACKEND = QnnBackend()

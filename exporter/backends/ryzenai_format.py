"""`ryzenai-qdq`: QDQ models for the Ryzen AI NPU (Vitis AI EP), quantized with AMD Quark's presets.

Float graphs at the opset Ryzen AI takes, Quark (XINT8, A8W8, A16W8, BF16) calibrated on the build's calibration runs,
and the Vitis AI EP's provider options (and, for BF16, its compile configuration) written into the bundle. The NPU
compiles the QDQ model on its first session on the device; parity here is measured on the plan's emulation.
"""

from __future__ import annotations

from exporter.backends.base import Backend

# Ryzen AI Software recommends opset 17 (ryzenai.docs.amd.com 1.4, "Model Compilation and Deployment"); torch 2.13's
# exporter cannot convert these graphs below 18 (onnx's version converter fails on ReduceMean with axes as an input:
# "axes_input_to_attribute ... No initializer or constant input"), so Ryzen AI graphs are opset 18, recorded as such
RYZENAI_OPSET = 18
RECOMMENDED_OPSET = 17
CUSTOM_OPS_DOMAIN = "com.amd.quark"
VITISAI_CONFIG = "vitisai_ep.json"
PROVIDER_OPTIONS = "vitisai_provider_options.json"


class RyzenAiBackend(Backend):
    name = "ryzenai-qdq"
    stages_module = "exporter.backends.ryzenai_stages"
    modules = ("quark",)
    methods = {"xint8": "quark-xint8", "w8a8": "quark-a8w8", "w8a16": "quark-a16w8", "bf16": "quark-bf16"}
    calibrated_methods = frozenset({"quark-xint8", "quark-a8w8", "quark-a16w8", "quark-bf16"})
    export_opset = RYZENAI_OPSET

    def tools(self, method):
        return ("onnx", "onnxruntime", "numpy", "amd-quark", "torch")

    def runtime(self, build, artifacts, bundle_name, staging):
        import json

        rt = super().runtime(build, artifacts, bundle_name, staging)
        files = vitisai_files(bundle_name, build.plan.precision, bool(artifacts.scheme.get("needs_custom_ops")))
        for name, body in files.items():
            (staging / name).write_text(json.dumps(body, indent=1, sort_keys=True) + "\n")
        return rt | {"provider_options": files[PROVIDER_OPTIONS]["provider_options"], "files": sorted(files),
                     "opset": files[PROVIDER_OPTIONS]["session"]["opset"]}


def vitisai_files(bundle_name: str, precision: str, needs_custom_ops: bool) -> dict[str, dict]:
    """The Vitis AI EP files a bundle carries (ryzenai.docs.amd.com, "Model Compilation and Deployment"):
    `vitisai_provider_options.json`, the provider options a Ryzen AI runtime passes to the session (the compiled-model
    cache; for BF16 the compile configuration), and for BF16 `vitisai_ep.json`, that configuration (VAIML passes)."""
    options = {"cache_dir": "vitisai_cache", "cache_key": bundle_name}
    files = {}
    if precision == "bf16":
        options["config_file"] = VITISAI_CONFIG
        files[VITISAI_CONFIG] = {
            "passes": [{"name": "init", "plugin": "vaip-pass_init"},
                       {"name": "vaiml_partition", "plugin": "vaip-pass_vaiml_partition",
                        "vaiml_config": {"optimize_level": 2, "preferred_data_storage": "auto"}}],
            "target": "VAIML",
            "targets": [{"name": "VAIML", "pass": ["init", "vaiml_partition"]}],
        }
    files[PROVIDER_OPTIONS] = {
        "execution_provider": "VitisAIExecutionProvider",
        "provider_options": options,
        "session": {"batch": 1, "static_shapes": True, "opset": RYZENAI_OPSET, "recommended_opset": RECOMMENDED_OPSET,
                    "opset_note": "opset 18: torch 2.13's exporter cannot convert these graphs to the recommended 17"},
        "custom_op_domain": CUSTOM_OPS_DOMAIN if needs_custom_ops else None,
        "note": ("paths are relative to the bundle; the Vitis AI EP compiles the QDQ model on its first session on the device into "
                 "cache_dir/cache_key; NPU placement is recorded only by such a run"),
    }
    return files


BACKEND = RyzenAiBackend()

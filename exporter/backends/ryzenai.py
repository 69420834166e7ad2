"""The Ryzen AI NPU backend: AMD Quark QDQ quantization, Quark's custom-op library, the Vitis AI EP options.

Quark compiles its custom-op library (g++/ninja, through torch's cpp_extension) when ``quark.onnx`` is
first imported, into ``$TORCH_EXTENSIONS_DIR`` (by default under the user's home). Here it always
happens in a directory we name: ``$EDGE_EXPORT_QUARK_OPS_DIR`` if set, else ``<cache>/quark-ops/<versions>``,
with a progress stage and the compiler's output in ``build.log`` there. The library is needed to run
BF16 models (``com.amd.quark`` ExtendedQuantizeLinear) on ORT CPU, the reference emulation here.
"""

from __future__ import annotations

import contextlib
import copy
import os
import sys
from functools import lru_cache
from pathlib import Path

from exporter.backends.quantize import tool_output_to

# Ryzen AI Software recommends opset 17 (ryzenai.docs.amd.com 1.4, "Model Compilation and Deployment"); torch 2.13's
# exporter cannot convert these graphs below 18 (onnx's version converter fails on ReduceMean with axes as an input:
# "axes_input_to_attribute ... No initializer or constant input"), so Ryzen AI graphs are opset 18, recorded as such
from exporter.backends.ryzenai_format import CUSTOM_OPS_DOMAIN

# precision -> Quark QConfig preset in quark.onnx.quantization.config.custom_config (its specs are recorded as read)
PRESETS = {"xint8": "XINT8_QCONFIG", "w8a8": "A8W8_QCONFIG", "w8a16": "A16W8_QCONFIG", "bf16": "BF16_QCONFIG"}
# Quark's calibrators run an augmented model per feed and keep per-tensor histograms (Percentile, MinMSE): about
# 0.1 s per feed on a tiny graph, 142 s for the 1437 feeds of tiny-lm's decode graph. A strided subset of at
# most this many feeds of the build's calibration runs (spread over every run and position) is used; the
# manifest records how many were used of how many.
QUARK_MAX_FEEDS = 128


def ops_dir(cache_root: Path) -> Path:
    """Where Quark's custom-op library is built and kept for these tool versions."""
    env = os.environ.get("EDGE_EXPORT_QUARK_OPS_DIR")
    if env:
        return Path(env)
    from importlib import metadata

    tag = f"amd-quark-{metadata.version('amd-quark')}_torch-{metadata.version('torch')}"
    return Path(cache_root) / "quark-ops" / tag


@contextlib.contextmanager
def _extensions_dir(path: Path):
    old = os.environ.get("TORCH_EXTENSIONS_DIR")
    os.environ["TORCH_EXTENSIONS_DIR"] = str(path)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("TORCH_EXTENSIONS_DIR", None)
        else:
            os.environ["TORCH_EXTENSIONS_DIR"] = old


def _built(path: Path) -> Path | None:
    return next(iter(sorted(path.glob("quark_custom_ops_stable_abi/*.so")) + sorted(path.glob("quark_custom_ops_stable_abi/*.dll"))), None)


@lru_cache(maxsize=None)
def _library_in(path: Path) -> str:
    """Import quark.onnx with its extension directory at `path` (compiling there on first use); the library path."""
    path.mkdir(parents=True, exist_ok=True)
    with _extensions_dir(path), tool_output_to(path / "build.log"):
        if "quark.onnx" in sys.modules and _built(path) is None:
            # imported earlier in this process against another directory: build this one's copy too
            from quark.onnx.operators.custom_ops import build_custom_ops

            build_custom_ops._initialize_kernels()
        import quark.onnx  # noqa: F401  (compiles or loads the library at import)
        from quark.onnx.operators.custom_ops.build_custom_ops import get_library_path

        lib = get_library_path()
    if not Path(lib).is_file():
        from exporter.errors import MissingPrerequisite

        raise MissingPrerequisite(f"Quark's custom-op library was not built in {path} (see {path / 'build.log'})",
                                  "install g++ and ninja (pip install ninja), then rerun; or set EDGE_EXPORT_QUARK_OPS_DIR to a writable directory")
    return lib


def custom_ops_library(cache_root: Path, reporter=None) -> str:
    """Quark's custom-op library for ORT sessions, built in our cache directory with a progress stage on first use."""
    path = ops_dir(cache_root).resolve()
    if reporter is not None and _built(path) is None:
        with reporter.stage("quark-ops", f"compiling Quark's custom-op library (g++/ninja, once per tool versions) in {path}"):
            return _library_in(path)
    return _library_in(path)


class _Reader:
    """A Quark/ORT CalibrationDataReader over a list of feed dicts (a fresh iterator per pass)."""

    def __init__(self, feeds):
        self._feeds = list(feeds)
        self._it = iter(self._feeds)

    def get_next(self):
        return next(self._it, None)

    def rewind(self):
        self._it = iter(self._feeds)


def quantize(src: Path, dst: Path, feeds: list[dict], precision: str, cache_root: Path, reporter=None,
             calibration: str | None = None, weights_per_channel: bool = False) -> dict:
    """Quark's preset for `precision` over the float graph `src`, calibrated on `feeds`; Quark's own log in dst's folder.
    A recipe may change two things of the preset, recorded with it: `calibration` (a Quark CalibMethod name, e.g.
    "MinMax", for activations and weights) and `weights_per_channel` (per-output-channel weight scales)."""
    name = PRESETS[precision]
    used = strided(feeds, QUARK_MAX_FEEDS)
    src, dst = Path(src).resolve(), Path(dst).resolve()
    library = custom_ops_library(cache_root, reporter)
    # Quark writes quantized_info.csv (its profile) into the working directory: run it in the stage's own
    with _extensions_dir(ops_dir(cache_root).resolve()), tool_output_to(dst.parent / "quark.log"), contextlib.chdir(dst.parent):
        from quark.onnx import ModelQuantizer
        from quark.onnx.quantization.config import custom_config

        from quark.onnx.quantization.config.spec import CalibMethod, QuantGranularity

        config = copy.deepcopy(getattr(custom_config, name))
        if calibration:
            for spec in (config.global_config.activation, config.global_config.weight):
                spec.calibration_method = CalibMethod[calibration]
        if weights_per_channel:
            config.global_config.weight.quant_granularity = QuantGranularity.Channel
        weights, activations = _spec(config.global_config.weight), _spec(config.global_config.activation)
        ModelQuantizer(config).quantize_model(str(src), str(dst), _Reader(used))
    if not Path(dst).is_file():
        from exporter.errors import EdgeExportError

        raise EdgeExportError(f"Quark {name} wrote no model for {src} (see {Path(dst).parent / 'quark.log'})",
                              "read Quark's log; the graph may hold an operator Quark cannot quantize")
    import onnx

    domains = sorted({n.domain for n in onnx.load(str(dst), load_external_data=False).graph.node if n.domain})
    return {
        "scheme": f"quark-{name.removesuffix('_QCONFIG').lower()}",
        "quantizer": f"quark.onnx.ModelQuantizer({name})",
        "preset_changes": {k: v for k, v in (("calibration", calibration), ("weights_per_channel", weights_per_channel)) if v},
        "weights": weights,
        "activations": activations,
        "calibration_samples": len(used),
        "calibration_feeds_available": len(feeds),
        "calibration_selection": f"every {max(1, -(-len(feeds) // QUARK_MAX_FEEDS))}th feed of the calibration runs (at most {QUARK_MAX_FEEDS})",
        "custom_op_domains": domains,
        "needs_custom_ops": CUSTOM_OPS_DOMAIN in domains,
        "custom_ops_library_sha256": _sha(library) if CUSTOM_OPS_DOMAIN in domains else None,
    }


def strided(items: list, limit: int) -> list:
    """At most `limit` items, every k-th, so the subset spans the whole list (every run, every position)."""
    step = max(1, -(-len(items) // limit))
    return list(items[::step])


def _spec(spec) -> str:
    """A Quark tensor spec in words, read from the preset (data type, symmetry, scale type, granularity, calibration)."""
    dtype = getattr(spec.data_type, "__name__", str(spec.data_type)).lower()
    scale = str(spec.scale_type).rsplit(".", 1)[-1]
    return (f"{dtype} {'symmetric' if spec.symmetric else 'asymmetric'}, {scale} scales, per "
            f"{str(spec.quant_granularity).rsplit('.', 1)[-1].lower()}, {str(spec.calibration_method).rsplit('.', 1)[-1]} calibration")


def _sha(path: str) -> str:
    from exporter.hashing import sha256_file

    return sha256_file(Path(path))

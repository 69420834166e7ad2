"""The descriptive core model: recipes, components, buckets, tensor specs, thresholds.

Nothing here imports torch: plans, manifests and the gate read these.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from recipes.cost import CostModel


@dataclass(frozen=True)
class CheckpointPin:
    """Where a checkpoint comes from and the SHA-256 of every file that is used."""

    source: str  # "synthesized:<recipe>", "local:<path>" or "hf:<repo>"
    revision: str
    files: dict[str, str]  # relative file name -> sha256


@dataclass(frozen=True)
class CheckpointLayout:
    """What a family's loader reads from a checkpoint, for `edge-export pin` to check before anything loads it:
    every tensor (upstream name -> shape) it loads, prefixes upstream ships that inference never reads (allowed,
    not loaded), and prefixes the loader accounts for without checking their shapes yet (named in the pin)."""

    tensors: dict[str, tuple[int, ...]]
    unused: tuple[str, ...] = ()
    unchecked: tuple[str, ...] = ()


@dataclass(frozen=True)
class TensorSpec:
    name: str
    dtype: str  # onnx-style element type name: float32, int32, ...
    shape: tuple[int, ...]

    def to_json(self) -> dict:
        return {"name": self.name, "dtype": self.dtype, "shape": list(self.shape)}


@dataclass(frozen=True)
class Bucket:
    """A static shape bucket: `ar` tokens per call, `context` total KV slots."""

    ar: int
    context: int

    @property
    def past(self) -> int:
        return self.context - self.ar


@dataclass(frozen=True)
class Component:
    """One exported graph of a recipe (e.g. prefill AR-32, decode AR-1)."""

    name: str
    role: str  # "prefill" | "decode" | "embedding" | "head"
    bucket: Bucket
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    layers: tuple[int, int] | None = None  # [start, end) of the decoder stack this graph holds
    part: tuple[int, int] | None = None  # (k, n): the k-th of n layer-range parts of one graph
    graph: str | None = None  # explicit graph name; default {role}_ar{N}_cl{C}

    @property
    def graph_name(self) -> str:
        return self.graph or f"{self.role}_ar{self.bucket.ar}_cl{self.bucket.context}"


class Thresholds:
    """Parity thresholds of one precision: {metric: value}, each metric a row of verify/thresholds.py's table (per output:
    cosine, PSNR, max abs; per decode run: token agreement, exact greedy prefix). A new metric is a new row there and a
    value here, nothing else."""

    def __init__(self, **values: float):
        self._values = dict(values)  # every key a metric of the table (tests/test_units.py checks every recipe's)

    def __getattr__(self, name: str):
        try:
            return self.__dict__["_values"][name]
        except KeyError:
            raise AttributeError(name) from None

    def __eq__(self, other) -> bool:
        return isinstance(other, Thresholds) and other._values == self._values

    def __hash__(self) -> int:
        return hash(tuple(sorted(self._values.items())))

    def __repr__(self) -> str:
        return "Thresholds(" + ", ".join(f"{k}={v!r}" for k, v in self._values.items()) + ")"

    def to_json(self) -> dict:
        return dict(self._values)

    def replace(self, **changes: float) -> "Thresholds":
        """A copy with `changes` applied (a metric set or changed)."""
        return Thresholds(**{**self._values, **changes})


@dataclass(frozen=True)
class Precision:
    """A numeric scheme: how weights and activations are stored on the target."""

    name: str
    weights: str
    activations: str
    method: str  # how it is produced in the generic ONNX formats; a backend may map a precision its own way
    description: str
    weight_bits: int
    act_bits: int  # width of activations and state buffers at run time
    group_size: int | None = None  # block-quantized weights: one fp16 scale per group

    @property
    def bytes_per_weight(self) -> float:
        scale = 16 / self.group_size if self.group_size else 0.0
        return (self.weight_bits + scale) / 8



@dataclass(frozen=True)
class Recipe:
    name: str
    family: str
    description: str
    architecture: str
    pin: CheckpointPin | None
    model_config: dict
    components: tuple[Component, ...]
    # target name, target family or accelerator kind -> precisions built there (first is the default)
    precisions: dict[str, tuple[str, ...]]
    thresholds: dict[str, Thresholds]
    decode_steps: int
    state_layout: dict
    cost: "CostModel"
    # why this recipe cannot be built as it stands (a plan-only family, or a family that needs --checkpoint); None when it builds
    blocked: str | None = None
    has_exporter: bool = True  # False for a plan-only family: no loader and step graphs yet, whatever checkpoint is given
    blocked_fix: str = "the recipe's issue adds its checkpoint pin and exporter"
    synthesize: Callable[[object], None] | None = field(default=None, compare=False)
    # the recipe for a given checkpoint config and, if given, the reviewed pin of that checkpoint (validates the
    # family's structure; without a pin, a synthesised twin's own pin or none)
    variant_for: Callable[..., "Recipe"] | None = field(default=None, compare=False)
    # the tensors a checkpoint of a given config must hold (edge-export pin checks them); None: no loader yet
    checkpoint_layout: Callable[[dict], CheckpointLayout] | None = field(default=None, compare=False)
    # components with some graphs cut into layer-range parts: {component name: [(start, end), ...]}
    components_for: Callable[[dict], tuple] | None = field(default=None, compare=False)
    # the family adapter (exporter/adapters/ registry key) that loads, feeds and judges this recipe; None: plan-only
    adapter: str | None = None
    # multi-component families: the recipe of each buildable group (None where a prerequisite is missing)
    group_recipes: Callable[[], dict] | None = field(default=None, compare=False)
    group_missing: dict = field(default_factory=dict, compare=False)  # group -> (reason, fix)
    # per-precision quantizer options the recipe chooses (recorded in the manifest's quantization scheme),
    # e.g. {"w8a16": {"matmul_per_channel": True}}
    quant_options: dict = field(default_factory=dict)
    # where a graph's calibration inputs come from: "float" (the float graphs before it) or "quantized" (the already
    # quantized graphs before it: part k calibrated on what quantized parts 1..k-1 produce; exporter/backends/onnx_stages.py)
    calibration_upstream: str = "float"

    def with_parts(self, splits: dict[str, list[tuple[int, int]]]) -> tuple[Component, ...]:
        if not splits:
            return self.components
        if self.components_for is None:
            raise ValueError(f"recipe {self.name} cannot cut graphs into parts")
        return self.components_for(splits)

    def precisions_for(self, target, fmt: str | None = None) -> tuple[str, ...]:
        """Precisions defined for `target` in format `fmt` (default: the target's first): keys qualified by the format
        (`FORMAT:NAME`, `FORMAT:FAMILY`, `FORMAT:KIND`, `FORMAT`) first; for the target's default format also the plain
        target name, target family and accelerator kind."""
        fmt = fmt or target.formats[0]
        keys = [f"{fmt}:{target.name}", f"{fmt}:{target.family}", f"{fmt}:{target.accelerator.kind}", fmt]
        if fmt == target.formats[0]:
            keys += [target.name, target.family, target.accelerator.kind]
        for key in keys:
            if key in self.precisions:
                return self.precisions[key]
        return ()

    def for_checkpoint(self, cfg: dict, pin: CheckpointPin | None = None) -> "Recipe":
        """This recipe for the checkpoint whose config.json is `cfg`, pinned by `pin` when one is given. A config the
        family cannot read (a key missing, a value of the wrong type) is a usage error naming it, not a traceback."""
        from dataclasses import replace

        from exporter.errors import UsageError

        if self.variant_for is not None:
            try:
                return self.variant_for(cfg, pin)
            except (KeyError, TypeError, ValueError, AttributeError) as e:
                what = f"has no {e.args[0]!r}" if isinstance(e, KeyError) else f"cannot be read ({type(e).__name__}: {e})"
                raise UsageError(f"the checkpoint's config.json {what} for recipe {self.name}",
                                 f"point --checkpoint at a snapshot of the {self.family} family (config.json and *.safetensors)") from None
        return replace(self, pin=pin) if pin is not None else self

    def config_problems(self, cfg: dict) -> list[str]:
        """Why a checkpoint config does not fit this recipe ([] when it does): a family recipe validates it through
        its variant; a fixed recipe (tiny-lm) requires every key of its model config to equal the checkpoint's."""
        from exporter.errors import UsageError

        if self.variant_for is not None:
            try:
                self.for_checkpoint(cfg)
            except UsageError as e:
                return [e.message]
            return []
        return [f"{k} is {cfg.get(k)!r}, the recipe has {v!r}" for k, v in self.model_config.items()
                if k not in ("torch_dtype", "dtype") and cfg.get(k) != v]

    def component(self, name: str) -> Component:
        from exporter.errors import UnknownNameError

        for c in self.components:
            if c.name == name:
                return c
        raise UnknownNameError("component", name, [c.name for c in self.components])

    def to_json(self) -> dict:
        """Everything that defines what this recipe builds (its content hash input)."""
        return {
            "name": self.name,
            "family": self.family,
            "architecture": self.architecture,
            "pin": {"source": self.pin.source, "revision": self.pin.revision, "files": dict(self.pin.files)} if self.pin else None,
            "model_config": self.model_config,
            "components": [
                {
                    "name": c.name,
                    "role": c.role,
                    "graph_name": c.graph_name,
                    "bucket": {"ar": c.bucket.ar, "context": c.bucket.context},
                    "inputs": [t.to_json() for t in c.inputs],
                    "outputs": [t.to_json() for t in c.outputs],
                    **({"layers": list(c.layers)} if c.layers else {}),
                    **({"part": list(c.part)} if c.part else {}),
                }
                for c in self.components
            ],
            "precisions": {k: list(v) for k, v in self.precisions.items()},
            "thresholds": {k: v.to_json() for k, v in self.thresholds.items()},
            "decode_steps": self.decode_steps,
            "state_layout": self.state_layout,
            **({"quant_options": self.quant_options} if self.quant_options else {}),
            **({"calibration_upstream": self.calibration_upstream} if self.calibration_upstream != "float" else {}),
        }

    def content_hash(self) -> str:
        from exporter.hashing import sha256_json

        return sha256_json(self.to_json())


PRECISIONS: dict[str, Precision] = {
    p.name: p
    for p in (
        Precision("fp32", "float32", "float32", "float", "unquantized float32 graph", 32, 32),
        Precision("fp16", "float16 (graph inputs/outputs stay float32)", "float16", "fp16-convert",
                  "float16 graph (GPU; HTP v73+ fp16 path); onnxruntime.transformers.float16 with float32 I/O", 16, 16),
        Precision("bf16", "bfloat16", "bfloat16", "quark-bf16", "bfloat16 QDQ (AMD Quark BF16 preset, Ryzen AI NPU)", 16, 16),
        Precision(
            "xint8", "int8 symmetric, power-of-two scales", "uint8, power-of-two scales (calibrated, MinMSE)", "quark-xint8",
            "AMD Quark XINT8: power-of-two scales for the NPU's convolution path (Ryzen AI)", 8, 8,
        ),
        Precision(
            "int8", "uint8 per-channel (asymmetric)", "uint8 dynamic (per call)", "ort-dynamic",
            "ONNX Runtime dynamic quantization (U8U8 MatMulInteger: exact int32 on every CPU kernel path); CPU execution providers", 8, 32,
        ),
        Precision(
            "int4", "int4 blocks of 128 (symmetric, fp16 scales)", "float (unchanged)", "nncf-int4",
            "weight-only 4-bit (NNCF INT4_SYM, MatMulNBits); CPU, CUDA and DirectML", 4, 32, 128,
        ),
        Precision(
            "int8-wo", "int8 per-channel (asymmetric)", "float (unchanged)", "nncf-int8-wo",
            "weight-only 8-bit (NNCF INT8_ASYM, DequantizeLinear before MatMul/Gather); CPU, CUDA and DirectML", 8, 32,
        ),
        Precision(
            "8da4w", "int4 groups of 32 (symmetric), int4 embedding", "int8 dynamic (per token)", "torchao-8da4w",
            "torchao 8-bit dynamic activations with 4-bit grouped weights (ExecuTorch XNNPACK)", 4, 8, 32,
        ),
        Precision("w8a8", "int8 per-tensor (symmetric)", "int8 static (calibrated)", "ort-qdq-static-a8",
                  "calibrated QDQ, 8-bit weights and activations (Ryzen AI: Quark A8W8)", 8, 8),
        Precision(
            "w8a16", "uint8 per-tensor (asymmetric)", "uint16 static (calibrated)", "ort-qdq-static",
            "calibrated QDQ, 8-bit weights, 16-bit activations: uint8/uint16 on Qualcomm HTP (ORT QNN QDQ), int8/int16 on Ryzen AI (Quark A16W8)", 8, 16,
        ),
        Precision(
            "w4a16", "int4 symmetric MatMul weights: LPBQ blocks of 64 (default) or per-channel (a recipe option)", "uint16 static (calibrated)", "qnn-lpbq",
            "calibrated QDQ, 4-bit MatMul weights (low-power block quantization or per channel), 16-bit activations (HTP v73+)", 4, 16, 64,
        ),
    )
}


def plan_only(name: str, family: str, description: str, architecture: str, config: dict,
              precisions: dict[str, tuple[str, ...]], cost: "CostModel", blocked: str, blocked_fix: str | None = None,
              variant_for: Callable[..., "Recipe"] | None = None,
              checkpoint_layout: Callable[[dict], CheckpointLayout] | None = None) -> Recipe:
    """A family recipe that can be planned (capacity, parts, precision) but not built yet. It may already check and pin a
    checkpoint (`variant_for`, `checkpoint_layout`) so a team can pin its snapshot before the exporter lands."""
    return Recipe(
        name=name, family=family, description=description, architecture=architecture, pin=None,
        model_config=config, components=(), precisions=precisions, thresholds={}, decode_steps=0,
        state_layout={}, cost=cost, blocked=blocked, has_exporter=False, variant_for=variant_for, checkpoint_layout=checkpoint_layout,
        **({"blocked_fix": blocked_fix} if blocked_fix else {}),
    )

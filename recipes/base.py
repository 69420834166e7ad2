"""The descriptive core model: recipes, components, buckets, tensor specs, thresholds.

Nothing here imports torch: plans, manifests and the gate read these.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable


@dataclass(frozen=True)
class CheckpointPin:
    """Where a checkpoint comes from and the SHA-256 of every file that is used."""

    source: str  # "synthesized:<recipe>", "local:<path>" or "hf:<repo>"
    revision: str
    files: dict[str, str]  # relative file name -> sha256


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
    role: str  # "prefill" | "decode"
    bucket: Bucket
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]

    @property
    def graph_name(self) -> str:
        return f"{self.role}_ar{self.bucket.ar}_cl{self.bucket.context}"


@dataclass(frozen=True)
class Thresholds:
    """Parity thresholds for one precision. Every metric is checked per output."""

    min_cosine: float
    min_psnr_db: float
    max_abs: float
    min_token_agreement: float  # teacher-forced top-1 agreement over the decode run
    min_greedy_prefix: int  # free-running greedy tokens that must match torch exactly

    def to_json(self) -> dict:
        return {
            "min_cosine": self.min_cosine,
            "min_psnr_db": self.min_psnr_db,
            "max_abs": self.max_abs,
            "min_token_agreement": self.min_token_agreement,
            "min_greedy_prefix": self.min_greedy_prefix,
        }


@dataclass(frozen=True)
class Precision:
    """A numeric scheme: how weights and activations are stored on the target."""

    name: str
    weights: str
    activations: str
    method: str  # "float" | "ort-dynamic" | "ort-qdq-static"
    description: str


@dataclass(frozen=True)
class Recipe:
    name: str
    family: str
    description: str
    architecture: str
    pin: CheckpointPin
    model_config: dict
    components: tuple[Component, ...]
    # target name -> precisions built there by default (first is the default)
    precisions: dict[str, tuple[str, ...]]
    thresholds: dict[str, Thresholds]
    decode_steps: int
    state_layout: dict
    synthesize: Callable[[object], None] | None = field(default=None, compare=False)

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
            "pin": {"source": self.pin.source, "revision": self.pin.revision, "files": dict(self.pin.files)},
            "model_config": self.model_config,
            "components": [
                {
                    "name": c.name,
                    "role": c.role,
                    "graph_name": c.graph_name,
                    "bucket": {"ar": c.bucket.ar, "context": c.bucket.context},
                    "inputs": [t.to_json() for t in c.inputs],
                    "outputs": [t.to_json() for t in c.outputs],
                }
                for c in self.components
            ],
            "precisions": {k: list(v) for k, v in self.precisions.items()},
            "thresholds": {k: v.to_json() for k, v in self.thresholds.items()},
            "decode_steps": self.decode_steps,
            "state_layout": self.state_layout,
        }

    def content_hash(self) -> str:
        from exporter.hashing import sha256_json

        return sha256_json(self.to_json())


PRECISIONS: dict[str, Precision] = {
    p.name: p
    for p in (
        Precision("fp32", "float32", "float32", "float", "unquantized float32 graph"),
        Precision(
            "int8",
            "int8 per-channel (symmetric)",
            "uint8 dynamic (per call)",
            "ort-dynamic",
            "ONNX Runtime dynamic quantization (MatMulInteger); CPU execution providers",
        ),
        Precision(
            "w8a16",
            "uint8 per-tensor (asymmetric)",
            "uint16 static (calibrated)",
            "ort-qdq-static",
            "calibrated QDQ: uint8 weights, uint16 activations; the integer path of Qualcomm HTP",
        ),
    )
}

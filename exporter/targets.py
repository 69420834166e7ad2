"""Target registry: device profiles keyed by capability, in one reviewable table.

Each fact carries its source. Issue #3 extends this table to every route of the
roadmap; the shape of a Target stays the same.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from exporter.errors import UnknownNameError

GiB = 1 << 30


@dataclass(frozen=True)
class Accelerator:
    kind: str  # "cpu" | "htp"
    htp_arch: int | None = None
    soc_model: int | None = None
    float_support: bool = True
    act16: bool = True
    int4_weights: bool = False
    weight_sharing: bool = False
    per_graph_limit_bytes: int | None = None


@dataclass(frozen=True)
class Target:
    name: str
    description: str
    soc: str
    os: str
    accelerator: Accelerator
    execution_provider: str  # the ONNX Runtime EP that must run every node
    formats: tuple[str, ...]
    precisions: tuple[str, ...]
    ram_bytes: int
    aliases: tuple[str, ...] = ()
    hub_device: str | None = None
    hub_chipset: str | None = None
    sources: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict:
        a = self.accelerator
        return {
            "name": self.name,
            "aliases": list(self.aliases),
            "description": self.description,
            "soc": self.soc,
            "os": self.os,
            "accelerator": {
                "kind": a.kind,
                "htp_arch": a.htp_arch,
                "soc_model": a.soc_model,
                "float_support": a.float_support,
                "act16": a.act16,
                "int4_weights": a.int4_weights,
                "weight_sharing": a.weight_sharing,
                "per_graph_limit_bytes": a.per_graph_limit_bytes,
            },
            "execution_provider": self.execution_provider,
            "formats": list(self.formats),
            "precisions": list(self.precisions),
            "ram_bytes": self.ram_bytes,
            "hub_device": self.hub_device,
            "hub_chipset": self.hub_chipset,
            "sources": dict(self.sources),
        }


TARGETS: tuple[Target, ...] = (
    Target(
        name="cpu",
        aliases=("cpu-x86", "x86-64"),
        description="x86-64 host CPU through ONNX Runtime's CPU execution provider",
        soc="x86-64",
        os="linux",
        accelerator=Accelerator(kind="cpu", float_support=True, act16=True, int4_weights=True),
        execution_provider="CPUExecutionProvider",
        formats=("onnx",),
        precisions=("fp32", "int8"),
        ram_bytes=16 * GiB,
        sources={"ram_bytes": "nominal development host; the plan uses it as the budget"},
    ),
    Target(
        name="qcs6490",
        aliases=("rb3-gen2", "rb3"),
        description="Qualcomm QCS6490 (RB3 Gen 2): Hexagon HTP v68, integer only",
        soc="QCS6490",
        os="linux",
        accelerator=Accelerator(
            kind="htp",
            htp_arch=68,
            soc_model=35,
            float_support=False,
            act16=True,
            int4_weights=False,
            weight_sharing=False,
            per_graph_limit_bytes=2 * GiB,
        ),
        execution_provider="QNNExecutionProvider",
        formats=("qnn-context",),
        precisions=("w8a16",),
        ram_bytes=6 * GiB,
        hub_device="Dragonwing RB3 Gen 2 Vision Kit",
        hub_chipset="qualcomm-qcs6490",
        sources={
            "htp_arch": "Qualcomm AI Hub device attributes (hexagon:v68)",
            "soc_model": "AI Hub compile jobs for QCS6490 use soc_model 35 (ExecuTorch lists QCM6490 as 93)",
            "float_support": "HTP v68 has no float path; fp16 graphs fail (measured, DESIGN.md)",
            "act16": "uint16 activations with uint8 weights run on the v68 simulator (measured)",
            "per_graph_limit_bytes": "about 2 GB per compiled HTP graph (public QNN guidance)",
            "ram_bytes": "RB3 Gen 2 Vision Kit: 6 GB LPDDR5",
        },
    ),
)


def all_targets() -> tuple[Target, ...]:
    return TARGETS


def get_target(name: str) -> Target:
    key = name.strip().lower()
    for t in TARGETS:
        if key == t.name or key in t.aliases:
            return t
    known = [t.name for t in TARGETS] + [a for t in TARGETS for a in t.aliases]
    raise UnknownNameError("target", name, known)

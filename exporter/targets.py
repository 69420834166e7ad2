"""Target registry: device profiles keyed by capability.

The facts live in one reviewable file, ``exporter/data/targets.toml``, each with
its source; this module only types and looks them up. Torch-free and cheap.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources

from exporter.errors import UnknownNameError

GiB = 1 << 30
MiB = 1 << 20


@dataclass(frozen=True)
class Accelerator:
    kind: str  # cpu | htp | cuda | gpu | vitisai
    htp_arch: int | None = None
    soc_model: int | None = None
    float_support: bool = True  # a float (fp16/fp32) path exists on the accelerator
    act16: bool = True  # 16-bit activations
    int4_weights: bool = False
    weight_sharing: bool = False  # graphs of one model may share one weight copy
    per_graph_limit_bytes: int | None = None

    def to_json(self) -> dict:
        return {
            "kind": self.kind,
            "htp_arch": self.htp_arch,
            "soc_model": self.soc_model,
            "float_support": self.float_support,
            "act16": self.act16,
            "int4_weights": self.int4_weights,
            "weight_sharing": self.weight_sharing,
            "per_graph_limit_bytes": self.per_graph_limit_bytes,
        }


@dataclass(frozen=True)
class Target:
    name: str
    family: str
    description: str
    soc: str
    os: str  # linux | wsl | windows | android
    abi: str
    accelerator: Accelerator
    execution_provider: str  # the ONNX Runtime EP that must run every node
    formats: tuple[str, ...]
    precisions: tuple[str, ...]
    ram_bytes: int
    ram_skus_bytes: tuple[int, ...] = ()
    vram_bytes: int | None = None  # separate device memory (discrete GPU); None = shared RAM
    os_reserved_bytes: int = 0
    runtime_overhead_bytes: int = 0
    aliases: tuple[str, ...] = ()
    default_variant: bool = False
    hub_device: str | None = None
    hub_chipset: str | None = None
    requires: tuple[str, ...] = ()  # "module:<python module>" | "provider:<ORT EP name>"
    # the EP that measures parity where this host lacks `execution_provider` (explicit in plan and manifest)
    emulated_by: str | None = None
    # CPU targets: the ISA level the artifact promises (exporter/hostcpu.py BASELINES); None where no CPU runs it
    isa_baseline: str | None = None
    sources: dict[str, str] = field(default_factory=dict)

    @property
    def budget_bytes(self) -> int:
        """Memory the artifacts may use: device VRAM if separate, else RAM less the OS's share."""
        return self.vram_bytes if self.vram_bytes is not None else self.ram_bytes - self.os_reserved_bytes

    @property
    def host_budget_bytes(self) -> int:
        return self.ram_bytes - self.os_reserved_bytes

    def with_ram(self, gib: float) -> "Target":
        """The same target with another RAM SKU (only one the registry lists)."""
        import math
        from dataclasses import replace

        if not isinstance(gib, (int, float)) or not math.isfinite(gib) or gib <= 0:
            from exporter.errors import UsageError

            raise UsageError(f"--ram {gib!r} is not a positive, finite number of GiB",
                             f"choose --ram from: {', '.join(f'{b / GiB:g}' for b in self.ram_skus_bytes)}")
        want = int(round(gib * GiB))
        if want not in self.ram_skus_bytes:
            from exporter.errors import UsageError

            skus = ", ".join(f"{b / GiB:g}" for b in self.ram_skus_bytes)
            raise UsageError(f"target {self.name} has no {gib:g} GiB RAM SKU", f"choose --ram from: {skus} (add a SKU to exporter/data/targets.toml with its source)")
        return replace(self, ram_bytes=want)

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "family": self.family,
            "aliases": list(self.aliases),
            "description": self.description,
            "soc": self.soc,
            "os": self.os,
            "abi": self.abi,
            "accelerator": self.accelerator.to_json(),
            "execution_provider": self.execution_provider,
            "formats": list(self.formats),
            "precisions": list(self.precisions),
            "ram_bytes": self.ram_bytes,
            "ram_skus_bytes": list(self.ram_skus_bytes),
            "vram_bytes": self.vram_bytes,
            "os_reserved_bytes": self.os_reserved_bytes,
            "runtime_overhead_bytes": self.runtime_overhead_bytes,
            "budget_bytes": self.budget_bytes,
            "hub_device": self.hub_device,
            "hub_chipset": self.hub_chipset,
            "requires": list(self.requires),
            "emulated_by": self.emulated_by,
            "isa_baseline": self.isa_baseline,
            "sources": dict(self.sources),
        }


def _gib(x) -> int:
    return int(round(float(x) * GiB))


def _target(d: dict) -> Target:
    a = d["accelerator"]
    limit = a.get("per_graph_limit_gib")
    return Target(
        name=d["name"],
        family=d["family"],
        description=d["description"],
        soc=d["soc"],
        os=d["os"],
        abi=d["abi"],
        accelerator=Accelerator(
            kind=a["kind"],
            htp_arch=a.get("htp_arch"),
            soc_model=a.get("soc_model"),
            float_support=a["float_support"],
            act16=a["act16"],
            int4_weights=a["int4_weights"],
            weight_sharing=a["weight_sharing"],
            per_graph_limit_bytes=_gib(limit) if limit is not None else None,
        ),
        execution_provider=d["execution_provider"],
        formats=tuple(d["formats"]),
        precisions=tuple(d["precisions"]),
        ram_bytes=_gib(d["ram_gib"]),
        ram_skus_bytes=tuple(_gib(x) for x in d.get("ram_skus_gib", [d["ram_gib"]])),
        vram_bytes=_gib(d["vram_gib"]) if "vram_gib" in d else None,
        os_reserved_bytes=_gib(d.get("os_reserved_gib", 0)),
        runtime_overhead_bytes=int(d.get("runtime_overhead_mib", 0)) * MiB,
        aliases=tuple(d.get("aliases", ())),
        default_variant=bool(d.get("default", False)),
        hub_device=d.get("hub_device"),
        hub_chipset=d.get("hub_chipset"),
        requires=tuple(d.get("requires", ())),
        emulated_by=d.get("emulated_by"),
        isa_baseline=d.get("isa_baseline"),
        sources=dict(d.get("sources", {})),
    )


@lru_cache(maxsize=1)
def all_targets() -> tuple[Target, ...]:
    text = resources.files("exporter").joinpath("data/targets.toml").read_text()
    targets = tuple(_target(d) for d in tomllib.loads(text)["target"])
    _check_unique(targets)
    return targets


def _check_unique(targets: tuple[Target, ...]) -> None:
    from exporter.hostcpu import BASELINES

    seen: dict[str, str] = {}
    for t in targets:
        if t.isa_baseline is not None and t.isa_baseline not in BASELINES:
            raise ValueError(f"exporter/data/targets.toml: target {t.name} names unknown isa_baseline {t.isa_baseline!r} "
                             f"(known: {sorted(BASELINES)})")
        keys = [t.name, *t.aliases] + ([t.family] if t.default_variant and t.family != t.name else [])
        for k in keys:
            if k in seen:
                raise ValueError(f"exporter/data/targets.toml: name {k!r} is used by {seen[k]} and {t.name}")
            seen[k] = t.name


def _index() -> dict[str, Target]:
    idx: dict[str, Target] = {}
    for t in all_targets():
        idx[t.name] = t
        for a in t.aliases:
            idx[a] = t
        if t.default_variant:
            idx.setdefault(t.family, t)
    return idx


def known_names() -> list[str]:
    return sorted(_index())


def get_target(name: str) -> Target:
    key = name.strip().lower()
    t = _index().get(key)
    if t is None:
        raise UnknownNameError("target", name, known_names())
    return t


def variants(family: str) -> list[Target]:
    return [t for t in all_targets() if t.family == family]

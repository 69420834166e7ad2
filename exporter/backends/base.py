"""The backend protocol: one object per artifact format, the only place that knows what the format is.

A backend says which precisions it builds and how (`method_for`), what a build of it needs on the host (python modules,
per method), the tools whose versions enter its cache keys, where parity is measured (`verify_points`), how its graphs
become bundle files, what a runtime needs besides them (`runtime`), and how the audit judges its placement. Its stages
(export, quantize, compile, lower) live in a separate module named by `stages_module` and are imported only when a
build runs: this module and the backend descriptions are torch-free, so the plan, the gate and the audit can ask them
questions with the core install.

Backends register by name in `exporter/backends/__init__.py`; the pipeline asks the registry for `plan.format` and
never compares a format name itself.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Prerequisite:
    name: str  # what is missing: a module, an execution provider, a backend, an export path
    reason: str
    fix: str

    def to_json(self) -> dict:
        return {"name": self.name, "reason": self.reason, "fix": self.fix}


@dataclass(frozen=True)
class VerifyPoint:
    """One parity stage: which artifact (`float`, `quantized` or `final`), judged at which precision, on which provider
    (`cpu`: ONNX Runtime's CPU EP; `target`: the target's own EP; `run-target`: the target's EP or, where the plan says
    so, its declared emulation)."""

    stage: str
    artifact: str
    precision: str
    where: str


@dataclass
class Artifacts:
    """What a backend's stages produced for the rest of the build: graph paths per component for each artifact kind,
    the quantization scheme for the manifest, per-component manifest fields, placement known without a session (an
    ExecuTorch program's delegation), and custom-op libraries an ONNX Runtime session of these graphs needs.

    `shipped`: where the bundle carries other files than the verified `final` graphs (QNN weight-shared contexts,
    compiled from the same sources as the per-graph contexts parity is measured on), the graph per component that
    goes into the bundle; `bundle_fields`: manifest sections that describe them."""

    float: dict[str, Path]
    quantized: dict[str, Path]
    final: dict[str, Path]
    scheme: dict
    component_fields: dict[str, dict] = field(default_factory=dict)
    placement: dict | None = None
    custom_ops: tuple[str, ...] = ()
    shipped: dict[str, Path] | None = None
    bundle_fields: dict[str, dict] = field(default_factory=dict)

    def bundled(self) -> dict[str, Path]:
        """The graph per component that the bundle carries."""
        return self.shipped if self.shipped is not None else self.final

    def paths(self, kind: str) -> dict[str, Path]:
        return {"float": self.float, "quantized": self.quantized, "final": self.final}[kind]


class Backend:
    name: str = ""
    entry_suffix: str = ".onnx"
    modules: tuple[str, ...] = ()  # python modules every build of this format needs
    stages_module: str = ""  # "package.module" with produce(backend, build) -> Artifacts
    methods: dict[str, str] | None = None  # precision -> method, where the format maps precisions its own way
    implemented: frozenset[str] = frozenset()  # else: the precisions' own methods this format builds
    calibrated_methods: frozenset[str] = frozenset()
    method_modules: dict[str, tuple[str, ...]] = {}
    export_opset: int | None = None  # an opset the format needs, else the family adapter's
    shares_weights: bool = False  # ships a weight set's graphs with one weight copy where the accelerator allows

    # -- what it builds -------------------------------------------------------------------------------------------
    def method_for(self, precision) -> str | None:
        """The method that produces `precision` as this format, or None where this backend does not build it."""
        if self.methods is not None:
            return self.methods.get(precision.name)
        return precision.method if precision.method in self.implemented else None

    def calibrated(self, method: str) -> bool:
        return method in self.calibrated_methods

    def required_modules(self, method: str | None) -> tuple[str, ...]:
        return tuple(dict.fromkeys(self.modules + self.method_modules.get(method or "", ())))

    def extra_prerequisites(self, target) -> tuple[list, bool]:
        """(prerequisites this format adds on `target`, whether they replace the quantizer check)."""
        return [], False

    def tools(self, method: str | None) -> tuple[str, ...]:
        return ("onnx", "onnxruntime", "numpy")

    # -- the build --------------------------------------------------------------------------------------------------
    def produce(self, build) -> Artifacts:
        """Run this format's stages for `build` (exporter.pipeline.Build)."""
        return importlib.import_module(self.stages_module).produce(self, build)

    def verify_points(self, precision: str) -> list[VerifyPoint]:
        points = [VerifyPoint("float-export", "float", "fp32", "cpu")]
        if precision != "fp32":
            points.append(VerifyPoint("quantized", "final", precision, "run-target"))
        return points

    # -- the bundle -------------------------------------------------------------------------------------------------
    def bundle_files(self, final: Path, graph_name: str, staging: Path) -> tuple[str, list[str]]:
        """Copy one component's artifact into the bundle; returns (entry, every file it brings). Default: an ONNX graph
        with its external data, renamed after the entry (the stages module's `bundle_files`)."""
        return importlib.import_module(self.stages_module).bundle_files(final, graph_name, staging)

    def runtime(self, build, artifacts: Artifacts, bundle_name: str, staging: Path) -> dict:
        """What a runtime needs besides the graphs (written into the bundle): the EP and how to open it."""
        return {"execution_provider": build.target.execution_provider, "provider_options": {}, "files": [],
                "custom_op_domains": sorted(artifacts.scheme.get("custom_op_domains", ()))}

    # -- the audit --------------------------------------------------------------------------------------------------
    def component_findings(self, component: dict) -> list[str]:
        """What is wrong with one component's files for this format (the audit's plan check)."""
        if not component["entry"].endswith(self.entry_suffix):
            return [f"component {component['name']} entry {component['entry']} is not a {self.name} artifact ({self.entry_suffix})"]
        return []

    def placement_findings(self, component: dict, provider: str) -> list[str]:
        """Nodes of a component that ran off `provider` (the audit's placement check)."""
        by = (component.get("placement") or {}).get("by_provider") or {}
        if not by or not sum(by.values()):
            return [f"{component['name']}: no placement recorded"]
        off = {p: n for p, n in by.items() if p != provider and n}
        return [f"{component['name']}: nodes off {provider}: " + ", ".join(f"{n} on {p}" for p, n in sorted(off.items()))] if off else []

    def placement_summary(self, provider: str) -> str:
        return f"every component entirely on {provider}"

    def final_provider(self, manifest: dict, emulated_provider: str | None) -> str:
        """The provider the last parity stage must have run on."""
        return emulated_provider or manifest["target"]["execution_provider"]

    def hub_options(self, qairt: str) -> tuple[str, str] | None:
        """(compile options, inference options) for AI Hub with QAIRT `qairt`, or None where AI Hub does not take this format."""
        return None

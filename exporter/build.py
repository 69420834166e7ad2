"""What one build is: an immutable description (BuildSpec), the services its stages share (Build), and the stage log.

A build's stages pass what they produce to each other as values (the checkpoint, the backend's Artifacts, the parity
summary, the memory figures); `Build` carries only what every stage reads: the description, the resolved checkpoint,
the stage cache, the family adapter bound to this build, the format's backend, tool versions and the log. The log is
the one mutable part: it times stages, counts cache hits and knows which stage is running (named in a failure record).
Knows no format and no family.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Iterator


class Reporter:
    """Progress sink; the CLI passes a rich-backed one. The default is silent.

    Stages nest: "load" opens inside whichever stage first needs the torch model (export, or verify on a cache
    hit), "calibrate" inside "quantize", and verify opens one "verify" per parity stage inside the pipeline's own
    "verify" (the same name twice on the stack). A consumer that sums stage wall times must count the outermost
    stage of a name only and remember that an outer stage's wall includes its inner ones (as `StageLog.timings`
    and `bench/scaling.py` do); summing every event counts verify about twice.
    """

    @contextlib.contextmanager
    def stage(self, name: str, detail: str = "") -> Iterator[None]:
        yield

    def note(self, message: str) -> None:
        pass


class StageLog:
    """Stage timings, cache hits and the stage running now, over a Reporter."""

    def __init__(self, reporter: Reporter | None = None):
        self.reporter = reporter or Reporter()
        self.timings: dict[str, float] = {}
        self.hits: dict[str, bool] = {}
        self.current = "resolve"

    @contextlib.contextmanager
    def stage(self, name: str, detail: str = ""):
        outer, self.current = self.current, name
        t = time.perf_counter()
        with self.reporter.stage(name, detail):
            yield
        self.timings[name] = round(self.timings.get(name, 0.0) + time.perf_counter() - t, 3)
        self.current = outer  # done: a failure after it belongs to the stage around it (a failure inside keeps its name)

    def hit(self, key: str, value: bool) -> None:
        self.hits[key] = bool(value)

    def silence(self) -> None:
        """A forked copy of the build reports nothing (the parent owns the terminal)."""
        self.reporter = Reporter()


@dataclass(frozen=True)
class BuildSpec:
    """What to build, fixed before any work: recipe, target, plan, checkpoint and where everything goes."""

    recipe: object  # recipes.base.Recipe
    target: object  # exporter.targets.Target
    plan: object  # exporter.plan.Plan
    out_root: Path
    cache_root: Path
    keys: object = None  # manifests.signing.KeyPair
    checkpoint: Path | None = None
    allow_unpinned: bool = False
    pin_file: dict | None = None
    command: str | None = None


@dataclass
class Build:
    spec: BuildSpec
    ckpt: object  # exporter.resolve.ResolvedCheckpoint
    cache: object  # exporter.cache.StageCache
    log: StageLog
    tools: dict
    components: tuple = ()  # the recipe's graphs as the plan cuts them (layer-range parts), exactly the planned ones
    adapter: object = None  # the family adapter bound to this build
    backend: object = None  # the format's backend
    component_fields: dict = field(default_factory=dict)  # per-component manifest fields the backend added

    @property
    def recipe(self):
        return self.spec.recipe

    @property
    def target(self):
        return self.spec.target

    @property
    def plan(self):
        return self.spec.plan

    @property
    def budget(self):
        """The build's memory budget (exporter/build_memory.BuildBudget) its plan was made under; UNBOUNDED where the plan
        has none."""
        from exporter.build_memory import UNBOUNDED, recorded_budget

        return recorded_budget({"build_memory": self.plan.build_memory}) or UNBOUNDED

    @property
    def reporter(self) -> Reporter:
        return self.log.reporter

    def tool_subset(self, names) -> dict:
        return {n: self.tools.get(n) for n in names}

    def manifest_components(self) -> list[dict]:
        """The components as the manifest lists them (the plan's cut), with the fields the backend added."""
        comps = replace(self.recipe, components=self.components).to_json()["components"]
        return [{**c, **self.component_fields.get(c["name"], {})} for c in comps]

    def run_target(self) -> dict:
        """The target the final graphs open on here: the target itself, or where the plan says parity is emulated
        (no such EP on this host), the emulating EP under the same profile. Never implicit: it is the plan's."""
        v = self.plan.verification
        if v.get("emulated"):
            return {**self.target.to_json(), "execution_provider": v["provider"]}
        return self.target.to_json()

    @staticmethod
    def cpu_target() -> dict:
        from exporter.targets import get_target

        return get_target("cpu").to_json()


def planned_components(recipe, plan) -> tuple:
    """Exactly the planned graphs: layer-range parts where the plan cuts a graph, and a --context below the largest
    bucket drops the larger ones."""
    splits: dict[str, list] = {}
    for a in plan.artifacts:
        if a.parts > 1:
            splits.setdefault(a.component, []).append(tuple(a.layers))
    planned = {a.graph_name for a in plan.artifacts}
    return tuple(c for c in recipe.with_parts(splits) if c.graph_name in planned)

"""The build pipeline: plan -> resolve -> produce (the backend's stages) -> verify -> memory -> publish, for every unit
of a recipe (each precision; each component group of a multi-component recipe), recording every outcome.

A unit is a BuildSpec (exporter/build.py), fixed before any work; its stages pass what they produce to each other as
values and return it. The format's backend (exporter/backends/) builds the graphs and says where parity is measured;
the family adapter (exporter/adapters/) loads the checkpoint, supplies data, the torch reference and the measurement.
This module knows neither a format nor a family. Every heavy stage goes through the content-addressed stage cache;
the published bundle is assembled in a hidden staging directory and renamed into place (exporter/atomic.py), so a
killed run never leaves a finished-looking bundle.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from exporter import versions
from exporter.build_memory import recorded_budget
from exporter.build import Build, BuildSpec, Reporter, StageLog, planned_components
from exporter.cache import StageCache
from exporter.errors import EdgeExportError, MissingPrerequisite, PlanRejected, UsageError
from exporter.plan import make_plan
from exporter.publish import bundle_variant
from exporter.resolve import resolve
from exporter.targets import Target, get_target
from recipes import base_recipe, get_recipe
from recipes.base import Recipe


@dataclass
class BuildResult:
    recipe: str
    target: str
    precision: str
    status: str  # published | up-to-date | parity-failed; for a group of a multi-component recipe also rejected | missing-prerequisite | failed
    bundle: Path
    parity: dict
    timings: dict = field(default_factory=dict)
    cache: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        return {
            "recipe": self.recipe,
            "target": self.target,
            "precision": self.precision,
            "status": self.status,
            "bundle": str(self.bundle),
            "verdict": self.parity.get("verdict"),
            "first_failure": self.parity.get("first_failure"),
            "timings_s": self.timings,
            "cache_hits": self.cache,
        }


# -- the stages of one unit ---------------------------------------------------------------------------------------------


def start(spec: BuildSpec, log: StageLog) -> Build:
    """Resolve the checkpoint and bind the unit's backend and family adapter."""
    from exporter import adapters, backends

    t0 = time.perf_counter()
    with log.reporter.stage("resolve", f"{spec.recipe.name} checkpoint ({spec.recipe.pin.source if spec.checkpoint is None and spec.recipe.pin else spec.checkpoint})"):
        ckpt = resolve(spec.recipe, spec.cache_root, spec.checkpoint, spec.allow_unpinned, spec.pin_file)
    log.timings["resolve"] = round(time.perf_counter() - t0, 3)
    build = Build(spec, ckpt, StageCache(spec.cache_root, notice=log.reporter.note), log, versions.tool_versions(),
                  components=planned_components(spec.recipe, spec.plan), backend=backends.get(spec.plan.format))
    build.adapter = adapters.bind(spec.recipe.adapter, build)
    return build


def prepare(recipe: Recipe, target: Target, plan, cache_root: Path, checkpoint: Path | None = None, reporter: Reporter | None = None,
            allow_unpinned: bool = False) -> Build:
    """A started Build outside the recorded flow (tests and benches that run single stages): resolved, bound."""
    spec = BuildSpec(recipe, target, plan, Path(cache_root).parent, Path(cache_root), None, checkpoint, allow_unpinned)
    return start(spec, StageLog(reporter))


def run(spec: BuildSpec, log: StageLog, started: dict) -> BuildResult:
    """Every stage of one admitted unit; `started` receives the Build once the checkpoint resolved (for the record)."""
    from exporter.publish import publish
    from exporter.stage_memory import measure_memory
    from exporter.stage_verify import verify

    build = start(spec, log)
    started["build"] = build
    artifacts = build.backend.produce(build)
    build.component_fields = artifacts.component_fields
    summary, placement = verify(build, artifacts)
    build.adapter.release()  # the torch model and its reference: neither the memory probe nor signing needs them
    memory = measure_memory(build, artifacts)
    status, bundle = publish(build, artifacts, summary, placement, memory)
    return BuildResult(spec.recipe.name, spec.target.name, spec.plan.precision, status, bundle, summary, log.timings, log.hits)


# -- one unit, planned and recorded -------------------------------------------------------------------------------------


def build_one(
    recipe: Recipe,
    target: Target,
    precision: str | None,
    out_root: Path,
    key=None,
    checkpoint: Path | None = None,
    allow_unpinned: bool = False,
    cache_root: Path | None = None,
    reporter: Reporter | None = None,
    context: int | None = None,
    fmt: str | None = None,
    requested_target: str | None = None,
    command: str | None = None,
    pin_file: dict | None = None,
    budget=None,
    share_weights: bool = True,
) -> BuildResult:
    """Plan first (refusing before any heavy work), then build, verify, sign; every outcome is recorded. `pin_file`:
    the record of the reviewed pin file whose digests `recipe.pin` carries; `budget`: the build's memory budget
    (exporter/build_memory.py), which cuts parts and bounds verify."""
    from exporter.locks import held
    from manifests.signing import resolve_key

    reporter = reporter or Reporter()
    out_root = Path(out_root)
    plan = make_plan(recipe, target, precision, context, fmt, requested_target, budget=budget, share_weights=share_weights)
    spec = BuildSpec(recipe, target, plan, out_root, Path(cache_root) if cache_root else out_root / ".cache", resolve_key(key),
                     checkpoint, allow_unpinned, pin_file, command)
    variant = bundle_variant(plan, target)
    # one build of a bundle at a time: a concurrent run into the same output root waits, then finds it up to date
    with held(out_root, f"bundle:{out_root.resolve() / recipe.name / target.name / variant}", f"{recipe.name}/{target.name}/{variant} in {out_root}",
              reporter.note):
        return _recorded(spec, reporter)


def _ckpt_record(ck) -> dict:
    return {"twin": ck.synthetic, "pinned": ck.pinned, "source": ck.source, "revision": ck.revision}


def _planned_ckpt_record(recipe: Recipe) -> dict:
    """What a record says of the checkpoint before it is resolved: a twin if the recipe's pin is a synthesised one."""
    return {"twin": bool(recipe.pin and recipe.pin.source.startswith("synthesized:")), "pinned": None,
            "source": recipe.pin.source if recipe.pin else None}


def _recorded(spec: BuildSpec, reporter: Reporter) -> BuildResult:
    from manifests.records import write_record

    recipe, target, plan, out_root = spec.recipe, spec.target, spec.plan, spec.out_root
    rec = dict(plan=plan.to_json(), command=spec.command, variant=bundle_variant(plan, target), checkpoint=_planned_ckpt_record(recipe))
    if not plan.admitted:
        r = plan.rejection
        path = write_record(out_root, recipe.name, target.name, plan.precision, "rejected", code=r.code, reason=r.reason, fix=r.fix, stage="plan", **rec)
        raise PlanRejected(f"plan rejected for {recipe.name} on {target.name} ({plan.precision}): [{r.code}] {r.reason}; recorded in {path}", r.fix)
    if plan.missing:
        m = plan.missing
        path = write_record(out_root, recipe.name, target.name, plan.precision, "missing-prerequisite", code="missing-prerequisite",
                            reason="; ".join(f"{x.name}: {x.reason}" for x in m), fix="; ".join(dict.fromkeys(x.fix for x in m)), stage="plan", **rec)
        raise MissingPrerequisite(
            f"cannot build {recipe.name} for {target.name} ({plan.precision}) on this host: "
            + "; ".join(f"{x.name}: {x.reason}" for x in m) + f"; recorded in {path}",
            "; ".join(dict.fromkeys(x.fix for x in m)),
        )
    log, started = StageLog(reporter), {}
    try:
        result = run(spec, log, started)
    except Exception as e:
        if "build" in started:
            rec["checkpoint"] = _ckpt_record(started["build"].ckpt)
        hint = e.hint if isinstance(e, EdgeExportError) else "this is a bug if the inputs are valid: report it with the record"
        write_record(out_root, recipe.name, target.name, plan.precision, "failed", code=type(e).__name__, stage=log.current,
                     reason=str(getattr(e, "message", e)).splitlines()[0][:2000], fix=hint, **rec)
        raise
    rec["checkpoint"] = _ckpt_record(started["build"].ckpt)
    if result.status == "parity-failed":
        f = result.parity["first_failure"]
        write_record(out_root, recipe.name, target.name, plan.precision, "failed", code="parity", stage=f"verify:{f['stage']}",
                     reason=f"{f['component']} {f['output']} {f['metric']} = {f['value']:.4g} (threshold {f['threshold']})",
                     fix=f"inspect {result.bundle / 'parity.md'}; the first diverging stage is {f['stage']}",
                     evidence=[str(result.bundle / "parity.md"), str(result.bundle / "parity.json")], **rec)
    else:
        write_record(out_root, recipe.name, target.name, plan.precision, "verified", reason=f"parity {result.parity['verdict']}, signed",
                     evidence=[str(result.bundle / "manifest.json")], bundle=str(result.bundle), **rec)
    return result


# -- a command: every unit of a recipe ----------------------------------------------------------------------------------


def precisions_for(recipe: Recipe, target: Target, precision: str | None, fmt: str | None = None) -> list[str | None]:
    if precision:
        return [precision]
    return list(recipe.precisions_for(target, fmt or target.formats[0])) or [None]


def build(recipe_name: str, target_name: str, precision: str | None = None, ram_gib: float | None = None, fmt: str | None = None,
          pin: Path | None = None, max_memory_gib: float | None = None, **kw) -> list[BuildResult]:
    """Every unit of `recipe_name` for one target: its precisions, or for a multi-component recipe each component group's
    (a group it cannot build is recorded, never replaced by a smaller model). A single recipe raises its first failure;
    a multi-component one records each group's outcome and goes on. `pin`: a reviewed pin file (exporter/pins.py) the
    `checkpoint` must match, file by file. `max_memory_gib`: the build's memory budget (default: what the host has
    available, less a margin; exporter/build_memory.py)."""
    from exporter.atomic import sweep_tree
    from exporter.build_memory import budget_for
    from manifests.signing import resolve_key

    recipe = get_recipe(recipe_name)
    out_root = Path(kw["out_root"])
    _refuse_out_inside_a_bundle(out_root)
    kw["key"] = resolve_key(kw.get("key"))  # a bad --key fails here, before any work
    kw["budget"] = budget_for(max_memory_gib)  # a bad --max-memory too
    sweep_tree(out_root)  # staging and superseded directories of killed runs, provably dead
    pinned = None
    if pin is not None:
        from exporter.pins import load_pin

        if kw.get("checkpoint") is None:
            raise UsageError("--pin needs --checkpoint DIR: a pin names the files of one checkpoint directory",
                             "pass --checkpoint with the snapshot the pin was made from")
        pinned = load_pin(Path(pin))
        if base_recipe(pinned.recipe) != base_recipe(recipe.name):
            raise UsageError(f"pin file {pin} pins a checkpoint for recipe {pinned.recipe}, not {recipe.name}",
                             f"build recipe {pinned.recipe} with it, or pin the checkpoint for {recipe.name}: edge-export pin {recipe.name} ...")
        kw["pin_file"] = pinned.record()
    if kw.get("checkpoint") is not None:
        recipe = recipe.for_checkpoint(read_checkpoint_config(Path(kw["checkpoint"])), pinned.checkpoint_pin() if pinned else None)
    target = get_target(target_name)
    if ram_gib is not None:
        target = target.with_ram(ram_gib)
    grouped = recipe.group_recipes is not None
    results = []
    for unit, p, ukw in _units(recipe, target, precision, fmt, kw):
        if unit is None:  # a group with a missing prerequisite: recorded, planned at its real size
            results.append(_record_missing_group(recipe, p, target, precision, fmt, target_name, kw))
            continue
        try:
            results.append(build_one(unit, target, p, requested_target=target_name, fmt=fmt, **ukw))
        except EdgeExportError as e:
            if not grouped:
                raise
            from manifests.records import record_path  # recorded by build_one; the other groups go on

            status = "rejected" if isinstance(e, PlanRejected) else "missing-prerequisite" if isinstance(e, MissingPrerequisite) else "failed"
            prec = p or make_plan(unit, target, None, ukw["context"], fmt, budget=ukw["budget"], share_weights=ukw.get("share_weights", True)).precision
            results.append(BuildResult(unit.name, target.name, prec, status, record_path(out_root, unit.name, target.name, prec), {"reason": e.message}))
    return results


def _units(recipe: Recipe, target: Target, precision: str | None, fmt: str | None, kw: dict):
    """(recipe of the unit or None for a missing group, precision or group name, build_one keywords)."""
    if recipe.group_recipes is None:
        for p in precisions_for(recipe, target, precision, fmt):
            yield recipe, p, kw
        return
    for group, sub in recipe.group_recipes().items():
        if sub is None:
            yield None, group, kw
            continue
        gkw = {**kw, "context": kw.get("context") if sub.cost.contexts() else None}  # an encoder has no context buckets
        for p in precisions_for(sub, target, precision, fmt):
            yield sub, p, gkw


def _record_missing_group(recipe: Recipe, group: str, target: Target, precision, fmt, requested_target: str, kw: dict) -> BuildResult:
    from manifests.records import write_record

    g = next(x for x in recipe.cost.groups if x.name == group)
    shell = replace(recipe, name=f"{recipe.name}.{group}", cost=recipe.cost.group(g), group_recipes=None)
    plan = make_plan(shell, target, precision, None, fmt, requested_target, share_weights=kw.get("share_weights", True))
    reason, fix = recipe.group_missing[group]
    path = write_record(Path(kw["out_root"]), shell.name, target.name, plan.precision, "missing-prerequisite", code="missing-prerequisite",
                        reason=reason, fix=fix, stage="plan", plan=plan.to_json(), command=kw.get("command"), checkpoint=_planned_ckpt_record(recipe))
    return BuildResult(shell.name, target.name, plan.precision, "missing-prerequisite", path, {"reason": reason})


def _refuse_out_inside_a_bundle(out_root: Path) -> None:
    from manifests.manifest import MANIFEST, SIGNATURE

    p = Path(out_root).resolve()
    for d in (p, *p.parents):
        if (d / MANIFEST).is_file() and (d / SIGNATURE).exists():
            raise UsageError(f"--out {out_root} is inside the signed bundle {d}: writing there would break its signature",
                             "choose an output root outside any bundle (the default is ./artifacts)")


def read_checkpoint_config(directory: Path) -> dict:
    from exporter.safejson import JsonRefused, load_json

    path = directory / "config.json"
    try:
        cfg = load_json(path, "the checkpoint's config", 16 << 20)
    except JsonRefused as e:
        raise UsageError(f"{path}: cannot read the checkpoint's config ({e.message})", "point --checkpoint at a Hugging Face snapshot directory") from None
    if not isinstance(cfg, dict):
        raise UsageError(f"{path}: the checkpoint's config is not a JSON object", "point --checkpoint at a Hugging Face snapshot directory")
    return cfg


def context_for_bundle(manifest: dict, checkpoint: Path | None, cache_root: Path, reporter: Reporter | None = None) -> Build:
    """The build of an existing bundle, for replaying its reference (AI Hub validation): same recipe, target, plan and
    checkpoint digests, or a precise refusal."""
    from exporter.errors import IntegrityError
    from recipes.base import CheckpointPin

    b = manifest["bundle"]
    recipe = get_recipe(b["recipe"])
    ck = manifest["checkpoint"]
    if checkpoint is not None:
        # a bundle built against a reviewed pin file is replayed against the digests it recorded
        pin = CheckpointPin(ck["source"], ck["revision"], dict(ck["files"])) if ck.get("pin_file") else None
        recipe = recipe.for_checkpoint(read_checkpoint_config(Path(checkpoint)), pin)
    target = get_target(b["target"])
    req = manifest["plan"].get("requested", {})
    plan = make_plan(recipe, target, b["precision"], req.get("context"), b["format"], budget=recorded_budget(manifest["plan"]),
                     share_weights=req.get("weight_sharing", True))
    planned = sorted(a.graph_name for a in plan.artifacts)
    built = sorted(c["graph_name"] for c in manifest["components"])
    if planned != built:
        raise IntegrityError(f"the plan of {b['recipe']}/{b['target']}/{b['precision']} today ({planned}) differs from the bundle's graphs ({built})",
                             "validate with the edge-export version that built the bundle, or rebuild it")
    spec = BuildSpec(recipe, target, plan, Path(cache_root).parent, Path(cache_root), None, checkpoint, not ck.get("pinned", True), ck.get("pin_file"))
    build = start(spec, StageLog(reporter))
    if build.ckpt.files != ck["files"]:
        raise IntegrityError("the checkpoint found for the reference differs from the one the bundle was built from "
                             f"({sorted(build.ckpt.files.items())} vs {sorted(ck['files'].items())})",
                             "pass --checkpoint with the exact checkpoint the bundle names")
    return build

"""The build pipeline: resolve -> plan -> export -> quantize -> compile -> verify -> sign -> publish.

Every heavy stage goes through the content-addressed StageCache; the published
bundle is assembled in a temporary directory and renamed into place, so a killed
run never leaves a finished-looking bundle. Heavy imports happen inside stages.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import shutil
import time
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Iterator

from exporter import versions
from exporter.atomic import staging_dir
from exporter.cache import StageCache
from exporter.errors import EdgeExportError, MissingPrerequisite, PlanRejected
from exporter.hashing import sha256_file, sha256_json
from exporter.plan import Plan, make_plan
from exporter.resolve import ResolvedCheckpoint, resolve
from exporter.targets import Target, get_target
from recipes import get_recipe
from recipes.base import PRECISIONS, Recipe

EXPORT_TOOLS = ("torch", "onnx", "onnxscript", "transformers", "safetensors", "numpy")
QUANT_TOOLS = ("onnx", "onnxruntime", "numpy")
COMPILE_TOOLS = ("onnxruntime", "onnxruntime-qnn", "qairt")


class CompileError(EdgeExportError):
    exit_code = 3


_RELEASED = object()  # Context._model after release_model: asking for it again is a bug, not a silent reload


@lru_cache(maxsize=1)
def code_digest() -> str:
    """Digest of our own sources: a code change invalidates every cached stage."""
    root = Path(__file__).resolve().parent.parent
    files = sorted(p for pkg in ("exporter", "recipes", "calibration", "verify") for p in (root / pkg).rglob("*.py"))
    return sha256_json({str(p.relative_to(root)): sha256_file(p) for p in files})


class Reporter:
    """Progress sink; the CLI passes a rich-backed one. The default is silent.

    Stages nest: "load" opens inside whichever stage first needs the torch model (export, or verify on a cache
    hit), "calibrate" inside "quantize", and verify opens one "verify" per parity stage inside the pipeline's own
    "verify" (the same name twice on the stack). A consumer that sums stage wall times must count the outermost
    stage of a name only and remember that an outer stage's wall includes its inner ones (as `Context.timings`
    and `bench/scaling.py` do); summing every event counts verify about twice.
    """

    @contextlib.contextmanager
    def stage(self, name: str, detail: str = "") -> Iterator[None]:
        yield

    def note(self, message: str) -> None:
        pass


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


@dataclass
class Context:
    recipe: Recipe
    target: Target
    plan: Plan
    ckpt: ResolvedCheckpoint
    cache: StageCache
    reporter: Reporter
    tools: dict
    timings: dict = field(default_factory=dict)
    hits: dict = field(default_factory=dict)
    _model: object = None
    _feeds: dict | None = None
    current: str = "resolve"  # the stage running now (named in a failure record)
    components: tuple = ()  # the recipe's graphs as the plan cuts them (layer-range parts)
    component_extra: dict = field(default_factory=dict)  # per-component manifest fields a backend adds (kernel libraries)
    memo: dict = field(default_factory=dict)  # what a harness computes once per build (data sets, references)
    custom_ops: tuple = ()  # custom-op libraries the quantized graphs need in an ORT session (Quark's, for BF16)

    def __post_init__(self):
        if not self.components:
            splits = {}
            for a in self.plan.artifacts:
                if a.parts > 1:
                    splits.setdefault(a.component, []).append(tuple(a.layers))
            # exactly the planned graphs: a --context below the largest bucket drops the larger ones
            planned = {a.graph_name for a in self.plan.artifacts}
            self.components = tuple(c for c in self.recipe.with_parts(splits) if c.graph_name in planned)

    def run_target(self) -> dict:
        """The target the final graphs open on here: the target itself, or where the plan says parity is emulated
        (no such EP on this host), the emulating EP under the same profile. Never implicit: it is the plan's."""
        v = self.plan.verification
        if v.get("emulated"):
            return {**self.target.to_json(), "execution_provider": v["provider"]}
        return self.target.to_json()

    def manifest_components(self) -> list[dict]:
        from dataclasses import replace

        comps = replace(self.recipe, components=self.components).to_json()["components"]
        return [{**c, **self.component_extra.get(c["name"], {})} for c in comps]

    @property
    def harness(self):
        """The recipe's build harness (exporter/multimodal.py), or None for the language-model path."""
        if not self.recipe.harness:
            return None
        from exporter.multimodal import harness_for

        return harness_for(self.recipe)

    def calibration(self):
        """The one calibration set of this build: it fills the largest context bucket."""
        from calibration.lm_data import calibration_set

        if self.harness:
            return self.harness.calibration(self)

        context = max(c.bucket.context for c in self.components)
        return calibration_set(self.recipe.model_config["vocab_size"], context)

    def evaluation(self):
        """The held-out prompts of this build (verify; AI Hub validation replays the same set)."""
        from calibration.lm_data import evaluation_set

        if self.harness:
            return self.harness.evaluation(self)
        pre = next(c for c in self.components if c.role == "prefill")
        contexts = sorted({c.bucket.context for c in self.components if c.role in ("prefill", "decode")})
        # with several buckets, one long prompt makes prefill run in every bucket
        return evaluation_set(self.recipe.model_config["vocab_size"], pre.bucket.ar,
                              long_prompt=contexts[-2] + pre.bucket.ar + 3 if len(contexts) > 1 else None)

    def tool_subset(self, names) -> dict:
        return {n: self.tools.get(n) for n in names}

    def model(self):
        if self._model is _RELEASED:
            raise RuntimeError("the torch model was released after verify (Context.release_model); a stage after verify "
                               "must not need it: compute what it needs before release_model")
        if self._model is None:
            from exporter.backends.onnx_export import load_hf_model
            from exporter.weights import check_finite

            outer, self.current = self.current, "load"  # a failure while loading is recorded as the load stage's
            with self.reporter.stage("load", f"{self.recipe.name} from {self.ckpt.directory}"):
                try:
                    model = self.harness.load(self) if self.harness else load_hf_model(self.ckpt.directory, self.recipe.architecture)
                except EdgeExportError:
                    raise
                except Exception as e:  # safetensors, torch and transformers errors on a damaged file: name the checkpoint
                    from exporter.errors import IntegrityError

                    raise IntegrityError(f"{self.ckpt.source}: loading the checkpoint failed ({type(e).__name__}: {str(e).splitlines()[0][:300]})",
                                         "the checkpoint is damaged or not of this architecture: check it with `edge-export pin`") from None
                check_finite(model, self.ckpt.source)  # a NaN or Inf weight is refused by name, before any export
                self._model = model
            self.current = outer
        return self._model

    def release_model(self) -> None:
        """Drop the torch model and the reference built on it once verify is done: the memory probe and signing do
        not need it, and it is one whole copy of the weights (bench/README.md: the build's peak through the probe
        and signing). Its pages go back to the OS with the rest of the freed heap."""
        from exporter.heap import release_free_heap

        self._model = _RELEASED
        self.memo.pop("reference", None)
        release_free_heap()

    def step_module(self, component, pooled_mean: bool = False):
        from exporter.models import step_module

        if self.harness:
            return self.harness.step_module(self, component, pooled_mean)
        return step_module(self.model(), self.recipe.architecture, component, pooled_mean)

    @contextlib.contextmanager
    def timed(self, name: str, detail: str = ""):
        self.current = name
        t = time.perf_counter()
        with self.reporter.stage(name, detail):
            yield
        self.timings[name] = round(self.timings.get(name, 0.0) + time.perf_counter() - t, 3)


def artifact_digest(entry: Path) -> str:
    """Digest of a stage output: its entry file and every file beside it (e.g. a context .bin)."""
    return sha256_json({p.name: sha256_file(p) for p in sorted(entry.parent.iterdir()) if p.is_file() and p.name != "_done.json"})


def _cpu_target() -> dict:
    return get_target("cpu").to_json()


def _runners(paths: dict[str, Path], target: dict, components: list[dict] | None = None, custom_ops: tuple = ()) -> tuple[dict, dict]:
    from exporter.runtime import open_session

    specs = {c["name"]: c for c in components or []}
    runners, placement = {}, {}
    for name, p in paths.items():
        if Path(p).suffix == ".pte":
            from exporter.backends.executorch_export import PteRunner

            c = specs[name]
            runners[name] = PteRunner(p, [t["name"] for t in c["inputs"]], [t["name"] for t in c["outputs"]], c.get("kernel_libraries", ()))
            continue
        sess, pl = open_session(p, target, custom_ops=custom_ops)
        runners[name] = sess
        placement[name] = pl
    return runners, placement


EXECUTORCH_TOOLS = ("torch", "executorch", "torchao", "transformers", "safetensors")


def program_constants(ctx: "Context", comp) -> dict[str, int]:
    """The metadata methods every program carries, checked against the manifest at load time."""
    cfg = ctx.recipe.model_config
    layers = (comp.layers[1] - comp.layers[0]) if comp.layers else cfg["num_hidden_layers"]
    return {"get_max_context_len": comp.bucket.context, "get_ar": comp.bucket.ar, "get_n_layers": layers, "get_vocab_size": cfg["vocab_size"]}


def stage_lower_executorch(ctx: "Context") -> tuple[dict[str, Path], dict[str, dict]]:
    """One load-checked .pte per component (quantized in the lowering); returns paths and lowering reports."""
    from exporter.backends.executorch_export import load_check, lower

    precision = ctx.plan.precision
    out, reports = {}, {}
    mcomps = {c["name"]: c for c in ctx.manifest_components()}
    for comp in ctx.components:
        constants = program_constants(ctx, comp)
        inputs = {"checkpoint": ctx.ckpt.digest, "architecture": ctx.recipe.architecture, "model_config": ctx.recipe.model_config,
                  "component": mcomps[comp.name], "precision": precision, "constants": constants,
                  "tools": ctx.tool_subset(EXECUTORCH_TOOLS), "code": code_digest()}

        def build(tmp: Path, comp=comp, constants=constants) -> dict:
            lowered = lower(ctx.step_module(comp, pooled_mean=True), comp, precision, tmp / f"{comp.graph_name}.pte", constants)
            return {**lowered.info, "load_check": load_check(lowered.path, constants, [t.name for t in comp.inputs], lowered.info["kernel_libraries"])}

        with ctx.timed("lower", f"{comp.graph_name} -> ExecuTorch XNNPACK ({precision})"):
            r = ctx.cache.run("lower-executorch", inputs, build)
        ctx.hits[f"lower/{comp.name}"] = r.hit
        out[comp.name] = r.path / r.info["entry"]
        reports[comp.name] = r.info
    return out, reports


def stage_export(ctx: Context) -> dict[str, Path]:
    from exporter.backends.onnx_export import OPSET, export_component

    if ctx.plan.format == "ryzenai-qdq":
        from exporter.backends.ryzenai import RYZENAI_OPSET as opset
    else:
        opset = ctx.harness.opset if ctx.harness else OPSET
    mcomps = {c["name"]: c for c in ctx.manifest_components()}
    jobs = []
    for comp in ctx.components:
        inputs = {
            "checkpoint": ctx.ckpt.digest,
            "architecture": ctx.recipe.architecture,
            "model_config": ctx.recipe.model_config,
            "component": mcomps[comp.name],
            "tools": ctx.tool_subset(EXPORT_TOOLS),
            "code": code_digest(),
            "opset": opset,
        }
        jobs.append((comp, inputs, lambda tmp, c=comp: export_component(ctx.step_module(c), c, tmp, opset)))
    cached = {comp.name: ctx.cache.has_entry("export", inputs) for comp, inputs, _ in jobs}
    _export_side_by_side(ctx, [j for j in jobs if not cached[j[0].name]])
    out = {}
    for comp, inputs, build in jobs:
        with ctx.timed("export", comp.graph_name):
            r = ctx.cache.run("export", inputs, build)  # a graph exported side by side is a hit here
        ctx.hits[f"export/{comp.name}"] = cached[comp.name] and r.hit
        out[comp.name] = r.path / "model.onnx"
    return out


def _export_side_by_side(ctx: Context, jobs: list) -> None:
    """Export the graphs not in the cache in forked copies of this process, one per core (exporter/forked.py), when
    there are several and memory allows (each copy is budgeted at twice the checkpoint's bytes: the weights it maps
    and the exporter's working set, bench/README.md). A copy that failed leaves its graph unexported: the caller
    exports it again in this process and raises what it raises; a copy that was killed is a named error."""
    from exporter import forked

    weights = sum((ctx.ckpt.directory / n).stat().st_size for n in ctx.ckpt.files if (ctx.ckpt.directory / n).is_file())
    workers = forked.workers_for(len(jobs), 2 * weights)
    if workers < 2:  # workers_for never exceeds the pending graphs: one graph exports in this process
        return

    def child_job(inputs, build):
        def run():
            ctx.reporter = Reporter()  # the parent owns the terminal
            ctx.cache.run("export", inputs, build)
        return run

    ctx.model()  # loaded (memory-mapped) once, here: the copies share it, and verify uses it after them
    names = ", ".join(comp.graph_name for comp, _, _ in jobs)
    with ctx.timed("export", f"{len(jobs)} graphs, {workers} at a time in forked processes: {names}"):
        try:
            outcomes = forked.run_forked([(comp.name, child_job(inputs, build)) for comp, inputs, build in jobs], workers,
                                         ctx.cache.root / "logs" / "export")
        except BaseException:
            from exporter.atomic import sweep_tree

            sweep_tree(ctx.cache.root / "export")  # the copies were killed: their staging directories go with them
            raise
    for o in outcomes:
        if o.signal is not None:
            raise EdgeExportError(f"exporting {o.name} was killed by signal {o.signal} in its forked process (log: {o.log}):\n    {o.tail()}",
                                  f"signal 9 is usually the out-of-memory killer: free memory, or export one graph at a time "
                                  f"({forked.WORKERS_ENV}=1)")
        if o.ok:
            o.log.unlink(missing_ok=True)


def calibration_feeds(ctx: Context, fp32: dict[str, Path], sequences=None, prompts=()) -> dict[str, list[dict]]:
    """Inputs of every graph along calibration sequences (default: the build's calibration set), produced by the
    float graphs; `prompts` adds (tokens, injected rows, steps) runs of greedy decoding (multimodal prompts)."""
    from verify.drivers import driver_for

    lm_driver = driver_for(ctx.recipe.state_layout)
    sequences = ctx.calibration().sequences if sequences is None else sequences
    runners, _ = _runners(fp32, _cpu_target())
    graphs = {c["name"]: lm_driver.GraphSpec.from_manifest_component(c) for c in ctx.manifest_components()}
    feeds: dict[str, list[dict]] = {name: [] for name in graphs}

    def rec(step):
        feeds[step.component].append(step.feeds)

    layout = ctx.recipe.state_layout
    ar = max(g.ar for g in graphs.values() if g.role == "prefill")
    for seq in sequences:
        seq = list(seq)
        # prefill over the whole bucket (every prefill position), then decode over every position
        lm_driver.generate(runners, graphs, layout, seq, 1, on_step=rec)
        lm_driver.generate(runners, graphs, layout, seq[:1], len(seq), forced=seq[1:], on_step=rec)
        # and the model's own greedy continuation of a short prompt: generated text concentrates
        # attention far more than random tokens, and its activation ranges are what a runtime sees
        lm_driver.generate(runners, graphs, layout, seq[:ar], len(seq) - ar + 1, on_step=rec)
    for tokens, inject, steps in prompts:
        lm_driver.generate(runners, graphs, layout, tokens, steps, on_step=rec, inject=inject)
    return feeds


CALIBRATION_PROCEDURE = ("per calibration sequence: prefill of the whole sequence; teacher-forced decode over every position; "
                         "free-running greedy decode from its first AR tokens to the end of the largest bucket (float graphs)")


# float32 graphs: CPU kernels differ between instruction sets only in rounding (tiny-lm prefill logits: max |d| 5.7e-6
# between the AVX-512 and the AVX2 path of ONNX Runtime 1.32, far inside any fp32 threshold; docs/NOTES.md)
FLOAT_ISA = {"dependent": False, "why": "float32 kernels differ across instruction sets only in rounding"}


def stage_quantize(ctx: Context, fp32: dict[str, Path]) -> tuple[dict[str, Path], dict]:
    from recipes.base import CALIBRATED_METHODS

    precision = ctx.plan.precision
    method = PRECISIONS[precision].method_for(ctx.plan.format)
    if method == "float":
        return fp32, {"precision": precision, "scheme": "none (float32)", "calibration": None, "isa": FLOAT_ISA}
    calibrated = method in CALIBRATED_METHODS
    cal = ctx.calibration() if calibrated else None
    tools = QUANT_TOOLS + (("amd-quark", "torch") if method.startswith("quark-") else ("nncf",) if method.startswith("nncf-") else ())
    out, info = {}, {}
    for name, src in fp32.items():
        # Quark's presets take their own options, keyed "ryzenai-qdq:PRECISION" (ORT's QNN QDQ options are not theirs)
        options = ctx.recipe.quant_options.get(f"ryzenai-qdq:{precision}" if method.startswith("quark-") else precision, {})
        inputs = {"source": sha256_file(src), "precision": precision, "method": method, "tools": ctx.tool_subset(tools), "code": code_digest(),
                  **({"options": options} if options else {})}
        if calibrated:
            inputs["calibration"] = cal.digest

        def build(tmp: Path, name=name, src=src):
            from exporter.backends import quantize as q

            if method == "ort-dynamic":
                return q.in_worker("dynamic_int8", src, tmp / "model.onnx")
            if method == "fp16-convert":
                return q.in_worker("fp16_convert", src, tmp / "model.onnx")
            if method.startswith("nncf-"):
                return q.in_worker("nncf_weight_only", src, tmp / "model.onnx", precision)
            if ctx._feeds is None:
                with ctx.reporter.stage("calibrate", f"{cal.name} ({len(getattr(cal, 'sequences', None) or cal.items)} samples)"):
                    ctx._feeds = ctx.harness.calibration_feeds(ctx, fp32) if ctx.harness else calibration_feeds(ctx, fp32)
            if method.startswith("quark-"):
                from exporter.backends import ryzenai

                return ryzenai.quantize(src, tmp / "model.onnx", ctx._feeds[name], precision, ctx.cache.root, ctx.reporter, **options)
            return q.static_w8a16(src, tmp / "model.onnx", ctx._feeds[name], **options)

        with ctx.timed("quantize", f"{name} {precision} ({method})"):
            r = ctx.cache.run("quantize", inputs, build)
        ctx.hits[f"quantize/{name}"] = r.hit
        out[name] = r.path / "model.onnx"
        info = r.info
        if info.get("needs_custom_ops") and not ctx.custom_ops:
            from exporter.backends.ryzenai import custom_ops_library

            ctx.custom_ops = (custom_ops_library(ctx.cache.root, ctx.reporter),)
    scheme = {"precision": precision, "method": method, **info}
    scheme["calibration"] = {**cal.to_json(), "procedure": CALIBRATION_PROCEDURE} if calibrated else None
    return out, scheme


def _compile_one(src: Path, tmp: Path, graph_name: str, target: dict) -> dict:
    from exporter.runtime import open_session

    ctx_path = tmp / f"{graph_name}.onnx"
    try:
        open_session(src, target, context_out=ctx_path)
    except EdgeExportError:
        raise
    except Exception as e:  # ORT raises its own error types; name the unplaced nodes
        try:
            _, pl = open_session(src, target, allow_fallback=True)
            off = pl.nodes_not_on(target["execution_provider"])
        except Exception:
            off = []
        raise CompileError(
            f"{src}: compiling {graph_name} for {target['name']} failed"
            + (f"; nodes not supported on {target['execution_provider']}: {off[:20]}" if off else f": {str(e).splitlines()[0]}"),
            "change the recipe's graph so every node lowers to the accelerator; there is no CPU fallback",
        ) from None
    files = sorted(p.name for p in tmp.iterdir())
    return {"entry": ctx_path.name, "files": files}


def stage_compile(ctx: Context, quantized: dict[str, Path]) -> dict[str, Path]:
    target = ctx.target.to_json()
    if ctx.plan.format != "qnn-context":
        return quantized
    out = {}
    for comp in ctx.components:
        src = quantized[comp.name]
        inputs = {"source": sha256_file(src), "target": target["accelerator"], "tools": ctx.tool_subset(COMPILE_TOOLS), "code": code_digest()}
        with ctx.timed("compile", f"{comp.graph_name} -> HTP v{target['accelerator']['htp_arch']}"):
            r = ctx.cache.run("compile", inputs, lambda tmp, c=comp, s=src: _compile_one(s, tmp, c.graph_name, target))
        ctx.hits[f"compile/{comp.name}"] = r.hit
        out[comp.name] = r.path / r.info["entry"]
    return out


def _verification_stages(ctx: Context, fp32, quantized, final) -> list[tuple[str, dict, str, dict]]:
    """(stage name, paths, precision, target json) to measure, in pipeline order."""
    cpu = _cpu_target()
    p = ctx.plan.precision
    if ctx.plan.format == "executorch":
        return [("program", final, p, ctx.target.to_json())]
    stages = [("float-export", fp32, "fp32", cpu)]
    if p != "fp32":
        if ctx.plan.format == "qnn-context":
            stages.append(("fake-quant", quantized, p, cpu))
            stages.append(("compiled", final, p, ctx.target.to_json()))
        else:
            # on the target's EP, or where the plan says so, its emulation (stage provider names which)
            stages.append(("quantized", final, p, ctx.run_target()))
    return stages


def stage_verify(ctx: Context, fp32, quantized, final) -> tuple[dict, dict]:
    from calibration.lm_data import check_disjoint

    ev = ctx.evaluation()
    (ctx.harness.check_disjoint if ctx.harness else check_disjoint)(ctx.calibration(), ev)
    stages = _verification_stages(ctx, fp32, quantized, final)
    inputs = {
        "artifacts": {s: {n: artifact_digest(p) for n, p in paths.items()} for s, paths, _, _ in stages},
        "evaluation": ev.digest,
        "thresholds": {k: v.to_json() for k, v in ctx.recipe.thresholds.items()},
        "target": ctx.target.to_json(),
        "steps": ctx.recipe.decode_steps,
        "tools": ctx.tool_subset(EXPORT_TOOLS + QUANT_TOOLS + COMPILE_TOOLS),
        "code": code_digest(),
    }

    def build(tmp: Path) -> dict:
        from exporter.backends.executorch_export import PROVIDER as ET_PROVIDER
        from verify.parity import measure_stage, summarize
        from exporter.heap import release_free_heap
        from verify.reference import LMReference

        reference = None if ctx.harness else LMReference(ctx.model(), {c.name: ctx.step_module(c) for c in ctx.components})
        results, placement = [], {}
        for name, paths, precision, target in stages:
            provider = ET_PROVIDER if ctx.plan.format == "executorch" else target["execution_provider"]
            with ctx.reporter.stage("verify", f"{name} on {provider}"):
                runners, pl = _runners(paths, target, ctx.manifest_components(), ctx.custom_ops)
                res = ctx.harness.measure(ctx, name, provider, precision, runners, ctx.manifest_components()) if ctx.harness else measure_stage(
                    name, provider, precision, runners, ctx.manifest_components(),
                    ctx.recipe.state_layout, [list(s) for s in ev.sequences], reference,
                    ctx.recipe.thresholds[precision], ctx.recipe.decode_steps,
                )
                results.append(res)
                placement = {n: p.to_json() for n, p in pl.items()}
                del runners  # this stage's sessions (a copy of the weights each) go before the next stage's open
                release_free_heap()  # and their pages go back to the OS, not only to glibc's free lists
        summary = summarize(results)
        (tmp / "parity.json").write_text(json.dumps({"summary": summary, "placement": placement}, indent=1, sort_keys=True))
        return {}

    with ctx.timed("verify"):
        r = ctx.cache.run("verify", inputs, build)
    ctx.hits["verify"] = r.hit
    data = json.loads((r.path / "parity.json").read_text())
    data["summary"]["evaluation"] = ev.to_json()
    return data["summary"], data["placement"]


def _bundle_files(ctx: Context, final: dict[str, Path], staging: Path) -> list[dict]:
    comps = []
    for comp, cj in zip(ctx.components, ctx.manifest_components()):
        src = final[comp.name]
        if ctx.plan.format == "qnn-context":
            names = sorted(p.name for p in src.parent.iterdir() if p.name != "_done.json")
            for n in names:
                shutil.copy2(src.parent / n, staging / n)
            entry, files = src.name, names
        else:
            entry = f"{comp.graph_name}{src.suffix}"
            if src.suffix == ".onnx":
                from exporter.backends.onnx_export import copy_graph

                files = copy_graph(src, staging / entry)  # with its external data, renamed after the entry
            else:
                shutil.copy2(src, staging / entry)
                files = [entry]
        comps.append({**cj, "entry": entry, "files": files})
    return comps


def _runtime_files(ctx: Context, scheme: dict, dest: Path, staging: Path) -> dict:
    """What a runtime needs besides the graphs, written into the bundle: the Vitis AI EP's provider options and
    (BF16) its compile configuration for a Ryzen AI bundle; for every bundle, the EP and how to open it."""
    rt = {"execution_provider": ctx.target.execution_provider, "provider_options": {}, "files": [],
          "custom_op_domains": sorted(scheme.get("custom_op_domains", ()))}
    if ctx.plan.format == "ryzenai-qdq":
        from exporter.backends.ryzenai import PROVIDER_OPTIONS, vitisai_files

        files = vitisai_files(f"{ctx.recipe.name}-{dest.name}", ctx.plan.precision, bool(scheme.get("needs_custom_ops")))
        for name, body in files.items():
            (staging / name).write_text(json.dumps(body, indent=1, sort_keys=True) + "\n")
        rt |= {"provider_options": files[PROVIDER_OPTIONS]["provider_options"], "files": sorted(files), "opset": files[PROVIDER_OPTIONS]["session"]["opset"]}
    return rt


def _worst(outputs: dict) -> dict:
    """The worst value of each metric over every component and output of a stage (None where nothing finite was
    measured; the non-finite calls are counted)."""
    ms = [m for outs in outputs.values() for m in outs.values()]
    cos = [m["min_cosine"] for m in ms if m["min_cosine"] is not None]
    psnrs = [m["min_psnr_db"] for m in ms if m["min_psnr_db"] is not None]
    mabs = [m["max_abs"] for m in ms if m["max_abs"] is not None]
    return {
        "min_cosine": min(cos) if cos else None,
        "min_psnr_db": min(psnrs) if psnrs else None,
        "max_abs": max(mabs) if mabs else None,
        "nonfinite_calls": sum((m.get("nonfinite_calls") or 0) + (m.get("reference_nonfinite_calls") or 0) for m in ms),
    }


def _existing_matches(bundle: Path, build_key: str, public_key: Path) -> bool:
    from manifests import manifest as mf
    from manifests.signing import verify_bundle

    try:
        data = mf.load(bundle)
        if data.get("build_key") != build_key:
            return False
        verify_bundle(bundle, public_key)
        return True
    except EdgeExportError:
        return False


def bundle_variant(plan, target: Target) -> str:
    """Bundle and record name: the precision, prefixed by the format where it is not the target's default."""
    return plan.precision if plan.format == target.formats[0] else f"{plan.format}-{plan.precision}"


def build_one(
    recipe: Recipe,
    target: Target,
    precision: str | None,
    out_root: Path,
    key: Path | None = None,
    checkpoint: Path | None = None,
    allow_unpinned: bool = False,
    cache_root: Path | None = None,
    reporter: Reporter | None = None,
    context: int | None = None,
    fmt: str | None = None,
    requested_target: str | None = None,
    command: str | None = None,
    pin_file: dict | None = None,
) -> BuildResult:
    """Plan first (refusing before any heavy work), then build, verify, sign; every outcome is recorded. `pin_file`:
    the record of the reviewed pin file whose digests `recipe.pin` carries."""
    from exporter.locks import held

    reporter = reporter or Reporter()
    out_root = Path(out_root)
    plan = make_plan(recipe, target, precision, context, fmt, requested_target)
    where = out_root.resolve() / recipe.name / target.name / bundle_variant(plan, target)
    # one build of a bundle at a time: a concurrent run into the same output root waits, then finds it up to date
    with held(out_root, f"bundle:{where}", f"{recipe.name}/{target.name}/{bundle_variant(plan, target)} in {out_root}", reporter.note):
        return _build_one(recipe, target, plan, out_root, key, checkpoint, allow_unpinned, cache_root, reporter, command, pin_file)


def _build_one(recipe, target, plan, out_root, key, checkpoint, allow_unpinned, cache_root, reporter, command, pin_file) -> BuildResult:
    from manifests.records import write_record

    twin = bool(recipe.pin and recipe.pin.source.startswith("synthesized:"))
    rec = dict(plan=plan.to_json(), command=command, variant=bundle_variant(plan, target),
               checkpoint={"twin": twin, "pinned": None, "source": recipe.pin.source if recipe.pin else None})
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
    holder: dict = {}
    try:
        result = _build_admitted(recipe, target, plan, out_root, key, checkpoint, allow_unpinned, cache_root, reporter, holder, pin_file)
    except Exception as e:
        if "ctx" in holder:
            ck = holder["ctx"].ckpt
            rec["checkpoint"] = {"twin": ck.synthetic, "pinned": ck.pinned, "source": ck.source, "revision": ck.revision}
        stage = holder["ctx"].current if "ctx" in holder else "resolve"
        hint = e.hint if isinstance(e, EdgeExportError) else "this is a bug if the inputs are valid: report it with the record"
        write_record(out_root, recipe.name, target.name, plan.precision, "failed", code=type(e).__name__, stage=stage,
                     reason=str(getattr(e, "message", e)).splitlines()[0][:2000], fix=hint, **rec)
        raise
    ck = holder["ctx"].ckpt if "ctx" in holder else None
    if ck is not None:
        rec["checkpoint"] = {"twin": ck.synthetic, "pinned": ck.pinned, "source": ck.source, "revision": ck.revision}
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


def _build_admitted(recipe, target, plan, out_root, key, checkpoint, allow_unpinned, cache_root, reporter, holder, pin_file=None) -> BuildResult:
    from manifests import manifest as mf
    from manifests.signing import public_key_fingerprint, resolve_key, sign_bundle

    cache_root = Path(cache_root) if cache_root else out_root / ".cache"
    keys = resolve_key(key)  # build() already loaded and checked it; a KeyPair passes through
    t0 = time.perf_counter()
    with reporter.stage("resolve", f"{recipe.name} checkpoint ({recipe.pin.source if checkpoint is None else checkpoint})"):
        ckpt = resolve(recipe, cache_root, checkpoint, allow_unpinned, pin_file)
    ctx = Context(recipe, target, plan, ckpt, StageCache(cache_root, notice=reporter.note), reporter, versions.tool_versions())
    holder["ctx"] = ctx
    ctx.timings["resolve"] = round(time.perf_counter() - t0, 3)

    if plan.format == "executorch":
        from exporter.backends.executorch_export import METHODS

        final, lowering = stage_lower_executorch(ctx)
        ctx.component_extra = {n: {"kernel_libraries": r["kernel_libraries"]} for n, r in lowering.items()}
        fp32 = quantized = final
        scheme = {"precision": plan.precision, "scheme": METHODS[plan.precision], "backend": "XnnpackBackend", "calibration": None,
                  "programs": lowering, **({"isa": FLOAT_ISA} if plan.precision == "fp32" else {})}
        # placement of a program is its delegation, known from the lowering (the runtime reports none)
        delegated = {n: {"by_provider": {"XnnpackBackend": r["delegation"]["delegated_nodes"], "portable": r["delegation"]["non_delegated_nodes"]},
                         "delegated_share": r["delegation"]["delegated_share"], "not_delegated": r["delegation"]["not_delegated"]}
                     for n, r in lowering.items()}
    else:
        fp32 = stage_export(ctx)
        quantized, scheme = stage_quantize(ctx, fp32)
        final = stage_compile(ctx, quantized)
        delegated = None
    summary, placement = stage_verify(ctx, fp32, quantized, final)
    ctx.release_model()
    placement = delegated or placement
    memory = stage_memory(ctx, final)

    bundle = out_root / recipe.name / target.name / bundle_variant(plan, target)
    passed = summary["verdict"] == "pass"
    dest = bundle if passed else bundle.with_name(bundle.name + ".failed")
    build_key = sha256_json({
        "recipe": recipe.content_hash(),
        "checkpoint": ckpt.to_json(),
        "plan": {k: v for k, v in plan.to_json().items() if k not in ("requested", "missing_prerequisites", "buildable")},
        "artifacts": {n: artifact_digest(p) for n, p in final.items()},
        "parity": summary,
        "signer": public_key_fingerprint(keys.public),
        "code": code_digest(),
    })
    if passed and _existing_matches(dest, build_key, keys.public):
        ctx.hits["publish"] = True
        return BuildResult(recipe.name, target.name, plan.precision, "up-to-date", dest, summary, ctx.timings, ctx.hits)

    from verify.parity import markdown

    with ctx.timed("sign", str(dest)), staging_dir(dest) as tmp:
        comps = _bundle_files(ctx, final, tmp)
        emulated = ctx.plan.verification.get("emulated", False)
        for c in comps:
            c["placement"] = placement.get(c["name"], {})
            if emulated:
                c["placement"] = {**c["placement"], "measured_on": ctx.plan.verification["provider"], "placement_on_target": "unqualified"}
        runtime = _runtime_files(ctx, scheme, dest, tmp)
        (tmp / "parity.json").write_text(json.dumps(summary, indent=1, sort_keys=True) + "\n")
        (tmp / "parity.md").write_text(markdown(summary, f"{recipe.name} / {target.name} / {plan.precision}"))
        files = {
            str(p.relative_to(tmp)): {"sha256": sha256_file(p), "size": p.stat().st_size}
            for p in sorted(tmp.rglob("*"))
            if p.is_file()
        }
        manifest = {
            "schema_version": mf.SCHEMA_VERSION,
            "build_key": build_key,
            "bundle": {
                "recipe": recipe.name,
                "target": target.name,
                "precision": plan.precision,
                "format": plan.format,
                "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                "published": passed,
            },
            "recipe": {"name": recipe.name, "content_sha256": recipe.content_hash(), "family": recipe.family, "architecture": recipe.architecture},
            "checkpoint": ckpt.to_json(),
            "target": target.to_json(),
            "plan": plan.to_json(),
            "components": comps,
            "state_layout": recipe.state_layout,
            "quantization": scheme,
            "evaluation": summary["evaluation"],
            "tools": ctx.tools,
            "memory": memory,
            "verification": verification_host(target, ctx.plan.verification),
            "runtime": runtime,
            "parity": {
                "verdict": summary["verdict"],
                "first_failure": summary["first_failure"],
                "thresholds": {v["stage"]: v["thresholds"] for v in summary["stages"]},
                "stages": [
                    {
                        "stage": v["stage"],
                        "verdict": v["verdict"],
                        "provider": v["provider"],
                        "precision": v["precision"],
                        "decode": {k: v["decode"].get(k) for k in ("applicable", "steps", "token_agreement", "min_greedy_prefix", "all_greedy_exact")
                                   if k in v["decode"]},
                        "worst": _worst(v["outputs"]),
                    }
                    for v in summary["stages"]
                ],
                "report": "parity.json",
            },
            "files": files,
            "host": versions.host_info(),
            "signing": {"format": "model-signing/elliptic-key", "public_key_sha256": public_key_fingerprint(keys.public), "signature": mf.SIGNATURE},
        }
        mf.write(tmp, manifest)
        sign_bundle(tmp, keys.private)
        _verify_own_signature(tmp, keys.public)
    status = "published" if passed else "parity-failed"
    return BuildResult(recipe.name, target.name, plan.precision, status, dest, summary, ctx.timings, ctx.hits)


def _verify_own_signature(staging: Path, public: Path) -> None:
    """A bundle is published only if the public key its manifest names verifies what was just signed."""
    from exporter.errors import IntegrityError
    from manifests.signing import verify_bundle

    try:
        verify_bundle(staging, public)
    except EdgeExportError as e:
        raise IntegrityError(f"the signature just made does not verify with the signer's public key ({e.message})",
                             "check the signing key (--key); nothing was published") from None


def precisions_for(recipe: Recipe, target: Target, precision: str | None, fmt: str | None = None) -> list[str | None]:
    if precision:
        return [precision]
    return list(recipe.precisions_for(target, fmt or target.formats[0])) or [None]


def build(recipe_name: str, target_name: str, precision: str | None = None, ram_gib: float | None = None, fmt: str | None = None,
          pin: Path | None = None, **kw) -> list[BuildResult]:
    """`pin`: a reviewed pin file (exporter/pins.py) the checkpoint given as `checkpoint` must match, file by file."""
    from manifests.signing import resolve_key

    recipe = get_recipe(recipe_name)
    out_root = Path(kw["out_root"])
    _refuse_out_inside_a_bundle(out_root)
    kw["key"] = resolve_key(kw.get("key"))  # a bad --key fails here, before any work
    from exporter.atomic import sweep_tree

    sweep_tree(out_root)  # staging and superseded directories of killed runs, provably dead
    pinned = None
    if pin is not None:
        from exporter.pins import load_pin

        if kw.get("checkpoint") is None:
            from exporter.errors import UsageError

            raise UsageError("--pin needs --checkpoint DIR: a pin names the files of one checkpoint directory",
                             f"pass --checkpoint with the snapshot the pin was made from")
        pinned = load_pin(Path(pin))
        from recipes import base_recipe

        if base_recipe(pinned.recipe) != base_recipe(recipe.name):
            from exporter.errors import UsageError

            raise UsageError(f"pin file {pin} pins a checkpoint for recipe {pinned.recipe}, not {recipe.name}",
                             f"build recipe {pinned.recipe} with it, or pin the checkpoint for {recipe.name}: edge-export pin {recipe.name} ...")
        kw["pin_file"] = pinned.record()
    if kw.get("checkpoint") is not None:
        recipe = recipe.for_checkpoint(read_checkpoint_config(Path(kw["checkpoint"])), pinned.checkpoint_pin() if pinned else None)
    target = get_target(target_name)
    if ram_gib is not None:
        target = target.with_ram(ram_gib)
    if recipe.group_recipes is not None:
        return build_groups(recipe, target, precision, fmt, target_name, **kw)
    return [build_one(recipe, target, p, requested_target=target_name, fmt=fmt, **kw) for p in precisions_for(recipe, target, precision, fmt)]


def _refuse_out_inside_a_bundle(out_root: Path) -> None:
    from exporter.errors import UsageError
    from manifests.manifest import MANIFEST, SIGNATURE

    p = Path(out_root).resolve()
    for d in (p, *p.parents):
        if (d / MANIFEST).is_file() and (d / SIGNATURE).exists():
            raise UsageError(f"--out {out_root} is inside the signed bundle {d}: writing there would break its signature",
                             "choose an output root outside any bundle (the default is ./artifacts)")


def build_groups(recipe: Recipe, target: Target, precision: str | None, fmt: str | None, requested_target: str, **kw) -> list[BuildResult]:
    """A multi-component recipe: every group planned and, where admitted, built as its own signed bundle
    (OUT/RECIPE.GROUP/TARGET/PRECISION); a rejected group or one with a missing prerequisite is recorded
    and the others go on (never a smaller model in its place)."""
    from dataclasses import replace

    from manifests.records import record_path, write_record

    out_root = Path(kw["out_root"])
    results = []
    for group, sub in recipe.group_recipes().items():
        if sub is None:
            g = next(x for x in recipe.cost.groups if x.name == group)
            shell = replace(recipe, name=f"{recipe.name}.{group}", cost=recipe.cost.group(g), group_recipes=None)
            plan = make_plan(shell, target, precision, None, fmt, requested_target)
            reason, fix = recipe.group_missing[group]
            path = write_record(out_root, shell.name, target.name, plan.precision, "missing-prerequisite", code="missing-prerequisite",
                                reason=reason, fix=fix, stage="plan", plan=plan.to_json(), command=kw.get("command"))
            results.append(BuildResult(shell.name, target.name, plan.precision, "missing-prerequisite", path, {"reason": reason}))
            continue
        gkw = {**kw, "context": kw.get("context") if sub.cost.contexts() else None}  # an encoder has no context buckets
        for p in precisions_for(sub, target, precision, fmt):
            try:
                results.append(build_one(sub, target, p, requested_target=requested_target, fmt=fmt, **gkw))
            except EdgeExportError as e:  # recorded by build_one; the other groups go on
                status = "rejected" if isinstance(e, PlanRejected) else "missing-prerequisite" if isinstance(e, MissingPrerequisite) else "failed"
                prec = p or make_plan(sub, target, None, gkw["context"], fmt).precision
                results.append(BuildResult(sub.name, target.name, prec, status, record_path(out_root, sub.name, target.name, prec),
                                           {"reason": e.message}))
    return results


def read_checkpoint_config(directory: Path) -> dict:
    from exporter.errors import UsageError

    path = directory / "config.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise UsageError(f"{path}: cannot read the checkpoint's config ({e})", "point --checkpoint at a Hugging Face snapshot directory") from None


def host_abi() -> tuple[str, str]:
    """(os, abi) of this host in the registry's terms."""
    import platform

    system, machine = platform.system().lower(), platform.machine().lower()
    arch = {"amd64": "x86_64", "x86_64": "x86_64", "arm64": "aarch64", "aarch64": "aarch64"}.get(machine, machine)
    if system == "windows":
        return "windows", "win-amd64" if arch == "x86_64" else "win-arm64"
    os_name = "wsl" if "microsoft" in platform.release().lower() else system
    return os_name, f"{system}-{arch}"


def verification_host(target: Target, planned: dict | None = None) -> dict:
    """Where parity was measured (OS, ABI and the CPU features that select numeric kernels), and whether that counts
    as on the target itself (`planned`: the plan's verification)."""
    from exporter.hostcpu import host_cpu

    os_name, abi = host_abi()
    cpu = {"host_cpu": host_cpu(), **({"isa_baseline": target.isa_baseline} if target.isa_baseline else {})}
    if planned and planned.get("emulated"):
        return {"host_os": os_name, "host_abi": abi, "emulated": True, "on_target": False, "provider": planned["provider"],
                "emulates": planned["emulates"], "placement": "unqualified", "note": planned["note"], **cpu}
    emulated = target.execution_provider == "QNNExecutionProvider" and not abi.endswith("aarch64") and "arm64" not in abi
    return {
        "host_os": os_name,
        "host_abi": abi,
        "emulated": emulated,
        "on_target": (not emulated) and abi == target.abi and os_name == target.os,
        "note": "QNN HTP x86 simulator: numerics of the compiled context, not device timing or memory" if emulated else "",
        **cpu,
    }


def stage_memory(ctx: Context, final: dict[str, Path]) -> dict:
    """Estimated (plan) and measured (fresh-process probe) memory of the final graphs."""
    from verify.memprobe import compare, measure

    target = ctx.run_target()
    inputs = {"artifacts": {n: artifact_digest(p) for n, p in final.items()}, "target": target,
              "tools": ctx.tool_subset(COMPILE_TOOLS), "code": code_digest()}
    fmt = "executorch" if ctx.plan.format == "executorch" else "onnx"
    with ctx.timed("memory", f"peak resident memory of opening and running every graph on {target['execution_provider']}"):
        r = ctx.cache.run("memory", inputs, lambda tmp: {"measured": measure(final, ctx.manifest_components(), target,
                                                                             ctx.recipe.state_layout, fmt=fmt, custom_ops=ctx.custom_ops)})
    ctx.hits["memory"] = r.hit
    measured = r.info["measured"]
    return {"estimate": ctx.plan.memory, "measured": measured, "comparison": compare(ctx.plan.memory, measured)}


def context_for_bundle(manifest: dict, checkpoint: Path | None, cache_root: Path, reporter: Reporter | None = None) -> Context:
    """The build context of an existing bundle, for replaying its reference (AI Hub validation):
    same recipe, target, plan and checkpoint digests, or a precise refusal."""
    from exporter.errors import IntegrityError

    b = manifest["bundle"]
    recipe = get_recipe(b["recipe"])
    ck = manifest["checkpoint"]
    if checkpoint is not None:
        from recipes.base import CheckpointPin

        # a bundle built against a reviewed pin file is replayed against the digests it recorded
        pin = CheckpointPin(ck["source"], ck["revision"], dict(ck["files"])) if ck.get("pin_file") else None
        recipe = recipe.for_checkpoint(read_checkpoint_config(Path(checkpoint)), pin)
    target = get_target(b["target"])
    req = manifest["plan"].get("requested", {})
    plan = make_plan(recipe, target, b["precision"], req.get("context"), b["format"])
    planned = sorted(a.graph_name for a in plan.artifacts)
    built = sorted(c["graph_name"] for c in manifest["components"])
    if planned != built:
        raise IntegrityError(f"the plan of {b['recipe']}/{b['target']}/{b['precision']} today ({planned}) differs from the bundle's graphs ({built})",
                             "validate with the edge-export version that built the bundle, or rebuild it")
    ckpt = resolve(recipe, Path(cache_root), checkpoint, allow_unpinned=not ck.get("pinned", True), pin_file=ck.get("pin_file"))
    if ckpt.files != manifest["checkpoint"]["files"]:
        raise IntegrityError("the checkpoint found for the reference differs from the one the bundle was built from "
                             f"({sorted(ckpt.files.items())} vs {sorted(manifest['checkpoint']['files'].items())})",
                             "pass --checkpoint with the exact checkpoint the bundle names")
    return Context(recipe, target, plan, ckpt, StageCache(Path(cache_root)), reporter or Reporter(), versions.tool_versions())

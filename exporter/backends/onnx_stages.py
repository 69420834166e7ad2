"""Stages of the ONNX-based formats: export (torch -> ONNX, side by side in forked copies), quantize, and the bundle
files of a graph. `produce` is the `onnx` format's whole build; qnn_stages and ryzenai_stages reuse the stages.

Every stage goes through the content-addressed stage cache with a key of everything that can change its result.
"""

from __future__ import annotations

from pathlib import Path

from exporter.backends.base import Artifacts
from exporter.backends.onnx_format import EXPORT_TOOLS
from exporter.cache import code_digest
from exporter.errors import EdgeExportError
from exporter.hashing import sha256_file
from recipes.base import PRECISIONS

# float32 graphs: CPU kernels differ between instruction sets only in rounding (tiny-lm prefill logits: max |d| 5.7e-6
# between the AVX-512 and the AVX2 path of ONNX Runtime 1.32, far inside any fp32 threshold; docs/NOTES.md)
FLOAT_ISA = {"dependent": False, "why": "float32 kernels differ across instruction sets only in rounding"}
# path-only passes run in a worker interpreter (exporter/backends/quantize.py): method -> (pass, extra args)
WORKER_PASSES = {"ort-dynamic": "dynamic_int8", "fp16-convert": "fp16_convert", "nncf-int4": "nncf_weight_only", "nncf-int8-wo": "nncf_weight_only"}


def produce(backend, build) -> Artifacts:
    fp32 = export(backend, build)
    quantized, scheme, custom_ops = quantize(backend, build, fp32)
    return Artifacts(float=fp32, quantized=quantized, final=quantized, scheme=scheme, custom_ops=custom_ops)


def _int4_totals(per_graph: list[dict]) -> dict:
    out = dict(per_graph[-1])
    out["matmul_weights"] = sum(i.get("matmul_weights") or 0 for i in per_graph)
    if "lpbq" in out:
        out["lpbq"] = {**out["lpbq"], **{k: sum((i.get("lpbq") or {}).get(k, 0) for i in per_graph) for k in ("weights", "blocks")
                                         if k in out["lpbq"]}}
    return out


def bundle_files(final: Path, graph_name: str, staging: Path) -> tuple[str, list[str]]:
    from exporter.backends.onnx_export import copy_graph

    entry = f"{graph_name}{final.suffix}"
    return entry, copy_graph(final, staging / entry)  # with its external data, renamed after the entry


# -- export -----------------------------------------------------------------------------------------------------------


def export(backend, build) -> dict[str, Path]:
    """The float graph of every component (the plan's cut), from the family adapter's step modules."""
    opset = backend.export_opset or build.adapter.opset
    mcomps = {c["name"]: c for c in build.manifest_components()}
    jobs = []
    for comp in build.components:
        inputs = {
            "checkpoint": build.ckpt.digest,
            "architecture": build.recipe.architecture,
            "model_config": build.recipe.model_config,
            "component": mcomps[comp.name],
            "tools": build.tool_subset(EXPORT_TOOLS),
            "code": code_digest(),
            "opset": opset,
        }
        jobs.append((comp, inputs, lambda tmp, c=comp: _export_one(build, c, tmp, opset)))
    cached = {comp.name: build.cache.has_entry("export", inputs) for comp, inputs, _ in jobs}
    _export_side_by_side(build, [j for j in jobs if not cached[j[0].name]])
    out = {}
    for comp, inputs, make in jobs:
        with build.log.stage("export", comp.graph_name):
            r = build.cache.run("export", inputs, make)  # a graph exported side by side is a hit here
        build.log.hit(f"export/{comp.name}", cached[comp.name] and r.hit)
        out[comp.name] = r.path / "model.onnx"
    return out


def _export_one(build, comp, tmp: Path, opset: int) -> dict:
    from exporter.backends.onnx_export import export_component

    with build.adapter.graph_module(comp) as module:  # an adapter that loads by parts holds this graph's tensors only
        return export_component(module, comp, tmp, opset)


def _export_side_by_side(build, jobs: list) -> None:
    """Export the graphs not in the cache in forked copies of this process, one per core (exporter/forked.py), when
    there are several and memory allows (each copy is budgeted at twice the float32 bytes of the largest graph it may
    export where the adapter loads by parts, else twice the checkpoint's bytes: the weights it holds and the exporter's
    working set, bench/README.md). A copy that failed leaves its graph unexported: the caller
    exports it again in this process and raises what it raises; a copy that was killed is a named error."""
    from exporter import forked
    from exporter.build_memory import WORKING_SET_BYTES

    # a part's tensors, where the adapter loads by parts (graph_bytes is None where it loads the whole model)
    per_job = max((build.adapter.graph_bytes(comp) or 0 for comp, _, _ in jobs), default=0)
    if not per_job:
        per_job = sum((build.ckpt.directory / n).stat().st_size for n in build.ckpt.files if (build.ckpt.directory / n).is_file())
    # --max-memory: the copies share what the build may use beyond its fixed working set
    workers = forked.workers_for(len(jobs), 2 * per_job, build.budget.bytes - WORKING_SET_BYTES)
    # Where the budget admits one copy at a time and the adapter loads by parts, each graph still exports in a copy of
    # its own: what torch.onnx and the exporter allocate for a part (3.6 x its float32 bytes at 0.5b, bench/README.md)
    # then goes back to the OS when the copy exits, instead of staying in the build process through verify.
    # EDGE_EXPORT_EXPORT_WORKERS=1 keeps the export in this process, as before.
    one_at_a_time = workers == 1 and len(jobs) > 1 and build.adapter.loads_parts and forked.can_fork() and not forked.workers_set()
    if workers < 2 and not one_at_a_time:  # workers_for never exceeds the pending graphs: one graph exports in this process
        return

    def child_job(inputs, make):
        def run():
            build.log.silence()  # the parent owns the terminal
            build.cache.run("export", inputs, make)
        return run

    if not build.adapter.loads_parts:
        build.adapter.model()  # loaded once, here: the copies share it, and verify uses it after them
    names = ", ".join(comp.graph_name for comp, _, _ in jobs)
    with build.log.stage("export", f"{len(jobs)} graphs, {workers} at a time in forked processes: {names}"):
        try:
            outcomes = forked.run_forked([(comp.name, child_job(inputs, make)) for comp, inputs, make in jobs], workers,
                                         build.cache.root / "logs" / "export")
        except BaseException:
            from exporter.atomic import sweep_tree

            sweep_tree(build.cache.root / "export")  # the copies were killed: their staging directories go with them
            raise
    for o in outcomes:
        if o.signal is not None:
            raise EdgeExportError(f"exporting {o.name} was killed by signal {o.signal} in its forked process (log: {o.log}):\n    {o.tail()}",
                                  f"signal 9 is usually the out-of-memory killer: free memory, or export one graph at a time "
                                  f"({forked.WORKERS_ENV}=1)")
        if o.ok:
            o.log.unlink(missing_ok=True)


# -- quantize ---------------------------------------------------------------------------------------------------------


def quantize(backend, build, fp32: dict[str, Path], calibrated_pass=None, custom_op_libraries=None) -> tuple[dict[str, Path], dict, tuple[str, ...]]:
    """Each float graph at the plan's precision by the backend's method: (graphs, scheme, custom-op libraries).
    `calibrated_pass(method, src, dst, feeds, options)` and `custom_op_libraries(build)` are the format's calibrated
    quantizer and the libraries its graphs need in a session (default: ORT's QDQ, none)."""
    calibrated_pass = calibrated_pass or ort_qdq_pass
    custom_op_libraries = custom_op_libraries or (lambda build: ())
    precision = build.plan.precision
    method = backend.method_for(PRECISIONS[precision])
    if method == "float":
        return fp32, {"precision": precision, "scheme": "none (float32)", "calibration": None, "isa": FLOAT_ISA}, ()
    calibrated = backend.calibrated(method)
    cal = build.adapter.calibration() if calibrated else None
    upstream = build.recipe.calibration_upstream if calibrated else None
    if upstream not in (None, "float", "quantized"):
        from exporter.errors import UsageError

        raise UsageError(f"recipe {build.recipe.name}: calibration_upstream {upstream!r} is neither 'float' nor 'quantized'",
                         "set calibration_upstream to 'float' or 'quantized' in the recipe")
    # the order in which graphs are quantized: by chain level (embedding, part 1, ..., head) where calibration flows from
    # quantized upstream graphs, so that every graph before a level is quantized when that level is calibrated
    levels = _chain_levels(build.components) if upstream == "quantized" else {n: 0 for n in fp32}
    feeds: dict = {}  # per level: computed once, for the first graph of that level that needs them
    custom_ops: tuple[str, ...] = ()
    out, info, infos = {}, {}, []
    roles = {c.name: c.role for c in build.components}
    try:
        for name, src in sorted(fp32.items(), key=lambda kv: levels[kv[0]]):
            options = role_options(build.recipe.quant_options.get(quant_options_key(backend, precision), {}), roles[name])
            inputs = {"source": sha256_file(src), "precision": precision, "method": method, "tools": build.tool_subset(backend.tools(method)),
                      "code": code_digest(), **({"options": options} if options else {})}
            level = levels[name]
            drive = {n: (out[n] if levels[n] < level else p) for n, p in fp32.items()}  # what the calibration runs go through
            if calibrated:
                inputs["calibration"] = cal.digest
                if upstream == "quantized":
                    inputs["upstream"] = {n: sha256_file(p) for n, p in sorted(drive.items()) if levels[n] < level}

            def make(tmp: Path, name=name, src=src, options=options, level=level, drive=drive):
                if method in WORKER_PASSES:
                    from exporter.backends import quantize as q

                    extra = (precision,) if method.startswith("nncf-") else ()
                    return q.in_worker(WORKER_PASSES[method], src, tmp / "model.onnx", *extra)
                if level not in feeds:
                    upstream_note = f", upstream quantized below level {level}" if upstream == "quantized" else ""
                    with build.log.stage("calibrate", f"{cal.name} ({len(getattr(cal, 'sequences', None) or cal.items)} samples{upstream_note})"):
                        _drop(feeds)  # one level's feeds at a time
                        feeds[level] = build.adapter.calibration_feeds(drive)
                return calibrated_pass(method, src, tmp / "model.onnx", feeds[level][name], options)

            with build.log.stage("quantize", f"{name} {precision} ({method})"):
                r = build.cache.run("quantize", inputs, make)
            build.log.hit(f"quantize/{name}", r.hit)
            out[name] = r.path / "model.onnx"
            info = r.info
            infos.append((roles[name], info))
            if info.get("needs_custom_ops") and not custom_ops:
                custom_ops = custom_op_libraries(build)
    finally:
        _drop(feeds)  # and what they spilled to disk
    out = {n: out[n] for n in fp32}  # the plan's order
    int4 = [i["int4"] for _, i in infos if "int4" in i]
    main = next((i for _, i in reversed(infos) if "int4" in i), info)  # a role at other bits (an 8-bit head) is listed below
    scheme = {"precision": precision, "method": method, **main}
    if int4:  # counted over every graph, not the last one's
        scheme["int4"] = _int4_totals(int4)
    by_role = build.recipe.quant_options.get(quant_options_key(backend, precision), {}).get("roles") or {}
    if by_role:
        scheme["by_role"] = {r: {"options": by_role[r], "weights": next((i["weights"] for rr, i in infos if rr == r), None)} for r in sorted(by_role)}
    scheme["calibration"] = ({**cal.to_json(), "procedure": build.adapter.calibration_procedure, "upstream": UPSTREAM[upstream]}
                             if calibrated else None)
    return out, scheme, custom_ops


UPSTREAM = {
    "float": "float: every graph's calibration inputs come from the float graphs before it",
    "quantized": ("quantized: each graph's calibration inputs come from the quantized graphs before it in the chain "
                  "(part k on what the quantized embedding and parts 1..k-1 produce)"),
}


def _drop(feeds: dict) -> None:
    """Forget the feeds held (and remove what they spilled to disk)."""
    for f in feeds.values():
        getattr(f, "cleanup", lambda: None)()
    feeds.clear()


def _chain_levels(components) -> dict[str, int]:
    """Each graph's place in the chain a token runs through: embedding (and encoders) 0, stack part k at k, head last."""
    parts = [c.part[0] if c.part else 1 for c in components if c.role in ("prefill", "decode")]
    last = max(parts, default=0) + 1
    return {c.name: (c.part[0] if c.part else 1) if c.role in ("prefill", "decode") else last if c.role == "head" else 0
            for c in components}


def role_options(options: dict, role: str) -> dict:
    """A precision's quant options for a graph of `role`: the recipe's options with its `roles[role]` entries over them
    (e.g. {"roles": {"head": {"matmul_bits": 8}}} keeps the LM head's weights at 8 bits in a w4a16 build)."""
    return {**{k: v for k, v in options.items() if k != "roles"}, **((options.get("roles") or {}).get(role) or {})}


def quant_options_key(backend, precision: str) -> str:
    """The recipe's options for this precision: keyed by the precision, or FORMAT:PRECISION where a format's quantizer
    takes options of its own (Quark's presets are not ORT's QNN QDQ options)."""
    return precision if backend.methods is None else f"{backend.name}:{precision}"


def ort_qdq_pass(method: str, src: Path, dst: Path, feeds: list[dict], options: dict) -> dict:
    """ORT's calibrated QDQ (uint16 activations; uint8 or int8 per-channel weights, or for `qnn-lpbq` int4 LPBQ or
    per-channel MatMul weights): the HTP integer path."""
    from exporter.backends import quantize as q

    if method == "qnn-lpbq":
        return q.static_w4a16(src, dst, feeds, **options)
    return q.static_w8a16(src, dst, feeds, **options)

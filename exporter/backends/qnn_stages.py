"""Stages of `qnn-context`: the ONNX export and QDQ quantization, then each graph compiled for the HTP on the QNN EP
(no CPU fallback) into an EPContext model plus its context binary."""

from __future__ import annotations

from pathlib import Path

from exporter.backends import onnx_stages
from exporter.backends.base import Artifacts
from exporter.cache import code_digest
from exporter.errors import EdgeExportError
from exporter.hashing import sha256_file

COMPILE_TOOLS = ("onnxruntime", "onnxruntime-qnn", "qairt")


class CompileError(EdgeExportError):
    exit_code = 3  # an artifact that cannot be trusted: a graph that does not compile


def produce(backend, build) -> Artifacts:
    fp32 = onnx_stages.export(backend, build)
    quantized, scheme, custom_ops = onnx_stages.quantize(backend, build, fp32)
    final = compile_graphs(build, quantized)
    shipped, fields = None, {}
    if build.plan.memory.get("weights_shared_between_graphs"):
        shipped, sharing = compile_shared_groups(build, quantized, final)
        if sharing["groups"]:  # a plan whose every weight set has one graph ships its per-graph contexts
            fields = {"weight_sharing": sharing}
        else:
            shipped = None
    return Artifacts(float=fp32, quantized=quantized, final=final, scheme=scheme, custom_ops=custom_ops, shipped=shipped,
                     bundle_fields=fields)


def compile_graphs(build, quantized: dict[str, Path]) -> dict[str, Path]:
    target = build.target.to_json()
    out = {}
    for comp in build.components:
        src = quantized[comp.name]
        inputs = {"source": sha256_file(src), "target": target["accelerator"], "tools": build.tool_subset(COMPILE_TOOLS), "code": code_digest()}
        with build.log.stage("compile", f"{comp.graph_name} -> HTP v{target['accelerator']['htp_arch']}"):
            r = build.cache.run("compile", inputs, lambda tmp, c=comp, s=src: compile_one(s, tmp, c.graph_name, target))
        build.log.hit(f"compile/{comp.name}", r.hit)
        out[comp.name] = r.path / r.info["entry"]
    return out


def sharing_groups(build) -> list[list]:
    """The plan's weight-sharing groups, in component order: the graphs of one weight set and layer range (every bucket's
    prefill and decode of a part; the embedding and the head that reads its tied copy)."""
    key = {a.component: (a.weight_set, a.part, tuple(a.layers)) for a in build.plan.artifacts}
    groups: dict[tuple, list] = {}
    for comp in build.components:
        groups.setdefault(key[comp.name], []).append(comp)
    return list(groups.values())


def compile_shared_groups(build, quantized: dict[str, Path], final: dict[str, Path]) -> tuple[dict[str, Path], dict]:
    """Each sharing group of two or more graphs compiled from the same QDQ graphs as the per-graph contexts into one
    weight-shared context binary (a group of one ships its per-graph context). Returns the graph per component the
    bundle carries and the manifest's `weight_sharing` section. The shared binaries are not opened here: the x86 HTP
    simulator cannot load one (exporter/htp_sharing.py); parity is the per-graph contexts'."""
    from exporter.htp_sharing import LOAD_VERIFIED, PARITY_MEASURED_ON, SIMULATOR_CANNOT_LOAD

    target = build.target.to_json()
    shipped, groups = dict(final), []
    for comps in sharing_groups(build):
        if len(comps) < 2:
            continue
        names = [c.graph_name for c in comps]
        inputs = {"sources": [sha256_file(quantized[c.name]) for c in comps], "graphs": names, "target": target["accelerator"],
                  "tools": build.tool_subset(COMPILE_TOOLS), "code": code_digest()}
        with build.log.stage("compile", f"{len(comps)} graphs -> one weight-shared HTP v{target['accelerator']['htp_arch']} context"):
            r = build.cache.run("compile-shared", inputs, lambda tmp, cs=comps: compile_group([quantized[c.name] for c in cs],
                                                                                              [c.graph_name for c in cs], tmp, target))
        build.log.hit(f"compile-shared/{names[0]}", r.hit)
        for c in comps:
            shipped[c.name] = r.path / f"{c.graph_name}.onnx"
        binary = r.info["binary"]
        groups.append({
            "binary": binary, "sha256": sha256_file(r.path / binary), "size": (r.path / binary).stat().st_size,
            "graphs": names,
            "per_graph_bytes": sum(_context_bytes(final[c.name]) for c in comps),
            "verified_per_graph": {c.graph_name: {"source_sha256": src, "context_sha256": sha256_file(final[c.name])}
                                   for c, src in zip(comps, inputs["sources"])},
        })
    sharing = {"groups": groups, "load_verified": LOAD_VERIFIED, "parity_measured_on": PARITY_MEASURED_ON,
               "reason": SIMULATOR_CANNOT_LOAD}
    return shipped, sharing


def _context_bytes(ctx_model: Path) -> int:
    """An EPContext model's size with the context binaries beside it that it names."""
    from manifests.onnx_refs import named_files

    return sum((ctx_model.parent / n).stat().st_size for n in [ctx_model.name, *named_files(ctx_model)])


_COMPILE_SHARED = """
import json, sys
from pathlib import Path
from exporter.backends.qnn_share import compile_shared
a = json.loads(sys.argv[1])
try:
    compile_shared([Path(p) for p in a["sources"]], Path(a["out"]), a["graphs"], a["target"])
    print("EDGE_EXPORT_RESULT={}")
except Exception as e:
    print("EDGE_EXPORT_RESULT=" + json.dumps({"error": str(e).splitlines()[0] if str(e) else type(e).__name__}))
"""


def compile_group(sources: list[Path], graph_names: list[str], tmp: Path, target: dict) -> dict:
    """One sharing group compiled in a fresh interpreter whose working directory holds a link to each source graph's
    folder, so the graphs are opened by relative names (as `compile_one` does: the bytes depend on the sources and the
    tools, not on where the cache lives)."""
    import json
    import os
    import tempfile

    from exporter.child import child_failure, child_result, run_python

    with tempfile.TemporaryDirectory(prefix="edge-export-share-") as links:
        rel = []
        for i, src in enumerate(sources):
            os.symlink(src.parent.resolve(), Path(links) / f"g{i}")
            rel.append(f"g{i}/{src.name}")
        args = {"sources": rel, "out": str(tmp.resolve()), "graphs": graph_names, "target": target}
        p = run_python(_COMPILE_SHARED, json.dumps(args), timeout_s=None, cwd=Path(links))
    result = child_result(p)
    if result is None or "error" in result:
        raise CompileError(f"compiling the weight-shared context of {graph_names} for {target['name']} failed "
                           + child_failure(p, (result or {}).get("error")),
                           "the same graphs compiled one per context passed; rerun, and report the log if it persists")
    bins = sorted(f.name for f in tmp.iterdir() if f.suffix == ".bin")
    if len(bins) != 1:
        raise CompileError(f"the weight-shared compile of {graph_names} wrote {len(bins)} context binaries ({bins}), not one",
                           "check the onnxruntime-qnn version against the pins")
    return {"binary": bins[0], "graphs": graph_names}


# Each graph compiles in a fresh interpreter whose working directory is the source graph's, opened by its relative
# name: ONNX Runtime names the EPContext node (and, three times, the context binary) after a hash of the source model's
# path as given, and the QNN backend numbers what it builds per process. So compiled here, a graph's bytes depend on its
# source and the tools only, not on where the cache lives or which graph compiled before it (docs/NOTES.md, issue #29).
_COMPILE = """
import json, sys
from exporter.backends.qnn_stages import compile_here
print("EDGE_EXPORT_RESULT=" + json.dumps(compile_here(sys.argv[1], json.loads(sys.argv[2]), sys.argv[3])))
"""


def compile_one(src: Path, tmp: Path, graph_name: str, target: dict) -> dict:
    import json

    from exporter.child import child_failure, child_result, run_python

    ctx_path = tmp / f"{graph_name}.onnx"
    p = run_python(_COMPILE, src.name, json.dumps(target), str(ctx_path.resolve()), timeout_s=None, cwd=src.parent)
    (tmp / "compile.log").write_text(p.stdout + p.stderr)
    result = child_result(p)
    if result is None:
        raise CompileError(f"{src}: compiling {graph_name} for {target['name']} crashed in its worker process {child_failure(p)}",
                           "a worker killed by signal 9 is usually the kernel's out-of-memory killer: free memory and rerun")
    if "error" in result:
        off = result["off"]
        raise CompileError(
            f"{src}: compiling {graph_name} for {target['name']} failed"
            + (f"; nodes not supported on {target['execution_provider']}: {off[:20]}" if off else f": {result['error']}"),
            "change the recipe's graph so every node lowers to the accelerator; there is no CPU fallback",
        )
    (tmp / "compile.log").unlink()
    files = sorted(p.name for p in tmp.iterdir())
    return {"entry": ctx_path.name, "files": files}


def compile_here(src_name: str, target: dict, ctx_path: str) -> dict:
    """In the compile worker (cwd: the source graph's directory): the EPContext model and its binary at `ctx_path`, or
    {"error", "off"} naming the nodes the accelerator does not take."""
    from exporter.runtime import open_session

    try:
        open_session(src_name, target, context_out=ctx_path)
    except Exception as e:  # ORT raises its own error types; name the unplaced nodes
        try:
            _, pl = open_session(src_name, target, allow_fallback=True)
            off = pl.nodes_not_on(target["execution_provider"])
        except Exception:
            off = []
        return {"error": str(e).splitlines()[0] if str(e) else type(e).__name__, "off": off}
    return {}

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
    return Artifacts(float=fp32, quantized=quantized, final=compile_graphs(build, quantized), scheme=scheme, custom_ops=custom_ops)


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

    from exporter.child import run_python

    ctx_path = tmp / f"{graph_name}.onnx"
    p = run_python(_COMPILE, src.name, json.dumps(target), str(ctx_path.resolve()), timeout_s=None, cwd=src.parent)
    (tmp / "compile.log").write_text(p.stdout + p.stderr)
    line = next((ln for ln in reversed(p.stdout.splitlines()) if ln.startswith("EDGE_EXPORT_RESULT=")), None)
    if p.returncode != 0 or line is None:
        tail = [ln for ln in p.stderr.splitlines() if ln.strip()][-5:] or ["no output"]
        how = f"killed by signal {-p.returncode}" if p.returncode < 0 else f"exit {p.returncode}"
        raise CompileError(f"{src}: compiling {graph_name} for {target['name']} crashed in its worker process ({how}):\n    " + "\n    ".join(tail),
                           "a worker killed by signal 9 is usually the kernel's out-of-memory killer: free memory and rerun")
    result = json.loads(line[len("EDGE_EXPORT_RESULT="):])
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

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


def compile_one(src: Path, tmp: Path, graph_name: str, target: dict) -> dict:
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

"""torch -> ONNX export of recipe components (torch.onnx.export, dynamo exporter)."""

from __future__ import annotations

import contextlib
import io
import logging
import warnings
from pathlib import Path

from exporter.errors import IntegrityError
from recipes.base import Component

OPSET = 18


def load_hf_model(directory: Path, architecture: str):
    """Load a transformers model from safetensors only (memory-mapped), no remote code."""
    import torch
    import transformers

    cls = getattr(transformers, architecture)
    try:
        model, info = cls.from_pretrained(
            str(directory),
            output_loading_info=True,
            dtype=torch.float32,
            attn_implementation="eager",
            use_safetensors=True,
            trust_remote_code=False,
            local_files_only=True,
        )
    except (OSError, ValueError, RuntimeError) as e:
        raise IntegrityError(f"{directory}: cannot load the checkpoint as {architecture}: {e}", "check that the snapshot is complete and of that architecture") from None
    # transformers only warns and initialises missing tensors at random: refuse instead
    for kind in ("missing_keys", "mismatched_keys", "unexpected_keys"):
        bad = sorted(str(k) for k in info.get(kind) or [])
        if bad:
            raise IntegrityError(
                f"{directory}: checkpoint has {kind.replace('_', ' ')} for {architecture}: {bad[:5]}"
                + (f" and {len(bad) - 5} more" if len(bad) > 5 else ""),
                "use a complete snapshot of that architecture (tensor names must match transformers' names)",
            )
    return model.eval()


def external_data_files(graph: Path) -> list[str]:
    """The external data files a graph's initializers name (relative to its directory), in first-use order."""
    import onnx

    m = onnx.load(str(graph), load_external_data=False)
    locs = []
    for t in m.graph.initializer:
        if t.data_location == onnx.TensorProto.EXTERNAL:
            loc = next(e.value for e in t.external_data if e.key == "location")
            if loc not in locs:
                locs.append(loc)
    return locs


def copy_graph(src: Path, dst: Path) -> list[str]:
    """Copy an ONNX graph and its external data files to `dst` (a new name), the data files renamed after it
    (`dst.name + ".data"`) so that several graphs can share one directory; the locations in the copied graph are
    rewritten (only the small graph protobuf is rewritten, never the weights). Returns the file names written."""
    import shutil

    import onnx

    src, dst = Path(src), Path(dst)
    locs = external_data_files(src)
    if not locs:
        shutil.copy2(src, dst)
        return [dst.name]
    renamed = {loc: f"{dst.name}.data" if len(locs) == 1 else f"{dst.name}.data{i}" for i, loc in enumerate(locs)}
    for loc, new in renamed.items():
        if Path(loc).is_absolute() or ".." in Path(loc).parts:
            raise IntegrityError(f"{src}: external data location {loc!r} escapes the graph's directory", "re-export the graph")
        shutil.copy2(src.parent / loc, dst.parent / new)
    m = onnx.load(str(src), load_external_data=False)
    for t in m.graph.initializer:
        for e in t.external_data:
            if e.key == "location":
                e.value = renamed[e.value]
    onnx.save(m, str(dst))
    return [dst.name, *renamed.values()]


def example_inputs(component: Component):
    import torch

    dtypes = {"float32": torch.float32, "int32": torch.int32, "int64": torch.int64}
    return tuple(torch.zeros(s.shape, dtype=dtypes[s.dtype]) for s in component.inputs)


def _source_roots() -> list[str]:
    """Directories a source path is made relative to, longest first: this project and every import path."""
    import sys

    roots = {str(Path(__file__).resolve().parents[2])} | {str(Path(p).resolve()) for p in sys.path if p and Path(p).is_dir()}
    return sorted((r.rstrip("/") + "/" for r in roots), key=len, reverse=True)


def all_nodes(model):
    """Every node of an ONNX model: its graph's, its subgraphs' (If / Loop / Scan bodies) and its local functions'."""

    def walk(nodes):
        for n in nodes:
            yield n
            for a in n.attribute:
                yield from walk(a.g.node)
                for g in a.graphs:
                    yield from walk(g.node)

    yield from walk(model.graph.node)
    for f in model.functions:
        yield from walk(f.node)


def relative_source_paths(model) -> int:
    """Make the source paths in torch.onnx's per-node stack traces relative to their import root (exporter/models/
    qwen3.py, transformers/...): the absolute ones name the checkout and the environment, so the same graph built
    from two checkouts had different bytes. Returns the number of traces rewritten. Debug metadata only."""
    import re

    roots = _source_roots()

    def rel(m) -> str:
        path = m.group(1)
        root = next((r for r in roots if path.startswith(r)), None)
        return f'File "{path[len(root):]}"' if root else m.group(0)

    changed = 0
    for n in all_nodes(model):
        for prop in n.metadata_props:
            if prop.key.endswith("stack_trace") and 'File "/' in prop.value:
                new = re.sub(r'File "([^"]+)"', rel, prop.value)
                changed += new != prop.value
                prop.value = new
    return changed


def export_component(step_module, component: Component, out: Path, opset: int = OPSET) -> dict:
    """Export `step_module` (a static-shape wrapper) to `out/model.onnx`; returns stage info."""
    import torch

    logging.getLogger("torch.onnx").setLevel(logging.ERROR)
    path = out / "model.onnx"
    sink = io.StringIO()
    with torch.no_grad(), warnings.catch_warnings(), contextlib.redirect_stdout(sink):
        warnings.simplefilter("ignore")
        torch.onnx.export(
            step_module,
            example_inputs(component),
            str(path),
            input_names=[s.name for s in component.inputs],
            output_names=[s.name for s in component.outputs],
            dynamo=True,
            opset_version=opset,
            # weights stream to model.onnx.data: an inline save builds the whole protobuf and its serialization in
            # memory (peak about 3x the weights, bench/README.md) and cannot hold more than 2 GiB at all
            external_data=True,
            optimize=True,
        )
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    if relative_source_paths(model):
        onnx.save(model, str(path))  # the graph protobuf only: the weights stay in model.onnx.data untouched
    got_in = [i.name for i in model.graph.input]
    got_out = [o.name for o in model.graph.output]
    want_in = [s.name for s in component.inputs]
    want_out = [s.name for s in component.outputs]
    if got_in != want_in or got_out != want_out:
        raise RuntimeError(f"exported graph {component.name} has inputs {got_in} / outputs {got_out}, expected {want_in} / {want_out}")
    got_opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
    if got_opset != opset:
        # torch.onnx converts to a lower opset after export and keeps the original when the converter fails
        raise RuntimeError(f"exported graph {component.name} is at opset {got_opset}, not the requested {opset} "
                           "(torch.onnx's version conversion failed); export at an opset the graph converts to")
    return {"opset": opset, "exporter": "torch.onnx.export(dynamo=True)", "nodes": len(model.graph.node)}

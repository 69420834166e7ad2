"""Runtime loaders: open one graph of a bundle (or a build) behind one calling convention.

`open_graph(path, component, target)` returns `(runner, placement)`: `runner.run(output_names, feeds) -> [arrays]`
whatever the artifact is, an ONNX model on a target's execution provider (exporter/runtime.py: provider options, no
CPU fallback, placement recorded) or an ExecuTorch program (`.pte`) through `executorch.runtime` with exactly the
kernel libraries its manifest declares (from an allow-list: a manifest never names a module to import). The gate, the
memory probe, verify and the AI Hub replay open graphs only through here. Part of the torch-free floor: onnxruntime or
executorch is imported only when a graph of that kind is opened.
"""

from __future__ import annotations

from pathlib import Path

from exporter.errors import EdgeExportError

PROGRAM_SUFFIX = ".pte"
PROGRAM_PROVIDER = "executorch:XnnpackBackend"  # how parity records, manifests and the audit name where a program ran
# kernel libraries a program may need beyond XNNPACK and the portable kernels (executorch.kernels.quantized: 4-bit embedding)
KNOWN_KERNEL_LIBRARIES = frozenset({"executorch.kernels.quantized"})


def register_kernels(libraries) -> None:
    """Import the ExecuTorch kernel libraries a program declares; only known ones (a manifest is data, not code)."""
    import importlib

    for name in libraries:
        if name not in KNOWN_KERNEL_LIBRARIES:
            raise EdgeExportError(f"unknown ExecuTorch kernel library {name!r} in the manifest",
                                  f"edge-export registers only {sorted(KNOWN_KERNEL_LIBRARIES)}; rebuild the bundle")
        importlib.import_module(name)


class PteRunner:
    """A loaded ``forward`` with the ONNX Runtime calling convention: run(output_names, feeds) -> [numpy]."""

    def __init__(self, path: Path, input_names: list[str], output_names: list[str], kernel_libraries=()):
        from executorch.runtime import Runtime, Verification

        register_kernels(kernel_libraries)
        self.program = Runtime.get().load_program(Path(path), verification=Verification.InternalConsistency)
        self.method = self.program.load_method("forward")
        self.inputs, self.outputs = list(input_names), list(output_names)

    def run(self, output_names, feeds: dict) -> list:
        import numpy as np
        import torch

        missing = [n for n in self.inputs if n not in feeds]
        if missing:
            raise ValueError(f"missing inputs {missing}")
        outs = self.method.execute([torch.from_numpy(np.ascontiguousarray(feeds[n])) for n in self.inputs])
        by_name = dict(zip(self.outputs, outs))
        return [by_name[n].numpy() for n in (output_names or self.outputs)]


def is_program(path: str | Path) -> bool:
    return Path(path).suffix == PROGRAM_SUFFIX


def provider_of(path: str | Path, target: dict) -> str:
    """Where a graph of this kind runs, as parity records name it."""
    return PROGRAM_PROVIDER if is_program(path) else target["execution_provider"]


def open_graph(path: str | Path, component: dict, target: dict, *, custom_ops: tuple = (), provider_options: dict | None = None,
               threads: int = 1, allow_fallback: bool = False, context_out: str | Path | None = None):
    """(runner, placement) of one graph; placement is None for a program (its delegation is known from its lowering)."""
    if is_program(path):
        names = [t["name"] if isinstance(t, dict) else t for t in component["outputs"]]
        return PteRunner(Path(path), [t["name"] for t in component["inputs"]], names, component.get("kernel_libraries", ())), None
    from exporter.runtime import open_session

    return open_session(path, target, custom_ops=custom_ops, provider_options=provider_options, threads=threads,
                        allow_fallback=allow_fallback, context_out=context_out)


def open_graphs(paths: dict[str, Path], components: list[dict], target: dict, custom_ops: tuple = ()) -> tuple[dict, dict]:
    """Runners and placements of several graphs, by component name."""
    specs = {c["name"]: c for c in components}
    runners, placement = {}, {}
    for name, p in paths.items():
        runner, pl = open_graph(p, specs.get(name, {"inputs": [], "outputs": []}), target, custom_ops=custom_ops)
        runners[name] = runner
        if pl is not None:
            placement[name] = pl
    return runners, placement

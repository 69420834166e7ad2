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


def graph_bytes_on_disk(path: str | Path) -> int:
    """The bytes of a graph and its external data (every file of its directory: a build's graph directory holds one
    graph), the measure of what a session of it holds."""
    d = Path(path).parent
    return sum(f.stat().st_size for f in d.iterdir() if f.is_file())


def open_graphs(paths: dict[str, Path], components: list[dict], target: dict, custom_ops: tuple = (),
                budget_bytes: int | None = None) -> tuple[dict, dict]:
    """Runners and placements of several graphs, by component name. With `budget_bytes` below the graphs' total, the
    runners open their sessions when first run and close the least recently used ones to stay within it
    (`BoundedRunners`); the placements are then those of every graph opened once, in turn."""
    specs = {c["name"]: c for c in components}
    if budget_bytes is not None and sum(graph_bytes_on_disk(p) for p in paths.values()) > budget_bytes:
        runners = BoundedRunners(paths, specs, target, custom_ops, budget_bytes)
        return runners, runners.placements()
    runners, placement = {}, {}
    for name, p in paths.items():
        runner, pl = open_graph(p, specs.get(name, {"inputs": [], "outputs": []}), target, custom_ops=custom_ops)
        runners[name] = runner
        if pl is not None:
            placement[name] = pl
    return runners, placement


class BoundedRunners:
    """A mapping of component name -> runner whose sessions together hold at most `budget_bytes` of graph files (a
    single graph larger than the budget is opened alone). A runner opens its session on its first `run` after it was
    closed; the least recently run sessions close first. Results are those of sessions opened once each: opening a
    graph again gives the same session configuration (the stats say how often that happened)."""

    bounded = True  # a driver that can run one graph level at a time should (verify/split_lm_driver.teacher_forced_by_parts)

    def __init__(self, paths: dict[str, Path], specs: dict, target: dict, custom_ops: tuple, budget_bytes: int):
        from collections import OrderedDict

        self.paths, self.specs, self.target, self.custom_ops, self.budget = dict(paths), specs, target, custom_ops, budget_bytes
        self.size = {n: graph_bytes_on_disk(p) for n, p in self.paths.items()}
        self._open: OrderedDict[str, object] = OrderedDict()
        self.opens = 0
        self.peak_open_bytes = 0
        self._placement: dict = {}

    def _runner(self, name: str):
        if name in self._open:
            self._open.move_to_end(name)
            return self._open[name]
        while self._open and sum(self.size[n] for n in self._open) + self.size[name] > self.budget:
            self._open.popitem(last=False)  # the session (and its copy of the weights) goes with its last reference
        runner, pl = open_graph(self.paths[name], self.specs.get(name, {"inputs": [], "outputs": []}), self.target, custom_ops=self.custom_ops)
        self.opens += 1
        if pl is not None:
            self._placement[name] = pl
        self._open[name] = runner
        self.peak_open_bytes = max(self.peak_open_bytes, sum(self.size[n] for n in self._open))
        return runner

    def placements(self) -> dict:
        """The placement of every graph (each opened in turn where it has not been yet); no session stays open after it
        (the caller's reference may need the memory before the first run)."""
        for name in self.paths:
            if name not in self._placement:
                self._runner(name)
        self.close()
        return dict(self._placement)

    def close(self) -> None:
        self._open.clear()

    def __getitem__(self, name: str):
        if name not in self.paths:
            raise KeyError(name)
        return _Lazy(self, name)

    def __contains__(self, name) -> bool:
        return name in self.paths

    def __iter__(self):
        return iter(self.paths)

    def __len__(self) -> int:
        return len(self.paths)

    def keys(self):
        return self.paths.keys()


class _Lazy:
    def __init__(self, owner: BoundedRunners, name: str):
        self.owner, self.name = owner, name

    def run(self, output_names, feeds: dict) -> list:
        return self.owner._runner(self.name).run(output_names, feeds)

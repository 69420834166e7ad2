"""A transformers model whose weights stay in the checkpoint until a part asks for them.

The model is built on the meta device (no weight memory); `holding(names)` reads exactly those tensors from the
checkpoint's safetensors (memory-mapped; one shard open at a time), converts them to float32 and puts them into the
modules, and drops them again on exit. A step module of a layer-range part is built over the modules of that range,
so exporting it holds that part's tensors and nothing else. `stream()` makes the whole model runnable with the same
bound: every block (embedding, each decoder layer, final norm, head) fetches its tensors just before it runs and drops
them after (the reference's forward and `generate` go through it). With `keep_bytes`, tensors no part holds any more
stay resident, least recently used first out, while everything in memory stays within that many bytes: a budget at
least the model's size reads each tensor once, a smaller one bounds the reference at the cost of reading again.

Refuses what `from_pretrained` would silently accept: a tensor missing from the checkpoint, a tensor of no parameter,
a shape that differs, a NaN or Inf value (checked as each tensor is read, named).
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from exporter.errors import IntegrityError
from exporter.heap import HeapWatch
from exporter.weights import count_non_finite


@dataclass
class HeldStats:
    """What the model holds now and the most it held at once (tensors and bytes of float32 weights)."""

    tensors: int = 0
    bytes: int = 0
    peak_tensors: int = 0
    peak_bytes: int = 0
    reads: int = 0  # tensors read from the checkpoint so far (a tensor read twice counts twice)


def _shards(directory: Path) -> dict[str, str]:
    """tensor name -> safetensors file, from the shard index or the single file."""
    from safetensors import safe_open

    index = directory / "model.safetensors.index.json"
    if index.is_file():
        return dict(json.loads(index.read_text())["weight_map"])
    out = {}
    for f in sorted(directory.glob("*.safetensors")):
        with safe_open(str(f), framework="pt") as st:
            out.update(dict.fromkeys(st.keys(), f.name))
    return out


class StreamedModel:
    def __init__(self, directory: Path, architecture: str, keep_bytes: int = 0):
        import transformers
        from collections import OrderedDict

        self.directory = Path(directory)
        cls = getattr(transformers, architecture)
        config = cls.config_class.from_pretrained(str(self.directory), local_files_only=True)
        config._attn_implementation = "eager"
        with torch.device("meta"):
            model = cls(config)
        self.model = model.eval()
        self._real_buffers()
        self.files = _shards(self.directory)
        # parameters by identity: a tied pair (lm_head.weight and the embedding) is one tensor under several names
        self._aliases: dict[str, list[str]] = {}
        for name, p in self.model.named_parameters(remove_duplicate=False):
            self._aliases.setdefault(id(p), []).append(name)
        self._groups = list(self._aliases.values())
        self._key_of: dict[str, str] = {}  # parameter name -> checkpoint key holding it
        self._check_layout()
        self._names_of: dict[str, list[str]] = {}
        for n, k in self._key_of.items():
            self._names_of.setdefault(k, []).append(n)
        self._shape = {k: tuple(self.model.get_parameter(names[0]).shape) for k, names in self._names_of.items()}
        self._numel = {k: int(torch.Size(shape).numel()) for k, shape in self._shape.items()}
        self.stats = HeldStats()
        self._held: dict[str, int] = {}  # checkpoint key -> hold count
        self._resident: OrderedDict[str, None] = OrderedDict()  # read, held by no part, kept (least recently used first)
        self.keep_bytes = keep_bytes
        self._checked: set[str] = set()  # keys whose values were checked finite
        self._owner_cache: dict[str, list[tuple[nn.Module, str]]] = {}
        self._meta: dict[str, list[nn.Parameter]] = {}
        self._heap = HeapWatch()  # the freed heap of streaming (matmul buffers between KV growth) goes back as it grows

    # -- layout -----------------------------------------------------------------------------------------------------
    def _real_buffers(self) -> None:
        """Non-persistent buffers (rotary frequencies, embedding scales) are computed from the config, not stored: give
        them real storage and let the model's own initialiser compute them, as `from_pretrained` does."""
        owners = []
        for mod_name, mod in self.model.named_modules():
            for b in list(mod._non_persistent_buffers_set):
                buf = mod._buffers.get(b)
                if buf is not None and buf.is_meta:
                    mod._buffers[b] = torch.empty_like(buf, device="cpu")
                    owners.append(mod)
        for mod in dict.fromkeys(owners):
            self.model._init_weights(mod)
        bad = [n for n, b in self.model.named_buffers() if b.is_meta]
        if bad:
            raise IntegrityError(f"{self.directory}: buffers the model does not compute from its config: {bad[:5]}",
                                 "this architecture stores buffers in its checkpoint: build it whole (no streamed loading)")

    def _check_layout(self) -> None:
        from safetensors import safe_open

        keys = set(self.files)
        missing, shapes = [], []
        for names in self._groups:
            present = [n for n in names if n in keys]
            if not present:
                missing.append(names[0])
                continue
            for n in names:
                self._key_of[n] = present[0]
        unexpected = sorted(keys - set(self._key_of.values()))
        by_file: dict[str, list[str]] = {}
        for n, k in self._key_of.items():
            by_file.setdefault(self.files[k], []).append(n)
        for f, names in by_file.items():
            with safe_open(str(self.directory / f), framework="pt") as st:
                for n in names:
                    want = tuple(self.model.get_parameter(n).shape)
                    got = tuple(st.get_slice(self._key_of[n]).get_shape())
                    if got != want:
                        shapes.append(f"{n}: {list(got)} in the checkpoint, {list(want)} in the model")
        for kind, bad in (("missing", missing), ("unexpected", unexpected), ("mismatched", shapes)):
            if bad:
                raise IntegrityError(f"{self.directory}: checkpoint has {kind} tensors for {type(self.model).__name__}: {bad[:5]}"
                                     + (f" and {len(bad) - 5} more" if len(bad) > 5 else ""),
                                     "use a complete snapshot of that architecture (tensor names must match transformers' names)")

    def names_under(self, *prefixes: str) -> list[str]:
        """The parameter names under module prefixes ("model.layers.3.", "lm_head.")."""
        return [n for n, _ in self.model.named_parameters(remove_duplicate=False) if n.startswith(prefixes)]

    def names_used_by(self, module: nn.Module) -> list[str]:
        """The model's parameter names behind every parameter `module` reaches (a step module built over this model)."""
        ids = {id(p) for p in module.parameters()}
        return [n for n, p in self.model.named_parameters(remove_duplicate=False) if id(p) in ids]

    def part_bytes(self, names) -> int:
        """Float32 bytes of the tensors behind `names` (a tied tensor once)."""
        return sum(4 * self._numel[k] for k in {self._key_of[n] for n in names})

    # -- holding tensors --------------------------------------------------------------------------------------------
    def _owners(self, key: str) -> list[tuple[nn.Module, str]]:
        """(module, attribute) of every parameter name behind `key` (looked up once: the streamed reference sets each
        tensor again on every pass)."""
        if key not in self._owner_cache:
            self._owner_cache[key] = [(self.model.get_submodule(m), a) for m, _, a in (n.rpartition(".") for n in self._names_of[key])]
        return self._owner_cache[key]

    def _set(self, key: str, value: torch.Tensor) -> None:
        for mod, attr in self._owners(key):
            mod._parameters[attr] = nn.Parameter(value, requires_grad=False)

    def _unset(self, key: str) -> None:
        """Back to the meta device (the same placeholder parameters every time a tensor is dropped)."""
        if key not in self._meta:
            empty = torch.empty(self._shape[key], dtype=torch.float32, device="meta")
            self._meta[key] = [nn.Parameter(empty, requires_grad=False) for _ in self._owners(key)]
        for (mod, attr), param in zip(self._owners(key), self._meta[key]):
            mod._parameters[attr] = param

    def _read(self, keys: list[str]) -> None:
        from safetensors import safe_open

        by_file: dict[str, list[str]] = {}
        for k in keys:
            by_file.setdefault(self.files[k], []).append(k)
        for f, ks in by_file.items():
            with safe_open(str(self.directory / f), framework="pt") as st:
                for k in ks:
                    t = st.get_tensor(k).to(torch.float32)
                    # checked on its first read; a reread (the reference evicts and reads again) is the same pinned bytes
                    bad = 0 if k in self._checked else count_non_finite(t)
                    if bad:
                        raise IntegrityError(f"{self.directory / f}: non-finite (NaN or Inf) weights in {k} ({bad} of {t.numel()})",
                                             "the checkpoint is damaged or diverged in training: use a good snapshot (its pin names the digests)")
                    self._checked.add(k)
                    self._set(k, t)
                    self.stats.reads += 1
                    self.stats.tensors += 1
                    self.stats.bytes += self._numel[k] * 4
        self.stats.peak_tensors = max(self.stats.peak_tensors, self.stats.tensors)
        self.stats.peak_bytes = max(self.stats.peak_bytes, self.stats.bytes)

    def acquire(self, names) -> None:
        keys = list(dict.fromkeys(self._key_of[n] for n in names))
        new = [k for k in keys if not self._held.get(k) and k not in self._resident]
        for k in keys:
            self._resident.pop(k, None)
            self._held[k] = self._held.get(k, 0) + 1
        if new:
            self._evict(sum(4 * self._numel[k] for k in new))
            self._read(new)

    def release(self, names) -> None:
        for k in dict.fromkeys(self._key_of[n] for n in names):
            self._held[k] -= 1
            if self._held[k] == 0:
                del self._held[k]
                self._resident[k] = None
        self._evict(0)
        self._heap.check()

    def _evict(self, incoming: int) -> None:
        """Drop unheld tensors, least recently used first, until what stays plus `incoming` fits `keep_bytes`."""
        while self._resident and self.stats.bytes + incoming > self.keep_bytes:
            k, _ = self._resident.popitem(last=False)
            self.stats.tensors -= 1
            self.stats.bytes -= self._numel[k] * 4
            self._unset(k)

    def drop_resident(self) -> None:
        """Drop every tensor no part holds (what `keep_bytes` kept), e.g. before a verify level opens its sessions."""
        keep, self.keep_bytes = self.keep_bytes, 0
        try:
            self._evict(0)
        finally:
            self.keep_bytes = keep

    @contextlib.contextmanager
    def holding(self, names):
        names = list(names)
        self.acquire(names)
        try:
            yield self.model
        finally:
            self.release(names)

    def hold_all(self) -> nn.Module:
        """Every tensor, held until the model is dropped: the whole model, as `from_pretrained` gives it."""
        self.acquire(list(self._key_of))
        return self.model

    # -- running the whole model one block at a time ----------------------------------------------------------------
    def blocks(self) -> list[tuple[nn.Module, list[str]]]:
        """(module, parameter names) of each block that fetches its own tensors while streaming: every decoder layer
        (with everything inside it), and every other module that directly owns parameters (embedding, final norm, head)."""
        layers = self.model.model.layers
        qual = {id(m): n for n, m in self.model.named_modules()}
        inside = {id(m) for layer in layers for m in layer.modules()}
        out = [(m, [f"{qual[id(m)]}.{p}" for p in m._parameters if m._parameters[p] is not None])
               for m in self.model.modules() if id(m) not in inside and any(v is not None for v in m._parameters.values())]
        out += [(layer, self.names_under(qual[id(layer)] + ".")) for layer in layers]
        return out

    @contextlib.contextmanager
    def stream(self):
        """While inside, any forward of the model (a full forward, `generate`) holds one block's tensors at a time."""
        handles = []
        for block, names in self.blocks():
            handles.append(block.register_forward_pre_hook(lambda m, a, names=names: self.acquire(names)))
            handles.append(block.register_forward_hook(lambda m, a, o, names=names: self.release(names)))
        try:
            yield self.model
        finally:
            for h in handles:
                h.remove()

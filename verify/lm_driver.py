"""A reference generation loop that drives exported LM graphs from the manifest alone.

It knows nothing of torch or of our exporter: it reads each component's tensor
specs and the state layout written in ``manifest.json`` and follows them
(allocate the KV buffers, build masks and positions, call prefill in AR chunks,
write the new rows in, decode one token at a time). A runtime team can read this
file as the executable form of the state contract.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Protocol

import numpy as np

from verify.sampler import prefill_then_decode


class Runner(Protocol):
    def run(self, output_names, feeds: dict) -> list: ...


@dataclass
class GraphSpec:
    role: str
    ar: int
    context: int
    inputs: dict[str, tuple[str, list[int]]]
    outputs: list[str]

    @classmethod
    def from_manifest_component(cls, comp: dict) -> "GraphSpec":
        b = comp["bucket"]
        return cls(
            role=comp["role"],
            ar=b["ar"],
            context=b["context"],
            inputs={t["name"]: (t["dtype"], t["shape"]) for t in comp["inputs"]},
            outputs=[t["name"] for t in comp["outputs"]],
        )


@dataclass
class KVState:
    """The runtime-owned KV buffers of the state layout, and the fill level."""

    layout: dict
    buffers: dict[str, np.ndarray] = field(default_factory=dict)
    n_past: int = 0

    def __post_init__(self):
        for b in self.layout["buffers"]:
            self.buffers[b["name"]] = np.zeros(b["shape"], dtype=np.dtype(self.layout["dtype"]))

    @property
    def context(self) -> int:
        return self.layout["buffers"][0]["shape"][self.layout["buffers"][0]["time_axis"]]

    def reset(self) -> None:
        self.n_past = 0

    def feeds(self, graph: GraphSpec) -> dict[str, np.ndarray]:
        past = graph.context - graph.ar
        out = {}
        for b in self.layout["buffers"]:
            name = f"past_{b['role']}_{b['layer']}"
            out[name] = np.ascontiguousarray(self.buffers[b["name"]][:, :, :past, :])
        return out

    def write(self, new: dict[str, np.ndarray], n_valid: int) -> None:
        for b in self.layout["buffers"]:
            rows = new[f"new_{b['role']}_{b['layer']}"][:, :, :n_valid, :]
            self.buffers[b["name"]][:, :, self.n_past : self.n_past + n_valid, :] = rows
        self.n_past += n_valid


def build_mask(graph: GraphSpec, n_past: int, hidden: float, visible: float) -> np.ndarray:
    mask = np.full((1, 1, graph.ar, graph.context), hidden, dtype=np.float32)
    mask[:, :, :, :n_past] = visible
    base = graph.context - graph.ar
    for j in range(graph.ar):
        mask[0, 0, j, base : base + j + 1] = visible
    return mask


def step_feeds(graph: GraphSpec, state: KVState, tokens: list[int]) -> dict[str, np.ndarray]:
    """Inputs of one call carrying `tokens` (len <= AR) at the state's current position."""
    n = len(tokens)
    if not 0 < n <= graph.ar:
        raise ValueError(f"a call carries 1..{graph.ar} tokens, got {n}")
    if state.n_past > graph.context - graph.ar or state.n_past + n > graph.context:
        raise ValueError(f"context full: n_past={state.n_past}, {n} new tokens, context={graph.context}")
    m = state.layout["mask"]
    ids = np.zeros((1, graph.ar), dtype=np.int32)
    ids[0, :n] = tokens
    pos = np.full((1, graph.ar), state.n_past + n - 1, dtype=np.int32)
    pos[0, :n] = np.arange(state.n_past, state.n_past + n)
    feeds = {"input_ids": ids, "position_ids": pos, "attention_mask": build_mask(graph, state.n_past, m["value_hidden"], m["value_visible"])}
    feeds.update(state.feeds(graph))
    return feeds


@dataclass
class StepRecord:
    component: str
    n_past: int
    n_valid: int
    feeds: dict[str, np.ndarray]
    outputs: dict[str, np.ndarray]


def call(runner: Runner, graph: GraphSpec, state: KVState, tokens: list[int], name: str,
         on_step: Callable[[StepRecord], None] | None = None) -> np.ndarray:
    """One call carrying `tokens`: run the graph, write the new KV rows, return the last real token's logits."""
    n_past = state.n_past
    feeds = step_feeds(graph, state, tokens)
    values = dict(zip(graph.outputs, runner.run(graph.outputs, feeds)))
    state.write(values, len(tokens))
    if on_step:
        on_step(StepRecord(name, n_past, len(tokens), feeds, values))
    return values["logits"][0, len(tokens) - 1]


def generate(
    runners: dict[str, Runner],
    graphs: dict[str, GraphSpec],
    layout: dict,
    prompt: list[int],
    steps: int,
    forced: list[int] | None = None,
    on_step: Callable[[StepRecord], None] | None = None,
) -> tuple[list[int], list[np.ndarray]]:
    """Greedy generation: prefill the prompt in AR chunks, then decode `steps` tokens.

    With `forced` (teacher forcing), the token fed back at each step is forced[i]
    instead of the graph's own argmax; the argmax is still what is returned.
    Returns the greedy tokens and the last-position logits of every step.
    """
    state = KVState(layout)
    pre, dec = graphs["prefill"], graphs["decode"]
    return prefill_then_decode(prompt, pre.ar, lambda chunk: call(runners["prefill"], pre, state, chunk, "prefill", on_step),
                               lambda tok: call(runners["decode"], dec, state, [tok], "decode", on_step), steps, forced)

"""A reference generation loop for split LM graphs with ring and full KV, driven by the manifest alone.

State layout kind ``kv-ring+full`` (recipes/spark.py writes it): an embedding graph per
AR, decoder-stack graphs per (role, AR, context) possibly cut into layer-range parts, and
one head graph. This module follows the layout's prose rules literally: bucket selection,
ring writes and wrap, global-buffer growth on a bucket transition, masks, positions,
padding. It imports neither torch nor the exporter; a runtime team can read it as the
executable form of the contract.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from verify.sampler import greedy, prefill_then_decode

from verify.lm_driver import Runner, StepRecord


@dataclass
class GraphSpec:
    name: str
    role: str
    ar: int
    context: int
    inputs: dict[str, tuple[str, list[int]]]
    outputs: list[str]
    layers: tuple[int, int] | None = None
    part: tuple[int, int] = (1, 1)

    @classmethod
    def from_manifest_component(cls, comp: dict) -> "GraphSpec":
        b = comp["bucket"]
        return cls(
            name=comp["name"], role=comp["role"], ar=b["ar"], context=b["context"],
            inputs={t["name"]: (t["dtype"], t["shape"]) for t in comp["inputs"]},
            outputs=[t["name"] for t in comp["outputs"]],
            layers=tuple(comp["layers"]) if comp.get("layers") else None,
            part=tuple(comp.get("part") or (1, 1)),
        )


def choose_context(contexts: list[int], n_past: int, n: int, ar: int) -> int:
    """The layout's bucket rule: the smallest context that takes `n` more tokens after `n_past` in a call of `ar` slots."""
    for c in contexts:
        if n_past + n <= c and n_past <= c - ar:
            return c
    raise ValueError(f"sequence full: n_past={n_past} + {n} exceeds the largest bucket {contexts[-1]}")


@dataclass
class RingFullState:
    """The KV state of one sequence; with `layers` (start, end), only those layers' buffers (one part's state)."""

    layout: dict
    n_past: int = 0
    context: int = 0
    ring: dict[str, np.ndarray] = field(default_factory=dict)
    full: dict[str, np.ndarray] = field(default_factory=dict)
    layers: tuple[int, int] | None = None

    def __post_init__(self):
        self.reset()

    def _buffers(self, kind: str | None = None) -> list[dict]:
        """The layout's buffers (of `kind`) this state holds, in the layout's order."""
        lo, hi = self.layers or (0, 1 << 30)
        return [b for b in self.layout["buffers"] if kind in (None, b["kind"]) and lo <= b["layer"] < hi]

    def reset(self) -> None:
        dt = np.dtype(self.layout["dtype"])
        self.n_past = 0
        self.context = self.layout["contexts"][0]
        self.ring = {b["name"]: np.zeros(b["shape"], dt) for b in self._buffers("ring")}
        self.full = {b["name"]: np.zeros(b["shape_by_context"][str(self.context)], dt) for b in self._buffers("full")}

    def select(self, n: int, ar: int) -> int:
        """The smallest context that takes `n` more tokens in a call with `ar` slots (moves state there)."""
        c = choose_context(self.layout["contexts"], self.n_past, n, ar)
        if c != self.context:
            self.grow(c)
        return c

    def grow(self, c: int) -> None:
        if c < self.context:
            raise ValueError("state only moves to a larger bucket; reset to start over")
        for b in self._buffers("full"):
            new = np.zeros(b["shape_by_context"][str(c)], self.full[b["name"]].dtype)
            new[:, :, : self.n_past] = self.full[b["name"]][:, :, : self.n_past]
            self.full[b["name"]] = new
        self.context = c

    def slot_positions(self) -> np.ndarray:
        """Position held by each ring slot (-1: empty), per the layout's ring_slot_position rule."""
        w = self.layout["window"]
        s = np.arange(w)
        if self.n_past == 0 or w == 0:
            return np.full(w, -1)
        p = self.n_past - 1 - ((self.n_past - 1 - s) % w)
        return np.where(p >= 0, p, -1)

    def past_feeds(self, g: GraphSpec) -> dict[str, np.ndarray]:
        out = {}
        for b in self._buffers():
            i = b["layer"]
            if g.layers and not (g.layers[0] <= i < g.layers[1]):
                continue
            name = f"past_{b['role']}_{i}"
            if b["kind"] == "ring":
                out[name] = self.ring[b["name"]]
            else:
                out[name] = np.ascontiguousarray(self.full[b["name"]][:, :, : g.context - g.ar])
        return out

    def write(self, new: dict[str, np.ndarray], layers: tuple[int, int], n_valid: int) -> None:
        w = self.layout["window"]
        for b in self._buffers():
            i = b["layer"]
            if not (layers[0] <= i < layers[1]):
                continue
            rows = new[f"new_{b['role']}_{i}"]
            for j in range(n_valid):
                if b["kind"] == "ring":
                    self.ring[b["name"]][:, :, (self.n_past + j) % w] = rows[:, :, j]
                else:
                    self.full[b["name"]][:, :, self.n_past + j] = rows[:, :, j]


def masks(state: RingFullState, ar: int, context: int, n: int) -> dict[str, np.ndarray]:
    m = state.layout["mask"]
    hidden, visible = m["value_hidden"], m["value_visible"]
    w = state.layout["window"]
    pos = state.slot_positions()
    sliding = np.full((1, 1, ar, w + ar), hidden, np.float32)
    full = np.full((1, 1, ar, context), hidden, np.float32)
    full[:, :, :, : state.n_past] = visible
    for j in range(ar):
        p = state.n_past + min(j, n - 1)
        ok = (pos >= 0) & (p - pos < w)
        sliding[0, 0, j, :w][ok] = visible
        sliding[0, 0, j, w : w + j + 1] = visible
        full[0, 0, j, context - ar : context - ar + j + 1] = visible
    return {"mask_sliding": sliding, "mask_global": full}


def _graphs_for(graphs: dict[str, GraphSpec], role: str, ar: int, context: int) -> list[GraphSpec]:
    parts = sorted((g for g in graphs.values() if g.role == role and g.ar == ar and g.context == context), key=lambda g: g.part[0])
    if not parts or len(parts) != parts[0].part[1]:
        raise ValueError(f"manifest has no complete {role} graph for AR {ar}, context {context}")
    return parts


def call(runners: dict[str, Runner], graphs: dict[str, GraphSpec], state: RingFullState, tokens: list[int], role: str,
         on_step: Callable[[StepRecord], None] | None = None, inject: dict[int, np.ndarray] | None = None) -> np.ndarray:
    """One call of `tokens` (prefill chunk or one decode token); returns the last real token's logits.

    `inject` maps absolute positions to embedding rows that replace the embedding graph's rows there
    (the layout's ``inject`` rule: image, audio or condition rows at placeholder positions)."""
    ar = max(g.ar for g in graphs.values() if g.role == role)
    n = len(tokens)
    if not 0 < n <= ar:
        raise ValueError(f"a {role} call carries 1..{ar} tokens, got {n}")
    context = state.select(n, ar)
    n_past = state.n_past

    def run(g: GraphSpec, feeds: dict) -> dict[str, np.ndarray]:
        feeds = {k: v for k, v in feeds.items() if k in g.inputs}
        out = dict(zip(g.outputs, runners[g.name].run(g.outputs, feeds)))
        if on_step:
            on_step(StepRecord(g.name, n_past, n, feeds, out))
        return out

    ids = np.zeros((1, ar), np.int32)
    ids[0, :n] = tokens
    embed = next(g for g in graphs.values() if g.role == "embedding" and g.ar == ar)
    hidden = run(embed, {"input_ids": ids})["hidden"]
    if inject:
        hidden = hidden.copy()
        for j in range(n):
            if n_past + j in inject:
                hidden[0, j] = inject[n_past + j]
    pos = np.full((1, ar), n_past + n - 1, np.int32)
    pos[0, :n] = np.arange(n_past, n_past + n)
    common = {"position_ids": pos, **masks(state, ar, context, n)}
    for g in _graphs_for(graphs, role, ar, context):
        out = run(g, {"hidden": hidden, **common, **state.past_feeds(g)})
        state.write(out, g.layers, n)
        hidden = out["hidden_out"]
    state.n_past += n
    head = next(g for g in graphs.values() if g.role == "head")
    return run(head, {"hidden": np.ascontiguousarray(hidden[:, n - 1 : n])})["logits"][0, 0]


def placeholder_prompt(prefix: list[int], rows, suffix: list[int], placeholder: int) -> tuple[list[int], dict[int, np.ndarray]]:
    """Tokens with one placeholder per encoder row between `prefix` and `suffix`, and the position -> row map
    that generate()/call() take as `inject` (the layout's ``inject`` rule)."""
    tokens = list(prefix) + [placeholder] * len(rows) + list(suffix)
    return tokens, {len(prefix) + i: np.asarray(r, np.float32) for i, r in enumerate(rows)}


def generate(
    runners: dict[str, Runner],
    graphs: dict[str, GraphSpec],
    layout: dict,
    prompt: list[int],
    steps: int,
    forced: list[int] | None = None,
    on_step: Callable[[StepRecord], None] | None = None,
    inject: dict[int, np.ndarray] | None = None,
) -> tuple[list[int], list[np.ndarray]]:
    """Greedy generation, as verify.lm_driver.generate, across bucket transitions; `inject` as in call()."""
    state = RingFullState(layout)
    ar = max(g.ar for g in graphs.values() if g.role == "prefill")
    return prefill_then_decode(prompt, ar, lambda chunk: call(runners, graphs, state, chunk, "prefill", on_step, inject),
                               lambda tok: call(runners, graphs, state, [tok], "decode", on_step), steps, forced)


@dataclass
class ForcedRun:
    """One teacher-forced run: `prompt` prefilled, then forced[:steps - 1] decoded; `on_step` sees its calls."""

    prompt: list[int]
    forced: list[int]
    steps: int
    inject: dict | None = None
    on_step: Callable[[StepRecord], None] | None = None


def teacher_forced_by_parts(runners: dict[str, Runner], graphs: dict[str, GraphSpec], layout: dict,
                            runs: list[ForcedRun], on_level_end: Callable[[], None] | None = None) -> list[tuple[list[int], list[np.ndarray]]] | None:
    """Every run's (argmax tokens, logits of every step), exactly what `generate(..., forced=run.forced)` returns for
    each, computed one graph level at a time: the embedding of every call of every run, then stack part 1 of every
    call, ..., then the head. A part's KV state depends only on its own inputs, so each level replays the runs with
    its own state (that part's layers only). Within a level the calls are grouped by graph: every run's calls of one
    graph (prefill, or decode in one bucket) run together, each run's calls in its own order with its state kept
    between groups, so each graph's session opens once per level even when the budget holds one graph (a prefill and
    a decode graph of a part no longer alternate per run). `on_level_end` runs after each level's last call (verify
    closes the level's sessions there and checks its calls against the reference). None where the buckets are cut
    into different numbers of parts or a part index covers different layers in different buckets (then use
    `generate`)."""
    counts = {len(_graphs_for(graphs, g.role, g.ar, g.context)) for g in graphs.values() if g.role in ("prefill", "decode")}
    if len(counts) != 1:
        return None
    (n_parts,) = counts
    part_layers = [{g.layers for g in graphs.values() if g.role in ("prefill", "decode") and g.part[0] == k + 1} for k in range(n_parts)]
    if any(len(ls) != 1 for ls in part_layers):
        return None
    ars = {role: max(g.ar for g in graphs.values() if g.role == role) for role in ("prefill", "decode")}
    schedules = []  # per run: [(role, tokens, ar, context, n_past)], the bucket rule applied as RingFullState.select does
    for r in runs:
        calls = [("prefill", r.prompt[i : i + ars["prefill"]]) for i in range(0, len(r.prompt), ars["prefill"])]
        calls += [("decode", [t]) for t in r.forced[: r.steps - 1]]
        n_past, sched = 0, []
        for role, tokens in calls:
            ar = ars[role]
            sched.append((role, tokens, ar, choose_context(layout["contexts"], n_past, len(tokens), ar), n_past))
            n_past += len(tokens)
        schedules.append(sched)

    # the graph a level runs a call on, as a key that every run meets in increasing order (contexts only grow, a
    # prompt's prefill comes before its decodes): a stack part's graph is per (context, role), the embedding's per
    # role (its AR), the head is one graph
    def by_bucket(call) -> tuple:
        role, _, _, context, _ = call
        return context, role != "prefill"

    def by_role(call) -> tuple:
        return (call[0] != "prefill",)

    def replay(level, graph_of, layers=None):
        """Run `level(run, state, call index, role, tokens, ar, context, n_past)` over every call of every run, grouped
        by graph: the smallest graph any run waits on next runs for every run waiting on it, each run's calls in its
        own order, so no graph is needed again after its group and each session opens once per level. Each run has a
        fresh state (of `layers`) that follows the bucket rules."""
        states = [RingFullState(layout, layers=layers or (0, 0)) for _ in schedules]
        done = [0] * len(schedules)
        while True:
            waiting: dict[tuple, list[int]] = {}  # graph -> runs whose next call uses it
            for ri, sched in enumerate(schedules):
                if done[ri] < len(sched):
                    waiting.setdefault(graph_of(sched[done[ri]]), []).append(ri)
            if not waiting:
                break
            key = min(waiting)
            for ri in waiting[key]:
                state, sched = states[ri], schedules[ri]
                while done[ri] < len(sched) and graph_of(sched[done[ri]]) == key:
                    role, tokens, ar, context, n_past = sched[done[ri]]
                    chosen = state.select(len(tokens), ar)  # moves the state to its bucket: never inside an assert
                    assert state.n_past == n_past and chosen == context
                    level(ri, state, done[ri], role, tokens, ar, context, n_past)
                    state.n_past += len(tokens)
                    done[ri] += 1
        if on_level_end:
            on_level_end()

    def run(r: ForcedRun, g: GraphSpec, feeds: dict, n_past: int, n: int) -> dict[str, np.ndarray]:
        feeds = {k: v for k, v in feeds.items() if k in g.inputs}
        out = dict(zip(g.outputs, runners[g.name].run(g.outputs, feeds)))
        if r.on_step:
            r.on_step(StepRecord(g.name, n_past, n, feeds, out))
        return out

    hidden: dict[tuple[int, int], np.ndarray] = {}

    def embed(ri, state, ci, role, tokens, ar, context, n_past):
        ids = np.zeros((1, ar), np.int32)
        ids[0, : len(tokens)] = tokens
        g = next(x for x in graphs.values() if x.role == "embedding" and x.ar == ar)
        h = run(runs[ri], g, {"input_ids": ids}, n_past, len(tokens))["hidden"]
        if runs[ri].inject:
            h = h.copy()
            for j in range(len(tokens)):
                if n_past + j in runs[ri].inject:
                    h[0, j] = runs[ri].inject[n_past + j]
        hidden[ri, ci] = h

    replay(embed, by_role)
    for k in range(n_parts):
        def part(ri, state, ci, role, tokens, ar, context, n_past, k=k):
            n = len(tokens)
            g = _graphs_for(graphs, role, ar, context)[k]
            pos = np.full((1, ar), n_past + n - 1, np.int32)
            pos[0, :n] = np.arange(n_past, n_past + n)
            out = run(runs[ri], g, {"hidden": hidden[ri, ci], "position_ids": pos, **masks(state, ar, context, n), **state.past_feeds(g)},
                      n_past, n)
            state.write(out, g.layers, n)
            hidden[ri, ci] = out["hidden_out"]

        (layers,) = part_layers[k]
        replay(part, by_bucket, layers)
    head = next(g for g in graphs.values() if g.role == "head")
    last: dict[tuple[int, int], np.ndarray] = {}

    def tail(ri, state, ci, role, tokens, ar, context, n_past):
        n = len(tokens)
        last[ri, ci] = run(runs[ri], head, {"hidden": np.ascontiguousarray(hidden.pop((ri, ci))[:, n - 1 : n])}, n_past, n)["logits"][0, 0]

    replay(tail, lambda call: ())
    out = []
    for ri, (r, calls) in enumerate(zip(runs, schedules)):
        n_prefill = sum(1 for c in calls if c[0] == "prefill")
        logits = [last[ri, n_prefill - 1]] + [last[ri, ci] for ci in range(n_prefill, len(calls))]
        out.append(([greedy(x) for x in logits], logits))
    return out


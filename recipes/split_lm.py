"""Split language-model graphs and their state contract, shared by every recipe that drives a decoder
through separate embedding, layer-stack and head graphs (``spark``, MiniCPM-o's language model and
speech decoder).

A :class:`SplitLM` names the structure: per-layer attention kinds (sliding layers keep a ring KV of
``window`` slots, full layers a KV sized by the context bucket), KV heads, head size, hidden size,
vocabulary, prefill AR and context buckets. From it come the graphs (``embed_ar{N}``,
``{prefill|decode}_ar{N}_cl{C}`` cut into ``_part{k}of{n}`` layer ranges where the plan says so,
``head_ar1``) and the ``kv-ring+full`` state layout that ``verify/split_lm_driver.py`` follows.
Pure data; no torch.
"""

from __future__ import annotations

from dataclasses import dataclass

from recipes.base import Bucket, Component, TensorSpec
from recipes.cost import GraphCost
from recipes.shapes import split_by_layer

MASK_VALUE = -100.0


@dataclass(frozen=True)
class SplitLM:
    kinds: tuple[str, ...]  # "sliding_attention" | "full_attention" per layer
    kv_heads: int
    head_dim: int
    hidden: int
    vocab: int
    window: int  # ring slots of sliding layers (0: no sliding layers)
    prefill_ar: int
    contexts: tuple[int, ...]

    @property
    def layers(self) -> int:
        return len(self.kinds)


def stack_component(lm: SplitLM, role: str, b: Bucket, start: int, end: int, part: tuple[int, int] | None) -> Component:
    kvh, hd, h, w = lm.kv_heads, lm.head_dim, lm.hidden, lm.window
    inputs = [TensorSpec("hidden", "float32", (1, b.ar, h)), TensorSpec("position_ids", "int32", (1, b.ar))]
    used = set(lm.kinds[start:end])
    if "sliding_attention" in used:
        inputs.append(TensorSpec("mask_sliding", "float32", (1, 1, b.ar, w + b.ar)))
    if "full_attention" in used:
        inputs.append(TensorSpec("mask_global", "float32", (1, 1, b.ar, b.context)))
    outputs = [TensorSpec("hidden_out", "float32", (1, b.ar, h))]
    for i in range(start, end):
        slots = w if lm.kinds[i] == "sliding_attention" else b.past
        inputs += [TensorSpec(f"past_key_{i}", "float32", (1, kvh, slots, hd)), TensorSpec(f"past_value_{i}", "float32", (1, kvh, slots, hd))]
        outputs += [TensorSpec(f"new_key_{i}", "float32", (1, kvh, b.ar, hd)), TensorSpec(f"new_value_{i}", "float32", (1, kvh, b.ar, hd))]
    name = f"{role}_ar{b.ar}_cl{b.context}" + (f"_part{part[0]}of{part[1]}" if part else "")
    return Component(name, role, b, tuple(inputs), tuple(outputs), layers=(start, end), part=part, graph=name)


def components(lm: SplitLM, splits: dict[str, list[tuple[int, int]]] | None = None) -> tuple[Component, ...]:
    """Every graph; `splits` maps a stack graph name to its layer ranges (from the plan)."""
    ar, h, v, n = lm.prefill_ar, lm.hidden, lm.vocab, lm.layers
    out = [
        Component(f"embed_ar{a}", "embedding", Bucket(a, a), (TensorSpec("input_ids", "int32", (1, a)),),
                  (TensorSpec("hidden", "float32", (1, a, h)),), graph=f"embed_ar{a}")
        for a in (ar, 1)
    ]
    for c in lm.contexts:
        for role, a in (("prefill", ar), ("decode", 1)):
            b = Bucket(a, c)
            ranges = (splits or {}).get(f"{role}_ar{a}_cl{c}") or [(0, n)]
            for k, (s, e) in enumerate(ranges, 1):
                out.append(stack_component(lm, role, b, s, e, (k, len(ranges)) if len(ranges) > 1 else None))
    out.append(Component("head_ar1", "head", Bucket(1, 1), (TensorSpec("hidden", "float32", (1, 1, h)),),
                         (TensorSpec("logits", "float32", (1, 1, v)),), graph="head_ar1"))
    return tuple(out)


def state_layout(lm: SplitLM) -> dict:
    """The state contract: enough for a runtime to allocate, fill, advance and move state between buckets."""
    kvh, hd, w, ar, contexts = lm.kv_heads, lm.head_dim, lm.window, lm.prefill_ar, list(lm.contexts)
    buffers = []
    for i, kind in enumerate(lm.kinds):
        for role in ("key", "value"):
            if kind == "sliding_attention":
                buffers.append({"name": f"ring_{role}_{i}", "layer": i, "role": role, "kind": "ring", "shape": [1, kvh, w, hd],
                                "time_axis": 2, "transposed": False})
            else:
                buffers.append({"name": f"global_{role}_{i}", "layer": i, "role": role, "kind": "full",
                                "shape": [1, kvh, contexts[-1], hd], "shape_by_context": {str(c): [1, kvh, c, hd] for c in contexts},
                                "time_axis": 2, "transposed": False})
    return {
        "kind": "kv-ring+full",
        "dtype": "float32",
        "layers": lm.layers,
        "layer_types": list(lm.kinds),
        "window": w,
        "hidden_size": lm.hidden,
        "vocab_size": lm.vocab,
        "prefill_ar": ar,
        "contexts": contexts,
        "buffers": buffers,
        "call": ("one token step = embed_ar{N}(input_ids) -> hidden; the stack graph(s) of the chosen bucket in part order, "
                 "each taking the previous hidden_out as hidden; head_ar1(hidden_out[:, n_valid-1:n_valid]) -> logits of the last real token"),
        "bucket_selection": "for a call of n real tokens with AR slots, use the smallest context C with n_past + n <= C and n_past <= C - AR",
        "transition": ("moving to a larger context C2: allocate global buffers [1, kv_heads, C2, head_dim] and copy rows [0, n_past) from the "
                       "old ones; ring buffers are identical in every bucket and stay as they are"),
        "graph_inputs": {
            "sliding": "past_{key|value}_{i} = the whole ring buffer [1, kv_heads, window, head_dim], slot order",
            "global": "past_{key|value}_{i} = buffer[:, :, 0:C-AR, :] for the bucket's graph with AR tokens per call",
        },
        "graph_outputs": "new_{key|value}_{i} has AR rows; row j belongs to the j-th token of the call (keys already rotated)",
        "write": {
            "ring": "row j (j < n_valid) goes to ring slot (n_past + j) mod window; older contents of that slot are overwritten (the wrap)",
            "global": "row j (j < n_valid) goes to slot n_past + j",
            "then": "n_past += n_valid",
        },
        "ring_slot_position": "after n_past tokens, ring slot s holds position p = n_past - 1 - ((n_past - 1 - s) mod window) if p >= 0, else nothing",
        "positions": "position_ids[j] = n_past + j for real tokens; padded tokens repeat the last real position",
        "padding": "prompts shorter than AR are right-padded with token 0; rows of padded tokens are never written and their outputs are ignored",
        "mask": {
            "value_hidden": MASK_VALUE,
            "value_visible": 0.0,
            "sliding": {"shape": [1, 1, "AR", "window + AR"],
                        "rule": ("row j (position P = n_past + j) sees ring column s if slot s holds position p with P - p < window, "
                                 "and new column window + k for k <= j")},
            "global": {"shape": [1, 1, "AR", "C"],
                       "rule": "row j sees past slots [0, n_past) and new column C - AR + k for k <= j"},
        },
        "capacity": f"a sequence may hold at most {contexts[-1]} tokens (the largest bucket); a longer one is refused, never truncated",
        "reset": "set n_past = 0 and return to the smallest bucket; buffer contents need not be cleared (the masks hide them)",
        "cancellation": "drop the new rows of the cancelled call without writing them; n_past and the bucket are unchanged",
        "sampler": {
            "runs_on": "cpu (the runtime), over head_ar1's logits [1, 1, vocab] float32",
            "greedy": "token = argmax(logits) (lowest index on ties)",
            "inputs": {"temperature": "float > 0", "top_k": "int >= 1 (vocab = off)", "top_p": "float in (0, 1] (1 = off)", "seed": "uint64"},
            "top_k_top_p": ("z = logits / temperature; keep the top_k largest; softmax; keep the smallest prefix of tokens sorted by "
                            "probability whose mass reaches top_p; renormalise; draw with a PCG64 generator seeded by seed"),
            "outputs": {"token": "int32", "probability": "float32 of the drawn token after filtering"},
            "reference": "verify/sampler.py",
        },
    }


def cost_graphs(lm: SplitLM, shapes: dict, intermediate: int, heads: int, weight_set: str = "decoder", embed_set: str = "embed",
                head_set: str = "head", head_params: int | None = None) -> list[GraphCost]:
    """The planner's cost of every split graph, named as its component. `shapes` are the decoder's own tensor names
    (embedding before the stack, final norm and untied head after it); a tied head passes `head_params`."""
    pre, layers, post = split_by_layer(shapes)
    h, v = lm.hidden, lm.vocab
    graphs = [GraphCost(f"embed_ar{a}", "embedding", Bucket(a, a), embed_set, pre, (), 0, h, name=f"embed_ar{a}") for a in (lm.prefill_ar, 1)]
    for c in lm.contexts:
        for role, a in (("prefill", lm.prefill_ar), ("decode", 1)):
            graphs.append(GraphCost(f"{role}_ar{a}_cl{c}", role, Bucket(a, c), weight_set, 0, layers, 0, 8 * h + 3 * intermediate, heads,
                                    name=f"{role}_ar{a}_cl{c}"))
    graphs.append(GraphCost("head_ar1", "head", Bucket(1, 1), head_set, 0, (), post if head_params is None else head_params, v, name="head_ar1"))
    return graphs


"""The cost model of a recipe: what the planner needs to admit it on a target.

Per graph: its weights (before / per layer / after the layer stack, so the
planner can cut layer-range parts), which weight set it belongs to (graphs of
one weight set can share one copy where the accelerator allows), and its live
activations. Per state: KV (full or ring window) and recurrent state sizes.
Pure data; no torch.
"""

from __future__ import annotations

from dataclasses import dataclass

from recipes.base import Bucket
from recipes.shapes import split_by_layer


@dataclass(frozen=True)
class GraphCost:
    component: str
    role: str
    bucket: Bucket  # tokens per call and context slots; for an encoder, ar = tokens and context = ar
    weight_set: str
    pre_params: int
    layer_params: tuple[int, ...]
    post_params: int
    act_elems_per_token: int  # live activation elements per token (hidden, MLP, logits)
    score_heads: int = 0  # attention heads whose [ar x context] scores are live at once
    name: str | None = None  # the recipe component's graph name, where it differs from the default

    @property
    def params(self) -> int:
        return self.pre_params + sum(self.layer_params) + self.post_params

    @property
    def graph_name(self) -> str:
        return self.name or f"{self.role}_ar{self.bucket.ar}_cl{self.bucket.context}"


@dataclass(frozen=True)
class StateCost:
    name: str
    kind: str  # kv-full | kv-ring | recurrent
    layers: int
    elems_per_token: int = 0  # per layer, for KV: 2 * kv_heads * head_dim
    window: int | None = None  # ring KV window (slots)
    elems_fixed: int = 0  # per layer, for recurrent state
    dtype_bytes: int | None = None  # None: the precision's activation width

    def bytes_at(self, context: int, act_bytes: int) -> int:
        b = self.dtype_bytes or act_bytes
        if self.kind == "kv-full":
            return self.layers * self.elems_per_token * context * b
        if self.kind == "kv-ring":
            return self.layers * self.elems_per_token * min(self.window or context, context) * b
        return self.layers * self.elems_fixed * b


@dataclass(frozen=True)
class GraphGroup:
    """Graphs a runtime loads and drops together (a tower, the language model, the speech decoder): the
    unit a multi-component plan admits or rejects on its own."""

    name: str
    components: tuple[str, ...]  # GraphCost.component names
    states: tuple[str, ...] = ()  # StateCost names this group's graphs read and write
    language: bool = False  # its weight sets count as the language model's


@dataclass(frozen=True)
class CostModel:
    graphs: tuple[GraphCost, ...]
    states: tuple[StateCost, ...]
    source: str  # where the dimensions come from
    language_weight_sets: tuple[str, ...] = ()
    shares_weights: bool = False  # the recipe builds weight-shared graphs where the accelerator allows
    groups: tuple[GraphGroup, ...] = ()  # multi-component recipes: planned group by group as well as whole

    def group(self, g: GraphGroup) -> "CostModel":
        """The cost model of one group alone."""
        from dataclasses import replace

        graphs = tuple(x for x in self.graphs if x.component in g.components)
        return replace(self, graphs=graphs, states=tuple(x for x in self.states if x.name in g.states),
                       language_weight_sets=self.language_weight_sets if g.language else (), groups=())

    def contexts(self) -> list[int]:
        return sorted({g.bucket.context for g in self.graphs if g.role in ("prefill", "decode")})


def decoder_graphs(
    shapes: dict[str, tuple[int, ...]],
    cfg: dict,
    buckets: list[tuple[str, Bucket]],
    weight_set: str,
    name_prefix: str = "",
) -> tuple[GraphCost, ...]:
    """One graph per (role, bucket) of a decoder whose weights are `shapes`."""
    pre, layers, post = split_by_layer(shapes)
    h, i_, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    act = 8 * h + 3 * i_ + v
    return tuple(
        GraphCost(f"{name_prefix}{role}", role, b, weight_set, pre, layers, post, act, cfg["num_attention_heads"])
        for role, b in buckets
    )


def encoder_graph(component: str, tokens: int, params: int, layers: int, hidden: int, heads: int, weight_set: str | None = None) -> GraphCost:
    """A non-autoregressive tower (ViT, audio encoder, vocoder) with `layers` equal layers."""
    per = params // max(layers, 1)
    rest = params - per * layers
    return GraphCost(component, "encoder", Bucket(tokens, tokens), weight_set or component, rest, (per,) * layers, 0, 12 * hidden, heads,
                     name=component)


def kv_state(name: str, layers: int, kv_heads: int, head_dim: int, window: int | None = None, dtype_bytes: int | None = None) -> StateCost:
    return StateCost(name, "kv-ring" if window else "kv-full", layers, 2 * kv_heads * head_dim, window, dtype_bytes=dtype_bytes)

"""Shared pieces of the five families' plan-level cost models."""

from __future__ import annotations

from recipes.base import Bucket
from recipes.cost import GraphCost, decoder_graphs
from recipes.shapes import split_by_layer


def lm_graphs(shapes: dict, cfg: dict, prefill_ar: int, contexts: list[int], prefix: str = "", weight_set: str = "decoder",
              embed_set: str = "embed", head_set: str = "head") -> tuple[GraphCost, ...]:
    """Embedding, prefill/decode per context bucket (layer stack only) and LM head, as separate graphs.

    The embedding is a gather and the head the largest single matmul; keeping them out
    of the layer stack lets the stack be cut into layer-range parts and, where the
    accelerator shares weights, lets a tied head share the embedding's copy.
    """
    pre, layers, post_all = split_by_layer(shapes)
    h, v = cfg["hidden_size"], cfg["vocab_size"]
    head = v * h
    norm = post_all - (0 if cfg.get("tie_word_embeddings") else head)
    buckets = [(role, Bucket(ar, c)) for c in contexts for role, ar in (("prefill", prefill_ar), ("decode", 1))]
    stack = tuple(
        GraphCost(g.component, g.role, g.bucket, weight_set, 0, layers, norm, g.act_elems_per_token - v, g.score_heads)
        for g in decoder_graphs(shapes, cfg, buckets, weight_set, prefix)
    )
    emb = GraphCost(f"{prefix}embedding", "embedding", Bucket(prefill_ar, prefill_ar), embed_set, pre, (), 0, h)
    lm_head = GraphCost(f"{prefix}head", "head", Bucket(prefill_ar, prefill_ar), embed_set if cfg.get("tie_word_embeddings") else head_set, 0, (), head, v)
    return (emb, *stack, lm_head)


def vit_params(layers: int, hidden: int, mlp: int, patch: int = 14, out: int | None = None, merge: int = 1) -> int:
    """Parameters of a plain ViT (qkv+proj with bias, 2-layer MLP, 2 norms) plus patch embedding and merger."""
    per = 4 * hidden * hidden + 4 * hidden + 2 * hidden * mlp + mlp + hidden + 4 * hidden
    merger = (hidden * merge * merge) * (out or hidden) if out else 0
    return layers * per + 3 * patch * patch * hidden + merger

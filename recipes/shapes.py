"""Checkpoint tensor names and shapes of the architectures the recipes use, from their configs.

Pure Python (no torch): the planner counts weights from these, and the tiny
recipes synthesise checkpoints from them. ``tests/test_shapes.py`` checks each
function against the parameters transformers' own classes create on the meta
device, so a formula that drifts from the real architecture fails a test.
"""

from __future__ import annotations

import re
from math import prod

_LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.")


def _attention(p: str, h: int, nh: int, kvh: int, hd: int, q_mult: int = 1) -> dict[str, tuple[int, ...]]:
    return {
        p + "self_attn.q_proj.weight": (nh * hd * q_mult, h),
        p + "self_attn.k_proj.weight": (kvh * hd, h),
        p + "self_attn.v_proj.weight": (kvh * hd, h),
        p + "self_attn.o_proj.weight": (h, nh * hd),
        p + "self_attn.q_norm.weight": (hd,),
        p + "self_attn.k_norm.weight": (hd,),
    }


def _mlp(p: str, h: int, i_: int) -> dict[str, tuple[int, ...]]:
    return {
        p + "mlp.gate_proj.weight": (i_, h),
        p + "mlp.up_proj.weight": (i_, h),
        p + "mlp.down_proj.weight": (h, i_),
    }


def qwen3_tensor_shapes(cfg: dict) -> dict[str, tuple[int, ...]]:
    """Qwen3ForCausalLM (transformers names)."""
    h, i_, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    nh, kvh, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (v, h), "model.norm.weight": (h,)}
    for n in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{n}."
        shapes |= {p + "input_layernorm.weight": (h,), p + "post_attention_layernorm.weight": (h,)}
        shapes |= _attention(p, h, nh, kvh, hd) | _mlp(p, h, i_)
    if not cfg.get("tie_word_embeddings"):
        shapes["lm_head.weight"] = (v, h)
    return shapes


def gemma3_text_tensor_shapes(cfg: dict) -> dict[str, tuple[int, ...]]:
    """Gemma3ForCausalLM (text-only Gemma 3; tied embeddings by default)."""
    h, i_, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    nh, kvh, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (v, h), "model.norm.weight": (h,)}
    for n in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{n}."
        for norm in ("input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm", "post_feedforward_layernorm"):
            shapes[p + norm + ".weight"] = (h,)
        shapes |= _attention(p, h, nh, kvh, hd) | _mlp(p, h, i_)
    if not cfg.get("tie_word_embeddings", True):
        shapes["lm_head.weight"] = (v, h)
    return shapes


def qwen3_5_layer_types(cfg: dict) -> list[str]:
    if cfg.get("layer_types"):
        return list(cfg["layer_types"])
    k = cfg.get("full_attention_interval", 4)
    return ["linear_attention" if (i + 1) % k else "full_attention" for i in range(cfg["num_hidden_layers"])]


def qwen3_5_text_tensor_shapes(cfg: dict) -> dict[str, tuple[int, ...]]:
    """Qwen3_5ForCausalLM: Gated-DeltaNet (linear attention) layers interleaved with gated full attention."""
    h, i_, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    nh, kvh, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    lk, lv = cfg["linear_num_key_heads"], cfg["linear_num_value_heads"]
    kd, vd, ck = cfg["linear_key_head_dim"], cfg["linear_value_head_dim"], cfg["linear_conv_kernel_dim"]
    key_dim, value_dim = lk * kd, lv * vd
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (v, h), "model.norm.weight": (h,)}
    for n, kind in enumerate(qwen3_5_layer_types(cfg)):
        p = f"model.layers.{n}."
        shapes |= {p + "input_layernorm.weight": (h,), p + "post_attention_layernorm.weight": (h,)}
        if kind == "full_attention":
            shapes |= _attention(p, h, nh, kvh, hd, q_mult=2)  # the query projection also yields the output gate
        else:
            a = p + "linear_attn."
            shapes |= {
                a + "in_proj_qkv.weight": (2 * key_dim + value_dim, h),
                a + "in_proj_z.weight": (value_dim, h),
                a + "in_proj_b.weight": (lv, h),
                a + "in_proj_a.weight": (lv, h),
                a + "conv1d.weight": (2 * key_dim + value_dim, 1, ck),
                a + "dt_bias": (lv,),
                a + "A_log": (lv,),
                a + "norm.weight": (vd,),
                a + "out_proj.weight": (h, value_dim),
            }
        shapes |= _mlp(p, h, i_)
    if not cfg.get("tie_word_embeddings"):
        shapes["lm_head.weight"] = (v, h)
    return shapes


def split_by_layer(shapes: dict[str, tuple[int, ...]]) -> tuple[int, tuple[int, ...], int]:
    """(parameters before the layer stack, per-layer parameters, parameters after it).

    Embeddings count as "before", the final norm and LM head as "after"; a layer-range
    part gets "before" if it starts the stack and "after" if it ends it.
    """
    layers: dict[int, int] = {}
    pre = post = 0
    for name, shape in shapes.items():
        m = _LAYER.search(name)
        n = prod(shape)
        if m:
            layers[int(m.group(1))] = layers.get(int(m.group(1)), 0) + n
        elif "embed" in name:
            pre += n
        else:
            post += n
    return pre, tuple(layers[i] for i in sorted(layers)), post

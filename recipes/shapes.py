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


def qwen3_5_vision_tensor_shapes(vc: dict, prefix: str = "model.visual.") -> dict[str, tuple[int, ...]]:
    """Qwen3_5VisionModel (transformers 5.24 names): Conv3d patch embedding, learned positions, pre-norm blocks with
    fused qkv, and the 2x2 patch merger into the language model's width."""
    h, f, d = vc["hidden_size"], vc["intermediate_size"], vc["depth"]
    ps, tp, m = vc["patch_size"], vc.get("temporal_patch_size", 2), vc.get("spatial_merge_size", 2)
    shapes: dict[str, tuple[int, ...]] = {
        prefix + "patch_embed.proj.weight": (h, vc.get("in_channels", 3), tp, ps, ps), prefix + "patch_embed.proj.bias": (h,),
        prefix + "pos_embed.weight": (vc["num_position_embeddings"], h),
    }
    for n in range(d):
        b = f"{prefix}blocks.{n}."
        shapes |= _layer_norm(b + "norm1", h) | _layer_norm(b + "norm2", h)
        shapes |= _linear(b + "attn.qkv", 3 * h, h) | _linear(b + "attn.proj", h, h)
        shapes |= _linear(b + "mlp.linear_fc1", f, h) | _linear(b + "mlp.linear_fc2", h, f)
    merged = h * m * m
    shapes |= _layer_norm(prefix + "merger.norm", h)
    shapes |= _linear(prefix + "merger.linear_fc1", merged, merged) | _linear(prefix + "merger.linear_fc2", vc["out_hidden_size"], merged)
    return shapes


def qwen3_5_vlm_tensor_shapes(cfg: dict) -> dict[str, tuple[int, ...]]:
    """Qwen3_5ForConditionalGeneration as its checkpoints name tensors: the text model under model.language_model., the
    untied lm_head, the vision tower under model.visual. (`cfg`: the checkpoint's config.json, text_config + vision_config)."""
    text = {("model.language_model." + k[len("model."):] if k.startswith("model.") else k): v
            for k, v in qwen3_5_text_tensor_shapes(cfg["text_config"]).items()}
    return text | qwen3_5_vision_tensor_shapes(cfg["vision_config"])


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


def _linear(p: str, out_f: int, in_f: int, bias: bool = True) -> dict[str, tuple[int, ...]]:
    return {p + ".weight": (out_f, in_f), **({p + ".bias": (out_f,)} if bias else {})}


def _layer_norm(p: str, d: int) -> dict[str, tuple[int, ...]]:
    return {p + ".weight": (d,), p + ".bias": (d,)}


def siglip_vision_tensor_shapes(vc: dict, layers: int | None = None) -> dict[str, tuple[int, ...]]:
    """transformers' SiglipVisionModel without the pooling head (MiniCPM's ``vpm``); `layers` counts the kept layers."""
    d, i_, p = vc["hidden_size"], vc["intermediate_size"], vc["patch_size"]
    shapes = {"embeddings.patch_embedding.weight": (d, vc.get("num_channels", 3), p, p), "embeddings.patch_embedding.bias": (d,),
              "embeddings.position_embedding.weight": ((vc["image_size"] // p) ** 2, d), **_layer_norm("post_layernorm", d)}
    for n in range(vc["num_hidden_layers"] if layers is None else layers):
        q = f"encoder.layers.{n}."
        shapes |= _layer_norm(q + "layer_norm1", d) | _layer_norm(q + "layer_norm2", d)
        for proj in ("q_proj", "k_proj", "v_proj", "out_proj"):
            shapes |= _linear(q + "self_attn." + proj, d, d)
        shapes |= _linear(q + "mlp.fc1", i_, d) | _linear(q + "mlp.fc2", d, i_)
    return shapes


def whisper_encoder_tensor_shapes(ac: dict) -> dict[str, tuple[int, ...]]:
    """transformers' WhisperEncoder (MiniCPM's ``apm``: MiniCPMWhisperEncoder keeps its names)."""
    d, f, mel = ac["d_model"], ac["encoder_ffn_dim"], ac["num_mel_bins"]
    shapes = {"conv1.weight": (d, mel, 3), "conv1.bias": (d,), "conv2.weight": (d, d, 3), "conv2.bias": (d,),
              "embed_positions.weight": (ac["max_source_positions"], d), **_layer_norm("layer_norm", d)}
    for n in range(ac["encoder_layers"]):
        q = f"layers.{n}."
        shapes |= _linear(q + "self_attn.k_proj", d, d, bias=False) | _linear(q + "self_attn.v_proj", d, d)
        shapes |= _linear(q + "self_attn.q_proj", d, d) | _linear(q + "self_attn.out_proj", d, d)
        shapes |= _layer_norm(q + "self_attn_layer_norm", d) | _layer_norm(q + "final_layer_norm", d)
        shapes |= _linear(q + "fc1", f, d) | _linear(q + "fc2", d, f)
    return shapes


def llama_decoder_tensor_shapes(tc: dict) -> dict[str, tuple[int, ...]]:
    """The layers and final norm of transformers' LlamaModel (MiniCPM-o's speech decoder backbone, ``tts.model``)."""
    h, i_, nh, kvh = tc["hidden_size"], tc["intermediate_size"], tc["num_attention_heads"], tc["num_key_value_heads"]
    hd = tc.get("head_dim") or h // nh
    shapes: dict[str, tuple[int, ...]] = {"norm.weight": (h,)}
    for n in range(tc["num_hidden_layers"]):
        p = f"layers.{n}."
        shapes |= {p + "input_layernorm.weight": (h,), p + "post_attention_layernorm.weight": (h,)}
        shapes |= {k: v for k, v in _attention(p, h, nh, kvh, hd).items() if "_norm" not in k} | _mlp(p, h, i_)
    return shapes


def minicpmo_tensor_shapes(cfg: dict) -> dict[str, tuple[int, ...]]:
    """Every tensor of a MiniCPM-o 4.5 checkpoint that edge-export reads, by its upstream name
    (recipes/minicpm_o.py names the revision): ``llm.`` Qwen3ForCausalLM, ``vpm.`` SigLIP, ``resampler.``,
    ``apm.`` Whisper encoder, ``audio_projection_layer.``, ``tts.`` speech decoder."""
    vc, ac, tc = cfg["vision_config"], cfg["audio_config"], cfg["tts_config"]
    e, kv = cfg["hidden_size"], vc["hidden_size"]
    layers = vc["num_hidden_layers"] - (1 if cfg.get("drop_vision_last_layer") else 0)
    shapes = {"llm." + k: v for k, v in qwen3_tensor_shapes(cfg).items()}
    shapes |= {"vpm." + k: v for k, v in siglip_vision_tensor_shapes(vc, layers).items()}
    shapes |= {"resampler.query": (cfg["query_num"], e), "resampler.attn.in_proj_weight": (3 * e, e), "resampler.attn.in_proj_bias": (3 * e,),
               **_linear("resampler.attn.out_proj", e, e), **_layer_norm("resampler.ln_q", e), **_layer_norm("resampler.ln_kv", e),
               **_layer_norm("resampler.ln_post", e), "resampler.proj": (e, e)}
    if kv != e:
        shapes |= _linear("resampler.kv_proj", e, kv, bias=False)
    shapes |= {"apm." + k: v for k, v in whisper_encoder_tensor_shapes(ac).items()}
    shapes |= _linear("audio_projection_layer.linear1", e, ac["encoder_ffn_dim"] // 4) | _linear("audio_projection_layer.linear2", e, e)
    ht, na = tc["hidden_size"], tc["num_audio_tokens"]
    shapes |= {"tts.model." + k: v for k, v in llama_decoder_tensor_shapes(tc).items()}
    shapes |= {"tts.emb_text.weight": (tc["num_text_tokens"], ht),
               **_linear("tts.projector_semantic.linear1", ht, tc["llm_dim"]), **_linear("tts.projector_semantic.linear2", ht, ht)}
    for q in range(tc["num_vq"]):
        shapes |= {f"tts.emb_code.{q}.weight": (na, ht), f"tts.head_code.{q}.parametrizations.weight.original0": (na, 1),
                   f"tts.head_code.{q}.parametrizations.weight.original1": (na, ht)}
    return shapes

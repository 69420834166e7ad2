"""A static-shape step graph over a loaded transformers Qwen3ForCausalLM.

The weights are the HF modules' own parameters; the arithmetic is written out so
that every op lowers to the HTP integer path:

* RMSNorm as ``x / sqrt(mean(x^2) + eps)``: torch.rsqrt exports as
  Sqrt->Reciprocal and the uint16 Reciprocal is wrong on HTP (DESIGN.md);
* rotary embedding as ``x*cos + swap(x)*sin_signed`` from constant tables
  gathered by position (no Neg, no Sin/Cos of quantized positions);
* grouped-query attention by slicing KV heads (no Expand), KV concatenated with
  the new rows and only the new rows returned (no ScatterND into state).

The torch reference for parity is the untouched HF model (``generate``).
"""

from __future__ import annotations

import torch
from torch import nn

from exporter.models.ops import grouped_attention, mean_sq_last, mean_sq_last_pooled, rotary_tables, swap_halves


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float, mean_sq=mean_sq_last) -> torch.Tensor:
    return weight * (x / torch.sqrt(mean_sq(x) + eps))


def decoder_layer(layer, h, cos, sin, past_k, past_v, mask, n_heads: int, n_kv: int, head_dim: int, eps: float, mean_sq=mean_sq_last):
    """One Qwen3/Llama decoder layer over the AR rows `h` [1, AR, hidden] with the HTP-friendly ops above; query/key
    norms where the layer has them (Qwen3), none where it does not (Llama). Returns (h, new keys, new values)."""
    ar = h.shape[1]

    def heads(x, n):
        return x.view(1, ar, n, head_dim).transpose(1, 2)

    attn = layer.self_attn
    x = rms_norm(h, layer.input_layernorm.weight, eps, mean_sq)
    q = heads(attn.q_proj(x), n_heads)
    k = heads(attn.k_proj(x), n_kv)
    if hasattr(attn, "q_norm"):
        q = rms_norm(q, attn.q_norm.weight, eps, mean_sq)
        k = rms_norm(k, attn.k_norm.weight, eps, mean_sq)
    v = heads(attn.v_proj(x), n_kv)
    q = q * cos + swap_halves(q) * sin
    k = k * cos + swap_halves(k) * sin
    o = grouped_attention(q, k, v, past_k, past_v, mask, head_dim**-0.5)
    h = h + attn.o_proj(o)
    x = rms_norm(h, layer.post_attention_layernorm.weight, eps, mean_sq)
    mlp = layer.mlp
    return h + mlp.down_proj(nn.functional.silu(mlp.gate_proj(x)) * mlp.up_proj(x)), k, v


class Qwen3Step(nn.Module):
    def __init__(self, hf_model: nn.Module, ar: int, context: int, pooled_mean: bool = False):
        super().__init__()
        self.mean_sq = mean_sq_last_pooled if pooled_mean else mean_sq_last
        cfg = hf_model.config
        self.model = hf_model.model
        self.lm_head = hf_model.lm_head
        self.ar = ar
        self.context = context
        self.n_heads = cfg.num_attention_heads
        self.n_kv = cfg.num_key_value_heads
        self.head_dim = cfg.head_dim
        self.eps = cfg.rms_norm_eps
        theta = float(cfg.rope_parameters["rope_theta"])
        cos, sin = rotary_tables(self.head_dim, context, theta)
        self.register_buffer("cos_table", cos, persistent=False)
        self.register_buffer("sin_table", sin, persistent=False)

    def forward(self, input_ids, position_ids, attention_mask, *past):
        h = nn.functional.embedding(input_ids, self.model.embed_tokens.weight)  # no padding_idx: ExecuTorch fuses only that form
        # Gather (not GatherND) so that int32 positions stay valid ONNX
        cos = nn.functional.embedding(position_ids, self.cos_table).unsqueeze(1)  # [1,1,ar,hd]
        sin = nn.functional.embedding(position_ids, self.sin_table).unsqueeze(1)
        new_kv = []
        for i, layer in enumerate(self.model.layers):
            h, k, v = decoder_layer(layer, h, cos, sin, past[2 * i], past[2 * i + 1], attention_mask, self.n_heads, self.n_kv,
                                    self.head_dim, self.eps, self.mean_sq)
            new_kv += [k, v]
        logits = self.lm_head(rms_norm(h, self.model.norm.weight, self.eps, self.mean_sq))
        return (logits, *new_kv)

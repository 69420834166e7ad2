"""Static-shape graphs over a loaded transformers Gemma3ForCausalLM, split the way a runtime drives it.

* ``Gemma3Embed``: token ids -> scaled embeddings (a gather; the runtime may keep it on the CPU);
* ``Gemma3Stack``: hidden states through a range of decoder layers for one (AR, context) bucket.
  Sliding-window layers attend over a ring of ``window`` past slots plus the new rows; global
  layers over ``context - AR`` past slots plus the new rows. Only new KV rows are returned;
* ``Gemma3Head``: final norm and the (tied) LM head, optional final logit soft-capping.

The arithmetic follows transformers' Gemma 3 exactly (``(1 + w)`` RMSNorm in float,
``query_pre_attn_scalar`` scaling, per-layer-type rotary bases, gelu-tanh MLP, sandwich
norms) but is written with HTP-friendly ops, as ``exporter/models/qwen3.py`` explains:
x/sqrt(...) instead of rsqrt, rotary tables gathered by int32 position with the sign in
the sin table, grouped-query attention by slicing, and the tanh form of GELU spelled out.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from exporter.models.ops import grouped_attention, mean_sq_last, mean_sq_last_pooled, rotary_tables, swap_halves


def gemma_norm(x: torch.Tensor, weight: torch.Tensor, eps: float, mean_sq=mean_sq_last) -> torch.Tensor:
    return (x / torch.sqrt(mean_sq(x) + eps)) * (1.0 + weight)


def gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x)))


def layer_kinds(cfg) -> list[str]:
    return list(cfg.layer_types)


class Gemma3Embed(nn.Module):
    def __init__(self, hf_model: nn.Module):
        super().__init__()
        self.embed = hf_model.model.embed_tokens
        self.scale = float(hf_model.config.hidden_size) ** 0.5

    def forward(self, input_ids):
        return nn.functional.embedding(input_ids, self.embed.weight) * torch.tensor(self.scale, dtype=torch.float32)


class Gemma3Head(nn.Module):
    def __init__(self, hf_model: nn.Module, pooled_mean: bool = False):
        super().__init__()
        self.mean_sq = mean_sq_last_pooled if pooled_mean else mean_sq_last
        self.norm = hf_model.model.norm
        self.lm_head = hf_model.lm_head
        self.eps = hf_model.config.rms_norm_eps
        self.softcap = hf_model.config.final_logit_softcapping

    def forward(self, hidden):
        logits = self.lm_head(gemma_norm(hidden, self.norm.weight, self.eps, self.mean_sq))
        if self.softcap:
            logits = torch.tanh(logits / self.softcap) * self.softcap
        return logits


class Gemma3Stack(nn.Module):
    """Decoder layers [start, end) for one bucket. Inputs: hidden, position_ids, the masks its
    layers need (mask_sliding [1,1,AR,window+AR], mask_global [1,1,AR,context]) and the past KV of
    each of its layers; outputs: hidden_out and the new KV rows of each layer."""

    def __init__(self, hf_model: nn.Module, ar: int, context: int, start: int, end: int, pooled_mean: bool = False):
        super().__init__()
        self.mean_sq = mean_sq_last_pooled if pooled_mean else mean_sq_last
        cfg = hf_model.config
        # only this range's layers, under their stack indices: the part's tensors and nothing else (the parameter
        # names, layers.I..., are those of the whole stack)
        self.layers = nn.ModuleDict({str(i): hf_model.model.layers[i] for i in range(start, end)})
        self.kinds = layer_kinds(cfg)
        self.ar, self.context, self.start, self.end = ar, context, start, end
        self.n_heads, self.n_kv, self.head_dim = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        self.eps = cfg.rms_norm_eps
        self.scaling = cfg.query_pre_attn_scalar**-0.5
        rope = cfg.rope_parameters
        positions = max(context, cfg.sliding_window)
        for kind in ("sliding_attention", "full_attention"):
            cos, sin = rotary_tables(self.head_dim, positions, float(rope[kind]["rope_theta"]))
            self.register_buffer(f"cos_{kind}", cos, persistent=False)
            self.register_buffer(f"sin_{kind}", sin, persistent=False)
        used = set(self.kinds[start:end])
        self.needs_sliding = "sliding_attention" in used
        self.needs_global = "full_attention" in used

    def _heads(self, x, n):
        return x.view(1, self.ar, n, self.head_dim).transpose(1, 2)

    def forward(self, hidden, position_ids, *rest):
        rest = list(rest)
        mask_sliding = rest.pop(0) if self.needs_sliding else None
        mask_global = rest.pop(0) if self.needs_global else None
        past = rest
        tables = {}
        for kind in {self.kinds[i] for i in range(self.start, self.end)}:
            cos = nn.functional.embedding(position_ids, getattr(self, f"cos_{kind}")).unsqueeze(1)
            sin = nn.functional.embedding(position_ids, getattr(self, f"sin_{kind}")).unsqueeze(1)
            tables[kind] = (cos, sin)
        h = hidden
        new_kv = []
        for slot, i in enumerate(range(self.start, self.end)):
            layer = self.layers[str(i)]
            attn = layer.self_attn
            kind = self.kinds[i]
            cos, sin = tables[kind]
            mask = mask_sliding if kind == "sliding_attention" else mask_global
            x = gemma_norm(h, layer.input_layernorm.weight, self.eps, self.mean_sq)
            q = gemma_norm(self._heads(attn.q_proj(x), self.n_heads), attn.q_norm.weight, self.eps, self.mean_sq)
            k = gemma_norm(self._heads(attn.k_proj(x), self.n_kv), attn.k_norm.weight, self.eps, self.mean_sq)
            v = self._heads(attn.v_proj(x), self.n_kv)
            q = q * cos + swap_halves(q) * sin
            k = k * cos + swap_halves(k) * sin
            o = grouped_attention(q, k, v, past[2 * slot], past[2 * slot + 1], mask, self.scaling)
            h = h + gemma_norm(attn.o_proj(o), layer.post_attention_layernorm.weight, self.eps, self.mean_sq)
            mlp = layer.mlp
            x = gemma_norm(h, layer.pre_feedforward_layernorm.weight, self.eps, self.mean_sq)
            y = mlp.down_proj(gelu_tanh(mlp.gate_proj(x)) * mlp.up_proj(x))
            h = h + gemma_norm(y, layer.post_feedforward_layernorm.weight, self.eps, self.mean_sq)
            new_kv += [k, v]
        return (h, *new_kv)

"""Split decoder graphs over a loaded transformers Qwen3/Llama-style causal LM: embedding, a layer range
of the stack for one (AR, context) bucket, and the head. Every layer attends over ``context - AR``
past slots plus the new rows (full attention); only the new KV rows are returned.

The arithmetic is the HF modules' own weights written with the HTP-friendly ops of
``exporter/models/qwen3.py`` (x/sqrt RMSNorm, gathered rotary tables, sliced GQA, bmm attention).
Query/key norms are applied where the layers have them (Qwen3) and skipped where they do not (Llama).
"""

from __future__ import annotations

from torch import nn

from exporter.models.ops import mean_sq_last, mean_sq_last_pooled, rotary_tables
from exporter.models.qwen3 import decoder_layer, rms_norm


class DecoderEmbed(nn.Module):
    def __init__(self, embedding: nn.Embedding):
        super().__init__()
        self.embed = embedding

    def forward(self, input_ids):
        return nn.functional.embedding(input_ids, self.embed.weight)


class DecoderHead(nn.Module):
    def __init__(self, hf_model: nn.Module, pooled_mean: bool = False):
        super().__init__()
        self.mean_sq = mean_sq_last_pooled if pooled_mean else mean_sq_last
        self.norm = hf_model.model.norm
        self.lm_head = hf_model.lm_head
        self.eps = hf_model.config.rms_norm_eps

    def forward(self, hidden):
        return self.lm_head(rms_norm(hidden, self.norm.weight, self.eps, self.mean_sq))


class DecoderStack(nn.Module):
    """Layers [start, end) for one bucket. Inputs: hidden, position_ids, mask_global [1,1,AR,context] and the
    past KV of each layer; outputs: hidden_out and the new KV rows of each layer."""

    def __init__(self, hf_model: nn.Module, ar: int, context: int, start: int, end: int, pooled_mean: bool = False):
        super().__init__()
        self.mean_sq = mean_sq_last_pooled if pooled_mean else mean_sq_last
        cfg = hf_model.config
        self.layers = nn.ModuleDict({str(i): hf_model.model.layers[i] for i in range(start, end)})  # this range only
        self.ar, self.start, self.end = ar, start, end
        self.n_heads, self.n_kv = cfg.num_attention_heads, cfg.num_key_value_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        self.eps = cfg.rms_norm_eps
        cos, sin = rotary_tables(self.head_dim, context, float(cfg.rope_parameters["rope_theta"]))
        self.register_buffer("cos_table", cos, persistent=False)
        self.register_buffer("sin_table", sin, persistent=False)

    def forward(self, hidden, position_ids, mask_global, *past):
        cos = nn.functional.embedding(position_ids, self.cos_table).unsqueeze(1)
        sin = nn.functional.embedding(position_ids, self.sin_table).unsqueeze(1)
        h = hidden
        new_kv = []
        for slot, i in enumerate(range(self.start, self.end)):
            h, k, v = decoder_layer(self.layers[str(i)], h, cos, sin, past[2 * slot], past[2 * slot + 1], mask_global, self.n_heads, self.n_kv,
                                    self.head_dim, self.eps, self.mean_sq)
            new_kv += [k, v]
        return (h, *new_kv)


def split_step_module(hf_model: nn.Module, component, pooled_mean: bool = False) -> nn.Module:
    if component.role == "embedding":
        return DecoderEmbed(hf_model.model.embed_tokens).eval()
    if component.role == "head":
        return DecoderHead(hf_model, pooled_mean).eval()
    start, end = component.layers
    return DecoderStack(hf_model, component.bucket.ar, component.bucket.context, start, end, pooled_mean).eval()

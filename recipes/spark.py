"""`spark`: the roadmap's Gemma-3-1B-like text model (plan-only until issue #4 adds its exporter).

Gemma3ForCausalLM: 26 layers, 5 sliding-window (512) : 1 global, 4 query / 1 KV
heads, head_dim 256, tied 262k vocabulary. Components: embedding, prefill AR-128,
decode AR-1 over context buckets 512/1024/2048/4096, LM head; ring KV for the
sliding layers, full KV for the global ones.
"""

from __future__ import annotations

from recipes.base import plan_only
from recipes.cost import CostModel, kv_state
from recipes.families import lm_graphs
from recipes.shapes import gemma3_text_tensor_shapes

CONFIG = {
    "architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text",
    "vocab_size": 262144, "hidden_size": 1152, "intermediate_size": 6912, "num_hidden_layers": 26,
    "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 256,
    "sliding_window": 512, "sliding_window_pattern": 6, "tie_word_embeddings": True,
}
CONTEXTS = [512, 1024, 2048, 4096]
_GLOBAL = sum(1 for i in range(CONFIG["num_hidden_layers"]) if (i + 1) % CONFIG["sliding_window_pattern"] == 0)

RECIPE = plan_only(
    name="spark", family="spark",
    description="Gemma-3-1B-like text model: embedding, prefill AR-128, decode AR-1, ring/full KV, buckets 512-4096",
    architecture="Gemma3ForCausalLM", config=CONFIG,
    precisions={"htp": ("w8a16", "w4a16"), "cpu": ("fp32", "int8"), "cuda": ("fp16",), "gpu": ("fp16",), "vitisai": ("w8a16",)},
    cost=CostModel(
        graphs=lm_graphs(gemma3_text_tensor_shapes(CONFIG), CONFIG, 128, CONTEXTS),
        states=(
            kv_state("kv-sliding", CONFIG["num_hidden_layers"] - _GLOBAL, 1, 256, window=CONFIG["sliding_window"]),
            kv_state("kv-global", _GLOBAL, 1, 256),
        ),
        source="exact for the dimensions in DESIGN.md (recipes/shapes.py gemma3_text_tensor_shapes, checked against transformers)",
        language_weight_sets=("embed", "decoder"),
        shares_weights=True,
    ),
    blocked="spark has no checkpoint pin and exporter yet (issue #4)",
)

"""`qwen3.8-27b`: the roadmap's Qwen3.5/3.6-27B-like model (plan-only).

Qwen3_5ForConditionalGeneration layout: 64 layers as 16 x (3 Gated-DeltaNet + 1
gated full attention), hidden 5120, vocab 248320 (untied), a 27-layer ViT. The
plan exists to gate small-memory targets before any export investment: nominal
4-bit language weights are about 12.5 GiB.
"""

from __future__ import annotations

from recipes.base import plan_only
from recipes.cost import CostModel, StateCost, encoder_graph, kv_state
from recipes.families import lm_graphs, vit_params
from recipes.shapes import qwen3_5_layer_types, qwen3_5_text_tensor_shapes

CONFIG = {
    "architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5_text",
    "vocab_size": 248320, "hidden_size": 5120, "intermediate_size": 17408, "num_hidden_layers": 64,
    "num_attention_heads": 24, "num_key_value_heads": 4, "head_dim": 256,
    "linear_num_key_heads": 16, "linear_num_value_heads": 48, "linear_key_head_dim": 128,
    "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4, "full_attention_interval": 4,
    "tie_word_embeddings": False,
    "vision": {"depth": 27, "hidden_size": 1152, "intermediate_size": 4304, "patch_size": 16, "spatial_merge_size": 2},
}
CONTEXTS = [1024, 4096]
_kinds = qwen3_5_layer_types(CONFIG)
_FULL = _kinds.count("full_attention")
_LIN = len(_kinds) - _FULL
_CONV_DIM = 2 * 16 * 128 + 48 * 128
_V = CONFIG["vision"]

RECIPE = plan_only(
    name="qwen3.8-27b", family="qwen3.8-27b",
    description="Qwen3.5-27B-like hybrid (Gated DeltaNet + attention) VLM; layer-range parts, KV + recurrent state",
    architecture="Qwen3_5ForConditionalGeneration", config=CONFIG,
    precisions={"qcs6490": ("w8a16",), "htp": ("w4a16",), "cpu": ("int4",), "cuda": ("int4",), "gpu": ("int4",), "vitisai": ("w8a16",)},
    cost=CostModel(
        graphs=(
            encoder_graph("vision", 1024, vit_params(_V["depth"], _V["hidden_size"], _V["intermediate_size"], _V["patch_size"], CONFIG["hidden_size"], 2),
                          _V["depth"], _V["hidden_size"], 16),
            *lm_graphs(qwen3_5_text_tensor_shapes(CONFIG), CONFIG, 128, CONTEXTS),
        ),
        states=(
            kv_state("kv-attention", _FULL, CONFIG["num_key_value_heads"], CONFIG["head_dim"]),
            # Gated DeltaNet: per layer a [value_heads, key_dim, value_dim] fp32 state plus the conv window
            StateCost("deltanet-recurrent", "recurrent", _LIN, elems_fixed=48 * 128 * 128 + _CONV_DIM * 3, dtype_bytes=4),
        ),
        source=("DESIGN.md layout (64 = 16 x (3 DeltaNet + 1 attention), hidden 5120, vocab 248320); head counts from the public "
                "Qwen3.5-27B config (24 q / 4 kv heads, head_dim 256, 16 key / 48 value linear heads); exact shapes via "
                "recipes/shapes.py qwen3_5_text_tensor_shapes; verify against the pinned checkpoint when one exists"),
        language_weight_sets=("embed", "decoder", "head"),
        shares_weights=True,
    ),
    blocked="no public checkpoint: the family's name is not public; a pin and exporter come with its own issue",
)

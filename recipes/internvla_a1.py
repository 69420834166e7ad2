"""`internvla-a1`: InternVLA-A1-3B on Qwen3-VL-2B (plan-only).

ViT (24 layers) + three experts with joint attention: understanding (2048 wide),
generation and action (1024 wide), 28 layers each, 16/8 heads, head_dim 128;
flow-matching action head, 10 Euler steps over 51 tokens (50-step chunks).
"""

from __future__ import annotations

from recipes.base import Bucket, plan_only
from recipes.cost import CostModel, decoder_graphs, encoder_graph, kv_state
from recipes.families import vit_params
from recipes.shapes import qwen3_tensor_shapes

UNDERSTANDING = {
    "vocab_size": 151936, "hidden_size": 2048, "intermediate_size": 6144, "num_hidden_layers": 28,
    "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128, "tie_word_embeddings": True,
}
EXPERT = {  # generation and action experts: narrower MLP/hidden, the same attention geometry (joint attention)
    "vocab_size": 0, "hidden_size": 1024, "intermediate_size": 3072, "num_hidden_layers": 28,
    "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128, "tie_word_embeddings": True,
}
CONFIG = {"architectures": ["InternVLA_A1"], "understanding": UNDERSTANDING, "expert": EXPERT,
          "vision": {"depth": 24, "hidden_size": 1024, "intermediate_size": 4096, "patch": 16},
          "action": {"euler_steps": 10, "chunk": 50, "tokens": 51, "dim": 32}}
PREFIX = 1024  # three cameras plus instruction

RECIPE = plan_only(
    name="internvla-a1", family="internvla-a1",
    description="InternVLA-A1-3B: ViT per camera, prefix prefill (shared KV), generation stage, action denoise step x10",
    architecture="InternVLA_A1", config=CONFIG,
    precisions={"htp": ("w8a16",), "cpu": ("fp32", "int8"), "cuda": ("fp16",), "gpu": ("fp16",), "vitisai": ("w8a16",)},
    cost=CostModel(
        graphs=(
            encoder_graph("vision", 256, vit_params(24, 1024, 4096, 16, 2048, 2), 24, 1024, 16),
            *decoder_graphs(qwen3_tensor_shapes(UNDERSTANDING), UNDERSTANDING, [("prefill", Bucket(256, PREFIX))], "understanding", "prefix_"),
            *decoder_graphs(qwen3_tensor_shapes(EXPERT), EXPERT, [("prefill", Bucket(64, PREFIX + 64))], "generation", "generation_"),
            *decoder_graphs(qwen3_tensor_shapes(EXPERT), EXPERT, [("decode", Bucket(51, PREFIX + 64 + 51))], "action", "action_"),
        ),
        states=(kv_state("kv-prefix", 28, 8, 128),),
        source="Qwen3-VL-2B dimensions for the ViT and understanding expert; the 1024-wide experts from the model card (estimate)",
        language_weight_sets=("understanding",),
        shares_weights=True,
    ),
    blocked="internvla-a1 has no checkpoint pin and exporter yet",
)

"""`internvla-a1`: InternVLA-A1-3B on Qwen3-VL-2B (plan-only).

ViT (24 layers) + three experts with joint attention: understanding (2048 wide),
generation and action (1024 wide), 28 layers each, 16/8 heads, head_dim 128;
flow-matching action head, 10 Euler steps over 51 tokens (50-step chunks).

Sequence lengths as upstream builds them (InternRobotics/InternVLA-A1@2daf87c, src/lerobot/policies/InternVLA_A1_3B/):
* prefix (understanding expert): per camera `<vision_start> + N image tokens + <vision_end>` for 3 cameras, a masked camera
  keeping its slots (transform_internvla_a1.py lines 45-61), then the prompt padded to `max_length` 48 (line 20); N =
  grid_t*grid_h*grid_w / merge^2 of Qwen3-VL's image processor: a 224^2 view (configuration_internvla_a1.py
  `image_resolution`) is resized to a multiple of patch 16 x merge 2 = 32 with at least 65536 pixels (Qwen3-VL's
  preprocessor `shortest_edge`; transformers' `smart_resize`), i.e. 256^2 -> 16x16 patches -> 64 tokens. Prefix =
  3 x (64 + 2) + 48 = 246 tokens, padded to a 256 bucket;
* generation ("middle", `embed_middle`, modeling_internvla_a1.py line 620): Cosmos CI8x8 latents of 3 views x 2 frames,
  `cosmos_in_proj` then `downsample_conv` to 4x4 per view and frame: 96 tokens;
* action ("suffix", `embed_suffix`, line 644): the state row + `chunk_size` 50 action rows = 51 tokens, over 10
  `num_inference_steps` (configuration lines 88-96).
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
CAMERAS, IMAGE_TOKENS, PROMPT = 3, 64, 48
PREFIX_TOKENS = CAMERAS * (IMAGE_TOKENS + 2) + PROMPT  # 246
PREFIX = 256  # the prefix bucket: 246 tokens padded
GENERATION = 96  # 3 views x 2 frames x 4 x 4 Cosmos tokens
ACTION = 51  # state + 50 actions

RECIPE = plan_only(
    name="internvla-a1", family="internvla-a1",
    description="InternVLA-A1-3B: ViT per camera, prefix prefill (shared KV), generation stage, action denoise step x10",
    architecture="InternVLA_A1", config=CONFIG,
    precisions={"htp": ("w8a16",), "cpu": ("fp32", "int8"), "cuda": ("fp16",), "gpu": ("fp16",), "vitisai": ("w8a16",)},
    cost=CostModel(
        graphs=(
            # one camera view per call: 256 patches of 16^2 merged 2x2 into 64 rows of 2048
            encoder_graph("vision", IMAGE_TOKENS * 4, vit_params(24, 1024, 4096, 16, 2048, 2), 24, 1024, 16),
            *decoder_graphs(qwen3_tensor_shapes(UNDERSTANDING), UNDERSTANDING, [("prefill", Bucket(PREFIX, PREFIX))], "understanding", "prefix_"),
            *decoder_graphs(qwen3_tensor_shapes(EXPERT), EXPERT, [("prefill", Bucket(GENERATION, PREFIX + GENERATION))], "generation", "generation_"),
            *decoder_graphs(qwen3_tensor_shapes(EXPERT), EXPERT, [("decode", Bucket(ACTION, PREFIX + GENERATION + ACTION))], "action", "action_"),
        ),
        # the prefix and generation rows' KV, shared by the experts (same 8 kv heads x 128), written once per observation
        states=(kv_state("kv-prefix", 28, 8, 128),),
        source=("Qwen3-VL-2B dimensions for the ViT and understanding expert; the 1024-wide experts from the model card (estimate); "
                f"sequence lengths from upstream InternRobotics/InternVLA-A1@2daf87c: prefix {PREFIX_TOKENS} tokens (bucket {PREFIX}), "
                f"generation {GENERATION}, action {ACTION}"),
        language_weight_sets=("understanding",),
        shares_weights=True,
    ),
    blocked="internvla-a1 has no loader and exporter yet (a LeRobot policy of Qwen3-VL modules, not a transformers model)",
    blocked_fix="the internvla-a1 issue adds its loader by upstream tensor names and its graphs",
)

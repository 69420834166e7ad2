"""`qwen3-tts`: Qwen3-TTS 1.7B (plan-only).

Talker (Qwen3-style, 28 layers), 5-layer code predictor with static KV (<= 17),
12 Hz tokenizer/vocoder (16 codebooks, 24 kHz, 1920 samples per frame).
"""

from __future__ import annotations

from recipes.base import Bucket, plan_only
from recipes.cost import CostModel, decoder_graphs, encoder_graph, kv_state
from recipes.families import lm_graphs
from recipes.shapes import qwen3_tensor_shapes

TALKER = {
    "vocab_size": 151936, "hidden_size": 2048, "intermediate_size": 6144, "num_hidden_layers": 28,
    "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128, "tie_word_embeddings": True,
}
PREDICTOR = {
    "vocab_size": 2048 * 15, "hidden_size": 1024, "intermediate_size": 3072, "num_hidden_layers": 5,
    "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128, "tie_word_embeddings": False,
}
CONFIG = {"architectures": ["Qwen3TTS"], "talker": TALKER, "code_predictor": PREDICTOR,
          "codec": {"codebooks": 16, "frame_rate_hz": 12, "sample_rate": 24000, "samples_per_frame": 1920}}

RECIPE = plan_only(
    name="qwen3-tts", family="qwen3-tts",
    description="Qwen3-TTS 1.7B: talker prefill/decode, code-predictor step (static KV 17), vocoder chunk",
    architecture="Qwen3TTS", config=CONFIG,
    precisions={"htp": ("w8a16",), "cpu": ("fp32", "int8"), "cuda": ("fp16",), "gpu": ("fp16",), "vitisai": ("w8a16",)},
    cost=CostModel(
        graphs=(
            *lm_graphs(qwen3_tensor_shapes(TALKER), TALKER, 64, [2048]),
            *decoder_graphs(qwen3_tensor_shapes(PREDICTOR), PREDICTOR, [("decode", Bucket(1, 17))], "predictor", "predictor_"),
            encoder_graph("vocoder", 8, 110_000_000, 12, 1024, 16),
        ),
        states=(kv_state("kv-talker", 28, 8, 128), kv_state("kv-predictor", 5, 8, 128, window=17)),
        source="talker and code predictor from the public layout (qwen3_tensor_shapes); the 12 Hz vocoder (~0.11B) is an estimate",
        language_weight_sets=("embed", "decoder", "head"),
        shares_weights=True,
    ),
    blocked="qwen3-tts has no checkpoint pin and exporter yet",
)

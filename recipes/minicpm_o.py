"""`minicpm-o`: MiniCPM-o 4.5 (about 9.3B), plan-only until issue #8.

SigLIP ViT (27 layers, 1152) + resampler (64 queries), Whisper-medium encoder +
projector, Qwen3-8B LLM (36 layers, 32/8 heads, head_dim 128, vocab 151748),
speech-token decoder (Llama-style, 20 layers, 768), flow-matching decoder and vocoder.
"""

from __future__ import annotations

from recipes.base import plan_only
from recipes.cost import CostModel, GraphGroup, encoder_graph, kv_state
from recipes.families import lm_graphs, vit_params
from recipes.shapes import qwen3_tensor_shapes

LLM = {
    "vocab_size": 151748, "hidden_size": 4096, "intermediate_size": 12288, "num_hidden_layers": 36,
    "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "tie_word_embeddings": False,
}
SPEECH = {
    "vocab_size": 6562, "hidden_size": 768, "intermediate_size": 3072, "num_hidden_layers": 20,
    "num_attention_heads": 12, "num_key_value_heads": 12, "head_dim": 64, "tie_word_embeddings": False,
}
CONFIG = {"architectures": ["MiniCPMO"], "llm": LLM, "speech_decoder": SPEECH,
          "vision": {"depth": 27, "hidden_size": 1152, "intermediate_size": 4304, "image": 448, "patch": 14},
          "audio": {"encoder": "whisper-medium", "layers": 24, "hidden_size": 1024}}
CONTEXTS = [1024, 4096]
_WHISPER_MEDIUM_ENCODER = 24 * (4 * 1024 * 1024 + 2 * 1024 * 4096 + 9 * 1024) + 2 * 3 * 80 * 1024 + 1500 * 1024
_RESAMPLER = 64 * 4096 + 4 * 4096 * 4096 + 1152 * 4096  # queries, cross-attention, kv projection

RECIPE = plan_only(
    name="minicpm-o", family="minicpm-o",
    description="MiniCPM-o 4.5: vision slice 448, audio 1 s chunk, Qwen3-8B LLM, speech decoder, flow step, vocoder",
    architecture="MiniCPMO", config=CONFIG,
    precisions={"htp": ("w4a16", "w8a16"), "cpu": ("int4", "int8"), "cuda": ("int4", "fp16"), "gpu": ("int4",), "vitisai": ("w8a16",)},
    cost=CostModel(
        graphs=(
            encoder_graph("vision", 1025, vit_params(27, 1152, 4304, 14), 27, 1152, 16),
            encoder_graph("resampler", 64, _RESAMPLER, 1, 4096, 32),
            encoder_graph("audio", 50, _WHISPER_MEDIUM_ENCODER, 24, 1024, 16),
            *lm_graphs(qwen3_tensor_shapes(LLM), LLM, 128, CONTEXTS),
            *lm_graphs(qwen3_tensor_shapes(SPEECH), SPEECH, 32, [1024], prefix="speech_", weight_set="speech",
                       embed_set="speech_embed", head_set="speech_head"),
            encoder_graph("flow_step", 50, 100_000_000, 16, 512, 8),
            encoder_graph("vocoder", 50, 20_000_000, 8, 512, 1),
        ),
        states=(kv_state("kv-llm", 36, 8, 128), kv_state("kv-speech", 20, 12, 64, window=1024)),
        source=("LLM and speech decoder exact for the public dimensions (qwen3_tensor_shapes); SigLIP, Whisper-medium and "
                "resampler from their published layouts; flow decoder (~0.1B) and vocoder (~0.02B) are estimates"),
        language_weight_sets=("embed", "decoder", "head"),
        shares_weights=True,
        # what a runtime loads and drops together; each is admitted or rejected on its own (never a smaller model)
        groups=(
            GraphGroup("vision", ("vision", "resampler")),
            GraphGroup("audio", ("audio",)),
            GraphGroup("language", ("embedding", "prefill", "decode", "head"), ("kv-llm",), language=True),
            GraphGroup("speech-decoder", ("speech_embedding", "speech_prefill", "speech_decode", "speech_head"), ("kv-speech",)),
            GraphGroup("flow-vocoder", ("flow_step", "vocoder")),
        ),
    ),
    blocked="minicpm-o has no checkpoint pin and exporter yet (issue #8); upstream code needs trust_remote_code, which edge-export refuses",
)

"""`qwen3-tts`: Qwen3-TTS 12 Hz, 1.7B (the 0.6B through --checkpoint's config), plan-only.

Layout as upstream builds it (QwenLM/Qwen3-TTS@022e286, qwen_tts/core/models/modeling_qwen3_tts.py, identical in the
qwen-tts 0.1.1 wheel; read, not run, under transformers 5.24 which it does not import under):

* talker (`Qwen3TTSTalkerForConditionalGeneration`, line 1564): a Qwen3 stack (28 layers, 16 q / 8 kv heads x 128)
  over `codec_embedding` [vocab 3072, H] (`Qwen3TTSTalkerModel`, line 1441), with the text side separate:
  `text_embedding` [text_vocab 151936, text_hidden 2048] (line 1442) and `text_projection`, an MLP
  text_hidden -> text_hidden -> H with biases (`Qwen3TTSTalkerResizeMLP`, lines 808 and 1575); the head is
  `codec_head` [3072, H], its own tensor, not tied (line 1579);
* code predictor (`Qwen3TTSTalkerCodePredictorModelForConditionalGeneration`, line 1156): a 5-layer Qwen3 stack
  with num_code_groups - 1 = 15 `codec_embedding`s [2048, talker H] (line 1030) and 15 `lm_head`s [2048, predictor H]
  (line 1167), plus `small_to_mtp_projection` talker H -> predictor H where the two widths differ (the 1.7B; line 1171);
* the 12 Hz codec decoder (speech_tokenizer/): 16 codebooks, 24 kHz, 1920 samples per frame.

Released sizes (model cards, README of the same commit: Qwen3-TTS-12Hz-{0.6B,1.7B}-{Base,CustomVoice,VoiceDesign}): talker
hidden 1024 / FFN 3072 (0.6B) and 2048 / 6144 (1.7B); predictor hidden 1024, FFN 3072, 5 layers; text 151936 x 2048;
codec vocab 3072; 16 code groups (config values from third-party copies of the released configs,
../shared/research/families.md section 2.2; to be checked against a pinned snapshot).
"""

from __future__ import annotations

from recipes.base import Bucket, plan_only
from recipes.cost import CostModel, GraphCost, encoder_graph, kv_state
from recipes.shapes import qwen3_tensor_shapes, split_by_layer

TEXT_VOCAB, TEXT_HIDDEN, CODEC_VOCAB, CODE_GROUPS, CODEBOOK = 151936, 2048, 3072, 16, 2048
TALKERS = {
    "1.7B": {"hidden_size": 2048, "intermediate_size": 6144},
    "0.6B": {"hidden_size": 1024, "intermediate_size": 3072},
}
PREDICTOR = {
    "vocab_size": CODEBOOK, "hidden_size": 1024, "intermediate_size": 3072, "num_hidden_layers": 5,
    "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128, "tie_word_embeddings": False,
}


def talker_config(size: str) -> dict:
    return {"vocab_size": CODEC_VOCAB, "num_hidden_layers": 28, "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128,
            "tie_word_embeddings": False, "text_vocab_size": TEXT_VOCAB, "text_hidden_size": TEXT_HIDDEN, **TALKERS[size]}


def cost(size: str = "1.7B") -> CostModel:
    talker = talker_config(size)
    h = talker["hidden_size"]
    # the talker's stack: Qwen3 layers and final norm (its codec embedding and untied codec head are graphs of their own)
    shapes = qwen3_tensor_shapes(talker)
    _, layers, _ = split_by_layer(shapes)
    text = TEXT_VOCAB * TEXT_HIDDEN + (TEXT_HIDDEN * TEXT_HIDDEN + TEXT_HIDDEN) + (TEXT_HIDDEN * h + h)  # embedding + 2-layer projection
    stack = tuple(
        GraphCost("talker_" + role, role, b, "talker", 0, layers, h, 8 * h + 3 * talker["intermediate_size"], talker["num_attention_heads"])
        for role, b in (("prefill", Bucket(64, 2048)), ("decode", Bucket(1, 2048)))
    )
    pshapes = qwen3_tensor_shapes(PREDICTOR)
    _, players, _ = split_by_layer(pshapes)
    ph = PREDICTOR["hidden_size"]
    proj = (h * ph + ph) if h != ph else 0
    predictor = tuple(
        GraphCost("predictor_" + role, role, b, "predictor", (CODE_GROUPS - 1) * CODEBOOK * h + proj, players,
                  ph + (CODE_GROUPS - 1) * CODEBOOK * ph, 8 * ph + 3 * PREDICTOR["intermediate_size"] + CODEBOOK, PREDICTOR["num_attention_heads"])
        for role, b in (("decode", Bucket(1, 17)),)
    )
    return CostModel(
        graphs=(
            GraphCost("text_embedding", "embedding", Bucket(64, 64), "text", text, (), 0, TEXT_HIDDEN, name="text_embed_ar64"),
            GraphCost("codec_embedding", "embedding", Bucket(64, 64), "codec-embed", CODEC_VOCAB * h, (), 0, h, name="codec_embed_ar64"),
            *stack,
            GraphCost("codec_head", "head", Bucket(1, 1), "codec-head", 0, (), CODEC_VOCAB * h, CODEC_VOCAB, name="codec_head_ar1"),
            *predictor,
            encoder_graph("vocoder", 8, 110_000_000, 12, 1024, 16),
        ),
        states=(kv_state("kv-talker", 28, 8, 128), kv_state("kv-predictor", 5, 8, 128, window=17)),
        source=(f"Qwen3-TTS-12Hz-{size} as upstream builds it (QwenLM/Qwen3-TTS@022e286 modeling_qwen3_tts.py): talker Qwen3 stack "
                "(qwen3_tensor_shapes), codec embedding [3072, H] and untied codec_head, text embedding 151936 x 2048 + text_projection, "
                "predictor with 15 embeddings and 15 heads; the 12 Hz codec decoder (~0.11B) is an estimate"),
        language_weight_sets=("text", "codec-embed", "talker", "codec-head"),
        shares_weights=True,
    )


CONFIG = {"architectures": ["Qwen3TTSForConditionalGeneration"], "model_type": "qwen3_tts", "tts_model_size": "1.7B",
          "talker_config": {**talker_config("1.7B"), "num_code_groups": CODE_GROUPS, "code_predictor_config": PREDICTOR},
          "speech_tokenizer": {"codebooks": CODE_GROUPS, "frame_rate_hz": 12, "sample_rate": 24000, "samples_per_frame": 1920}}

RECIPE = plan_only(
    name="qwen3-tts", family="qwen3-tts",
    description="Qwen3-TTS 12 Hz 1.7B: text embedding + projection, codec embedding, talker prefill/decode, untied codec head, "
                "code-predictor step (static KV 17), codec decoder chunk",
    architecture="Qwen3TTSForConditionalGeneration", config=CONFIG,
    precisions={"htp": ("w8a16",), "cpu": ("fp32", "int8"), "cuda": ("fp16",), "gpu": ("fp16",), "vitisai": ("w8a16",)},
    cost=cost("1.7B"),
    blocked="qwen3-tts has no loader and exporter yet (transformers 5.24 has no Qwen3-TTS; qwen-tts 0.1.1 pins transformers 4.57.3)",
    blocked_fix="the qwen3-tts issue adds its loader by upstream tensor names and its graphs",
)

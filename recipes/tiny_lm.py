"""`tiny-lm`: an embedded Qwen3ForCausalLM-architecture recipe that synthesises its own checkpoint.

The checkpoint uses the real Qwen3 tensor names and config keys, tiny dimensions
and seeded weights, written as safetensors. Synthesis is byte-for-byte
deterministic (numpy PCG64, fixed file layout), so the SHA-256 pins below hold on
every machine; ``tests/test_tiny_lm.py`` proves it.
"""

from __future__ import annotations


from recipes.amd import AMD_GPU_THRESHOLDS, GPU_PRECISIONS, NPU_PRECISIONS
from recipes.base import Bucket, CheckpointLayout, CheckpointPin, Recipe, Thresholds
from recipes.cost import CostModel, decoder_graphs, kv_state
from recipes.lm import lm_components, lm_state_layout
from recipes.shapes import qwen3_tensor_shapes
from recipes.synth import write_seeded_checkpoint

SEED = 20261202

CONFIG: dict = {
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "vocab_size": 512,
    "hidden_size": 64,
    "intermediate_size": 192,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "hidden_act": "silu",
    "max_position_embeddings": 256,
    "rms_norm_eps": 1e-06,
    "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0},
    "tie_word_embeddings": False,
    "attention_bias": False,
    "use_sliding_window": False,
    "torch_dtype": "float32",
    "bos_token_id": None,
    "eos_token_id": None,
    "pad_token_id": 0,
}

CONTEXT = 256
PREFILL = Bucket(ar=32, context=CONTEXT)
DECODE = Bucket(ar=1, context=CONTEXT)


def _init(name: str, shape, rng):
    import numpy as np

    if name.endswith("norm.weight"):
        return 1.0 + 0.1 * rng.standard_normal(shape)
    if name == "model.embed_tokens.weight":
        return rng.standard_normal(shape)
    arr = rng.standard_normal(shape) / np.sqrt(shape[1])  # projections: unit-gain fan-in scaling gives peaked, stable logits
    return arr * 4.0 if name == "lm_head.weight" else arr


def synthesize(directory: object, cfg: dict = CONFIG, seed: int = SEED) -> None:
    """Write config.json and model.safetensors of a seeded checkpoint into `directory`."""
    write_seeded_checkpoint(directory, cfg, qwen3_tensor_shapes(cfg), seed, _init)


PIN = CheckpointPin(
    source="synthesized:tiny-lm",
    revision=f"seed-{SEED}",
    files={
        "config.json": "c87b02e7316f6d60e24676d9cb8e001199ed5b00291e1dc9f11657de66b6edad",
        "model.safetensors": "f4bf10dd8d9720fb749ceb1f55266205029a20f7ff88b006741046feca4f46aa",
    },
)

RECIPE = Recipe(
    name="tiny-lm",
    family="qwen3",
    description="tiny Qwen3ForCausalLM (2 layers, 64 wide, 512 vocab) synthesised from a seed; the embedded default",
    architecture="Qwen3ForCausalLM",
    pin=PIN,
    model_config=CONFIG,
    components=lm_components(CONFIG, [("prefill", PREFILL), ("decode", DECODE)]),
    # by accelerator kind: every CPU target, every HTP target (integer path; 4-bit weights from v73: not on qcs6490's v68),
    # GPUs (float16, weight-only 4/8-bit), the Ryzen AI NPU (Quark A16W8 for transformer blocks, A8W8, BF16)
    precisions={"cpu": ("fp32", "int8"), "qcs6490": ("w8a16",), "htp": ("w8a16", "w4a16"), "executorch": ("fp32", "int8", "8da4w"), "executorch:htp": ("w8a16",),
                "cuda": GPU_PRECISIONS, "gpu": GPU_PRECISIONS, "vitisai": NPU_PRECISIONS},
    thresholds={
        "fp32": Thresholds(min_cosine=0.99999, min_psnr_db=80.0, max_abs=1e-3, min_token_agreement=1.0, min_greedy_prefix=40),
        # Quantized acceptance for this synthetic model (random weights make argmax margins thin);
        # logits span about +-15 here, so max_abs is judged against that range.
        "int8": Thresholds(min_cosine=0.995, min_psnr_db=35.0, max_abs=1.5, min_token_agreement=0.9, min_greedy_prefix=4),
        "w8a16": Thresholds(min_cosine=0.99, min_psnr_db=30.0, max_abs=5.0, min_token_agreement=0.9, min_greedy_prefix=4),
        # w4a16 (int4 LPBQ blocks of 32, uint16 activations) on the same random weights: measured on sm8750's simulator, worst
        # per-call logits cosine 0.949 and PSNR 21.7 dB against torch, teacher-forced agreement 0.76, a first-token flip
        # (the compiled graphs equal the fake-quantized ones to 2e-4 in cosine); 8da4w's margins over its figures
        "w4a16": Thresholds(min_cosine=0.93, min_psnr_db=18.0, max_abs=6.0, min_token_agreement=0.6, min_greedy_prefix=0),
        # ExecuTorch 8da4w (4-bit grouped weights, 4-bit embedding): measured on tiny-lm's random weights, worst per-call cosine
        # 0.963, teacher-forced agreement 0.68 (thin argmax margins); a first-token flip is possible, so no exact prefix is required
        "8da4w": Thresholds(min_cosine=0.93, min_psnr_db=18.0, max_abs=6.0, min_token_agreement=0.6, min_greedy_prefix=0),
        **AMD_GPU_THRESHOLDS,
    },
    decode_steps=40,
    state_layout=lm_state_layout(CONFIG, CONTEXT),
    cost=CostModel(
        graphs=decoder_graphs(qwen3_tensor_shapes(CONFIG), CONFIG, [("prefill", PREFILL), ("decode", DECODE)], "tiny-lm"),
        # the graphs exchange KV as float32 tensors, so the runtime's buffers are float32 whatever the weights
        states=(kv_state("kv", CONFIG["num_hidden_layers"], CONFIG["num_key_value_heads"], CONFIG["head_dim"], dtype_bytes=4),),
        source="exact: recipes/shapes.py qwen3_tensor_shapes of the synthesised config",
        language_weight_sets=("tiny-lm",),
        shares_weights=False,
    ),
    synthesize=synthesize,
    adapter="decoder-lm",
    checkpoint_layout=lambda cfg: CheckpointLayout(qwen3_tensor_shapes(cfg)),
    # w4a16: LPBQ blocks of 32, so that every one of the twin's 64- and 192-deep MatMul weights has two blocks or more
    quant_options={"w4a16": {"weights": "lpbq", "block_size": 32}},
)

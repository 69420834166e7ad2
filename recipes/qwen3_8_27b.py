"""`qwen3.8-27b`: Qwen3.8-27B, the Qwen3.5 hybrid layout (plan-only until its exporter lands).

The checkpoint is public: `Qwen/Qwen3.8-27B` (QwenLM/Qwen3.8 README, News: "2026-08-14: Qwen3.8-27B is now available on
Hugging Face Hub and ModelScope"), `model_type` `qwen3_5`, `architectures` `["Qwen3_5ForConditionalGeneration"]`, the
classes of transformers 5.24's `models/qwen3_5/` (configuration_qwen3_5.py: `Qwen3_5Config.model_type = "qwen3_5"`,
line 170; modeling_qwen3_5.py: `Qwen3_5ForConditionalGeneration`, line 1735). 64 layers as 16 x (3 Gated-DeltaNet + 1
gated full attention), hidden 5120, vocab 248320 (untied), a 27-layer ViT, one MTP layer (`mtp.*`).

transformers drops `mtp.*` on load (`_keys_to_ignore_on_load_unexpected`, modeling_qwen3_5.py line 919) and, for
`Qwen3_5ForCausalLM`, `model.visual.*` too (line 1661), so its loading report cannot account for them; the recipe's own
layout (`tensor_layout`) checks every text and vision tensor by name and shape and names `mtp.*` as accounted for but not
shape-checked, so `edge-export pin qwen3.8-27b` can pin a snapshot before the exporter exists. The plan gates small-memory
targets before any export investment: nominal 4-bit language weights are about 12.5 GiB.
"""

from __future__ import annotations

from recipes.base import CheckpointLayout, CheckpointPin, plan_only
from recipes.cost import CostModel, StateCost, encoder_graph, kv_state
from recipes.families import lm_graphs, vit_params
from recipes.shapes import qwen3_5_layer_types, qwen3_5_text_tensor_shapes, qwen3_5_vlm_tensor_shapes

# config.json of the 27B layout (values of the released Qwen3.5/3.6/3.8-27B configs: ../shared/research/families.md 1.2)
REAL_CONFIG = {
    "architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5", "tie_word_embeddings": False,
    "image_token_id": 248056, "video_token_id": 248057, "vision_start_token_id": 248053, "vision_end_token_id": 248054,
    "text_config": {
        "model_type": "qwen3_5_text", "vocab_size": 248320, "hidden_size": 5120, "intermediate_size": 17408, "num_hidden_layers": 64,
        "num_attention_heads": 24, "num_key_value_heads": 4, "head_dim": 256, "linear_num_key_heads": 16, "linear_num_value_heads": 48,
        "linear_key_head_dim": 128, "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4, "full_attention_interval": 4,
        "partial_rotary_factor": 0.25, "rope_theta": 10000000.0, "attn_output_gate": True, "mtp_num_hidden_layers": 1,
        "mamba_ssm_dtype": "float32", "rms_norm_eps": 1e-6, "tie_word_embeddings": False,
    },
    "vision_config": {"model_type": "qwen3_5_vision", "depth": 27, "hidden_size": 1152, "intermediate_size": 4304, "num_heads": 16,
                      "patch_size": 16, "spatial_merge_size": 2, "temporal_patch_size": 2, "num_position_embeddings": 2304,
                      "out_hidden_size": 5120, "in_channels": 3},
}
CONTEXTS = [1024, 4096]
PRECISIONS = {"qcs6490": ("w8a16",), "htp": ("w4a16",), "cpu": ("int4",), "cuda": ("int4",), "gpu": ("int4",), "vitisai": ("w8a16",)}
BLOCKED = ("Qwen/Qwen3.8-27B is public (model_type qwen3_5, Qwen3_5ForConditionalGeneration, transformers models/qwen3_5), but "
           "edge-export has no exporter for its Gated-DeltaNet hybrid yet; its weights cannot be fetched here")
BLOCKED_FIX = ("pin your snapshot now (`edge-export pin qwen3.8-27b --checkpoint DIR`); the qwen3.8-27b issue adds its "
               "recurrent-state exporter")


def validate(cfg: dict, where: str = "config") -> None:
    from exporter.errors import UsageError

    problems = []
    if "Qwen3_5ForConditionalGeneration" not in (cfg.get("architectures") or []):
        problems.append(f"architectures {cfg.get('architectures')} is not Qwen3_5ForConditionalGeneration")
    if cfg.get("model_type") != "qwen3_5":
        problems.append(f"model_type {cfg.get('model_type')!r} is not 'qwen3_5'")
    text = cfg.get("text_config")
    if not isinstance(text, dict) or not isinstance(cfg.get("vision_config"), dict):
        problems.append("no text_config and vision_config")
    else:
        kinds = qwen3_5_layer_types(text)
        if kinds != ["linear_attention" if (i + 1) % 4 else "full_attention" for i in range(len(kinds))]:
            problems.append("layers are not 3 Gated-DeltaNet : 1 full attention")
    if problems:
        raise UsageError(f"{where}: not a Qwen3.5-layout checkpoint config: " + "; ".join(problems),
                         "point --checkpoint at a Qwen3.8-27B snapshot (config.json and *.safetensors)")


def tensor_layout(cfg: dict) -> CheckpointLayout:
    """Every text and vision tensor Qwen3_5ForConditionalGeneration names; mtp.* accounted for, not shape-checked."""
    return CheckpointLayout(qwen3_5_vlm_tensor_shapes(cfg), unchecked=("mtp.",))


def cost(cfg: dict) -> CostModel:
    text, v = cfg["text_config"], cfg["vision_config"]
    kinds = qwen3_5_layer_types(text)
    full, lin = kinds.count("full_attention"), kinds.count("linear_attention")
    kd, vd = text["linear_key_head_dim"], text["linear_value_head_dim"]
    conv_dim = 2 * text["linear_num_key_heads"] * kd + text["linear_num_value_heads"] * vd
    return CostModel(
        graphs=(
            encoder_graph("vision", 1024, vit_params(v["depth"], v["hidden_size"], v["intermediate_size"], v["patch_size"], text["hidden_size"],
                                                     v["spatial_merge_size"]), v["depth"], v["hidden_size"], v["num_heads"]),
            *lm_graphs(qwen3_5_text_tensor_shapes(text), text, 128, CONTEXTS),
        ),
        states=(
            kv_state("kv-attention", full, text["num_key_value_heads"], text["head_dim"]),
            # Gated DeltaNet: per layer a [value_heads, key_dim, value_dim] fp32 state plus the conv window (kernel - 1 columns)
            StateCost("deltanet-recurrent", "recurrent", lin, elems_fixed=text["linear_num_value_heads"] * kd * vd
                      + conv_dim * (text["linear_conv_kernel_dim"] - 1), dtype_bytes=4),
        ),
        source=("the released 27B config (Qwen3_5ForConditionalGeneration: 64 = 16 x (3 Gated-DeltaNet + 1 attention), hidden 5120, "
                "vocab 248320, 24 q / 4 kv heads x 256, 16 key / 48 value linear heads x 128); exact text shapes via recipes/shapes.py "
                "qwen3_5_text_tensor_shapes, checked against transformers 5.24's classes in tests/test_shapes.py"),
        language_weight_sets=("embed", "decoder", "head"),
        shares_weights=True,
    )


def make_recipe(cfg: dict, pin: CheckpointPin | None = None):
    validate(cfg, "recipe qwen3.8-27b")
    text = cfg["text_config"]
    flat = {"architectures": cfg["architectures"], "model_type": cfg["model_type"], **text, "vision": cfg["vision_config"]}
    return plan_only(
        name="qwen3.8-27b", family="qwen3.8-27b",
        description="Qwen3.8-27B (Qwen3.5 hybrid: Gated DeltaNet + gated attention) VLM; layer-range parts, KV + recurrent state",
        architecture="Qwen3_5ForConditionalGeneration", config=flat, precisions=PRECISIONS, cost=cost(cfg), blocked=BLOCKED,
        blocked_fix=BLOCKED_FIX, variant_for=lambda c, p=None: make_recipe(c, p), checkpoint_layout=tensor_layout,
    )


RECIPE = make_recipe(REAL_CONFIG)
CONFIG = RECIPE.model_config

"""The planner's weight formulas must match the real architectures, tensor for tensor."""

import pytest

from recipes.shapes import gemma3_text_tensor_shapes, qwen3_5_text_tensor_shapes, qwen3_tensor_shapes, split_by_layer


def _meta_params(model_cls, config):
    import torch

    with torch.device("meta"):
        m = model_cls(config)
    return {n: tuple(p.shape) for n, p in m.named_parameters()}


def test_gemma3_text_shapes_match_transformers():
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    cfg = dict(vocab_size=300, hidden_size=64, intermediate_size=96, num_hidden_layers=7, num_attention_heads=4,
               num_key_value_heads=1, head_dim=16, tie_word_embeddings=True)
    assert gemma3_text_tensor_shapes(cfg) == _meta_params(Gemma3ForCausalLM, Gemma3TextConfig(**cfg))


@pytest.mark.parametrize("tied", [False, True])
def test_qwen3_5_text_shapes_match_transformers(tied):
    from transformers import Qwen3_5TextConfig
    from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5ForCausalLM

    cfg = dict(vocab_size=300, hidden_size=64, intermediate_size=96, num_hidden_layers=8, num_attention_heads=4,
               num_key_value_heads=2, head_dim=16, linear_num_key_heads=2, linear_num_value_heads=6,
               linear_key_head_dim=8, linear_value_head_dim=8, linear_conv_kernel_dim=4, tie_word_embeddings=tied)
    assert qwen3_5_text_tensor_shapes(cfg) == _meta_params(Qwen3_5ForCausalLM, Qwen3_5TextConfig(**cfg))


def test_qwen3_5_vlm_checkpoint_layout_matches_transformers():
    """The layout `edge-export pin qwen3.8-27b` checks: Qwen3_5ForConditionalGeneration's own names, vision tower included."""
    from transformers import Qwen3_5Config, Qwen3_5ForConditionalGeneration

    from recipes.shapes import qwen3_5_vlm_tensor_shapes

    text = dict(vocab_size=300, hidden_size=64, intermediate_size=96, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=1,
                head_dim=16, linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=8, linear_value_head_dim=8,
                linear_conv_kernel_dim=4, tie_word_embeddings=False)
    vision = dict(depth=2, hidden_size=32, intermediate_size=48, num_heads=2, out_hidden_size=64, patch_size=16, spatial_merge_size=2,
                  temporal_patch_size=2, num_position_embeddings=64)
    cfg = {"text_config": text, "vision_config": vision}
    assert qwen3_5_vlm_tensor_shapes(cfg) == _meta_params(Qwen3_5ForConditionalGeneration, Qwen3_5Config(text_config=text, vision_config=vision))


def test_qwen3_shapes_match_transformers():
    from transformers import Qwen3Config, Qwen3ForCausalLM

    cfg = dict(vocab_size=300, hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
               num_key_value_heads=2, head_dim=16, tie_word_embeddings=False)
    assert qwen3_tensor_shapes(cfg) == _meta_params(Qwen3ForCausalLM, Qwen3Config(**cfg))


def test_split_by_layer_accounts_for_every_parameter():
    cfg = dict(vocab_size=300, hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
               num_key_value_heads=2, head_dim=16, tie_word_embeddings=False)
    shapes = qwen3_tensor_shapes(cfg)
    pre, layers, post = split_by_layer(shapes)
    from math import prod

    assert pre == 300 * 64 and len(layers) == 3 and post == 64 + 300 * 64
    assert pre + sum(layers) + post == sum(prod(s) for s in shapes.values())

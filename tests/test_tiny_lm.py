"""The embedded checkpoint: real Qwen3 names, deterministic bytes, matching pins."""

from exporter.hashing import sha256_file
from recipes.tiny_lm import CONFIG, RECIPE, qwen3_tensor_shapes, synthesize


def test_synthesis_is_deterministic_and_matches_the_pin(tmp_path):
    synthesize(tmp_path / "a")
    synthesize(tmp_path / "b")
    for name, pin in RECIPE.pin.files.items():
        a, b = sha256_file(tmp_path / "a" / name), sha256_file(tmp_path / "b" / name)
        assert a == b
        assert a == pin, f"{name}: synthesis no longer matches the recipe pin"


def test_tensor_names_are_those_of_transformers_qwen3():
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    cfg = Qwen3Config(**{k: v for k, v in CONFIG.items() if k not in ("architectures", "model_type")})
    with torch.device("meta"):
        model = Qwen3ForCausalLM(cfg)
    got = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    assert got == qwen3_tensor_shapes(CONFIG)


def test_components_follow_graph_naming():
    names = [c.graph_name for c in RECIPE.components]
    assert names == ["prefill_ar32_cl256", "decode_ar1_cl256"]
    dec = RECIPE.component("decode")
    assert dec.bucket.past == 255
    assert [t.name for t in dec.outputs][:3] == ["logits", "new_key_0", "new_value_0"]

"""A Qwen3ForCausalLM recipe cut into split graphs: ``embed_ar{N}``, the layer stack per (AR, context) bucket (cut into
layer-range parts where the plan's budget says so) and ``head_ar1``, with the ``kv-ring+full`` state contract of
``recipes/split_lm.py`` (every layer full attention, no ring).

``tiny-lm`` exports a Qwen3 model as one graph per bucket, which no build budget can cut; this is the same model and
the same tensor names, planned as parts, so a checkpoint whose float32 weights exceed the host's memory still builds
(issue #30). The arithmetic is ``exporter/models/split_decoder.py``'s (the HF modules' weights, HTP-friendly ops), the
driver ``verify/split_lm_driver.py``. Pure data; no torch.
"""

from __future__ import annotations

from dataclasses import replace

from recipes.base import CheckpointPin, Recipe
from recipes.cost import CostModel, kv_state
from recipes.shapes import qwen3_tensor_shapes, split_by_layer
from recipes.split_lm import SplitLM, components, cost_graphs, state_layout


def split_lm(cfg: dict, prefill_ar: int, contexts: tuple[int, ...]) -> SplitLM:
    return SplitLM(("full_attention",) * cfg["num_hidden_layers"], cfg["num_key_value_heads"], cfg["head_dim"], cfg["hidden_size"],
                   cfg["vocab_size"], 0, prefill_ar, tuple(contexts))


def cost(cfg: dict, lm: SplitLM) -> CostModel:
    shapes = qwen3_tensor_shapes(cfg)
    tied = bool(cfg.get("tie_word_embeddings"))
    post = split_by_layer(shapes)[2]
    # a tied head reads the embedding's copy; an untied one has its own weight set
    graphs = cost_graphs(lm, shapes, cfg["intermediate_size"], cfg["num_attention_heads"], head_set="embed" if tied else "head",
                         head_params=post + cfg["vocab_size"] * cfg["hidden_size"] if tied else None)
    return CostModel(
        graphs=tuple(graphs),
        states=(kv_state("kv", cfg["num_hidden_layers"], cfg["num_key_value_heads"], cfg["head_dim"], dtype_bytes=4),),
        source="exact: recipes/shapes.py qwen3_tensor_shapes of the checkpoint config",
        language_weight_sets=("embed", "decoder") if tied else ("embed", "decoder", "head"),
        shares_weights=False,
    )


def make_recipe(base: Recipe, cfg: dict, pin: CheckpointPin | None, name: str, prefill_ar: int, contexts: tuple[int, ...]) -> Recipe:
    """`base` (a Qwen3ForCausalLM recipe: precisions, thresholds, decode steps) over `cfg`, as split graphs that the plan
    may cut into parts."""
    if base.architecture != "Qwen3ForCausalLM":
        raise ValueError(f"recipe {base.name}: split Qwen3 graphs need a Qwen3ForCausalLM recipe, not {base.architecture}")
    lm = split_lm(cfg, prefill_ar, contexts)
    return replace(
        base, name=name, pin=pin, model_config=cfg,
        description=(f"{base.description}; split graphs (embedding, layer-range stack parts per bucket, head), "
                     f"prefill AR-{prefill_ar}, contexts {list(contexts)}"),
        components=components(lm), state_layout=state_layout(lm), cost=cost(cfg, lm),
        components_for=lambda splits, lm=lm: components(lm, splits),
        synthesize=None, variant_for=None,  # the base's checkpoint layout (Qwen3 tensor names) stays
    )


def _tiny() -> Recipe:
    from recipes.tiny_lm import CONFIG, CONTEXT, PIN, PREFILL, RECIPE, synthesize

    contexts = (64, CONTEXT)  # two buckets, so verify crosses a bucket transition

    def for_checkpoint(cfg: dict, pin: CheckpointPin | None = None) -> Recipe:
        if cfg.get("architectures", ["Qwen3ForCausalLM"]) != ["Qwen3ForCausalLM"]:
            raise ValueError(f"architectures is {cfg.get('architectures')}, not ['Qwen3ForCausalLM']")
        pin = pin or (PIN if cfg == CONFIG else None)
        return make_recipe(RECIPE, cfg, pin, "tiny-lm-split", PREFILL.ar, contexts)

    return replace(for_checkpoint(CONFIG), synthesize=synthesize, variant_for=for_checkpoint)


# tiny-lm's checkpoint (same pin) as split graphs; `--checkpoint DIR` plans any Qwen3ForCausalLM snapshot this way
TINY = _tiny()

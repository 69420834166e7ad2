"""`spark`: the roadmap's Gemma-3-1B-like text model, and `tiny-spark`, its embedded tiny twin.

Gemma3ForCausalLM, loaded by transformers' own class and tensor names. The recipe is a
function of the checkpoint's config: the family's structure is checked (5 sliding : 1
global layers, one KV head, tied embeddings) and the buckets follow the sliding window:
prefill AR = window / 4, contexts = window x (1, 2, 4, 8). For the 1B layout of
DESIGN.md (window 512) that is AR-128 over 512/1024/2048/4096.

Graphs (``exporter/models/gemma3.py``): ``embed_ar{N}`` (a gather), ``{prefill|decode}_ar{N}_cl{C}``
(the decoder stack, cut into ``_part{k}of{n}`` layer ranges where the plan says so) and
``head_ar1`` (final norm + tied LM head). State: a ring KV of ``window`` slots per sliding
layer, the same in every bucket, and a full KV per global layer sized by the bucket.

The real checkpoint is not public, so `spark` needs ``--checkpoint``; the tiny twin is
synthesised deterministically (6 layers, window 32, vocab 512) and pinned, and
``edge-export recipe spark --checkpoint DIR`` with that directory resolves to the same pin.
"""

from __future__ import annotations


from recipes.base import Bucket, CheckpointPin, Component, Recipe, TensorSpec, Thresholds
from recipes.cost import CostModel, GraphCost, kv_state
from recipes.shapes import gemma3_text_tensor_shapes, split_by_layer
from recipes.synth import write_seeded_checkpoint

LADDER = (1, 2, 4, 8)
PATTERN = 6  # every 6th layer is global
MASK_VALUE = -100.0

REAL_CONFIG: dict = {
    "architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text",
    "vocab_size": 262144, "hidden_size": 1152, "intermediate_size": 6912, "num_hidden_layers": 26,
    "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 256, "query_pre_attn_scalar": 256,
    "sliding_window": 512, "sliding_window_pattern": PATTERN, "max_position_embeddings": 32768,
    "rms_norm_eps": 1e-06, "hidden_activation": "gelu_pytorch_tanh", "tie_word_embeddings": True,
    "rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 1000000.0},
                        "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}},
    "final_logit_softcapping": None, "attn_logit_softcapping": None,
}

TINY_CONFIG: dict = {
    **REAL_CONFIG,
    "vocab_size": 512, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 6,
    "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 16, "query_pre_attn_scalar": 16,
    "sliding_window": 32, "max_position_embeddings": 512,
    "bos_token_id": None, "eos_token_id": None, "pad_token_id": 0, "torch_dtype": "float32",
}
SEED = 20261203


def layer_types(cfg: dict) -> list[str]:
    if cfg.get("layer_types"):
        return list(cfg["layer_types"])
    k = cfg.get("sliding_window_pattern", PATTERN)
    return ["sliding_attention" if (i + 1) % k else "full_attention" for i in range(cfg["num_hidden_layers"])]


def validate(cfg: dict, where: str = "config") -> None:
    from exporter.errors import UsageError

    problems = []
    if "Gemma3ForCausalLM" not in (cfg.get("architectures") or []):
        problems.append(f"architectures {cfg.get('architectures')} is not Gemma3ForCausalLM")
    kinds = layer_types(cfg)
    want = ["sliding_attention" if (i + 1) % PATTERN else "full_attention" for i in range(len(kinds))]
    if kinds != want:
        problems.append("layers are not 5 sliding : 1 global")
    if cfg.get("num_key_value_heads") != 1:
        problems.append(f"num_key_value_heads is {cfg.get('num_key_value_heads')}, the family has 1")
    if not cfg.get("tie_word_embeddings", True):
        problems.append("embeddings are not tied")
    w = cfg.get("sliding_window", 0)
    if w % 4 or w < 8:
        problems.append(f"sliding_window {w} is not a multiple of 4 (prefill AR = window / 4)")
    if problems:
        raise UsageError(f"{where}: not a spark-family checkpoint: " + "; ".join(problems),
                         "spark expects the Gemma-3-1B layout (DESIGN.md); use a recipe for that architecture")


def buckets(cfg: dict) -> tuple[int, list[int]]:
    w = cfg["sliding_window"]
    return w // 4, [w * m for m in LADDER]


def _stack_component(cfg: dict, role: str, b: Bucket, start: int, end: int, part: tuple[int, int] | None) -> Component:
    kinds = layer_types(cfg)
    kvh, hd, h, w = cfg["num_key_value_heads"], cfg["head_dim"], cfg["hidden_size"], cfg["sliding_window"]
    inputs = [TensorSpec("hidden", "float32", (1, b.ar, h)), TensorSpec("position_ids", "int32", (1, b.ar))]
    used = set(kinds[start:end])
    if "sliding_attention" in used:
        inputs.append(TensorSpec("mask_sliding", "float32", (1, 1, b.ar, w + b.ar)))
    if "full_attention" in used:
        inputs.append(TensorSpec("mask_global", "float32", (1, 1, b.ar, b.context)))
    outputs = [TensorSpec("hidden_out", "float32", (1, b.ar, h))]
    for i in range(start, end):
        slots = w if kinds[i] == "sliding_attention" else b.past
        inputs += [TensorSpec(f"past_key_{i}", "float32", (1, kvh, slots, hd)), TensorSpec(f"past_value_{i}", "float32", (1, kvh, slots, hd))]
        outputs += [TensorSpec(f"new_key_{i}", "float32", (1, kvh, b.ar, hd)), TensorSpec(f"new_value_{i}", "float32", (1, kvh, b.ar, hd))]
    name = f"{role}_ar{b.ar}_cl{b.context}" + (f"_part{part[0]}of{part[1]}" if part else "")
    return Component(name, role, b, tuple(inputs), tuple(outputs), layers=(start, end), part=part, graph=name)


def components(cfg: dict, splits: dict[str, list[tuple[int, int]]] | None = None) -> tuple[Component, ...]:
    """Every graph; `splits` maps a stack graph name to its layer ranges (from the plan)."""
    ar, contexts = buckets(cfg)
    h, v, n = cfg["hidden_size"], cfg["vocab_size"], cfg["num_hidden_layers"]
    out = [
        Component(f"embed_ar{a}", "embedding", Bucket(a, a), (TensorSpec("input_ids", "int32", (1, a)),),
                  (TensorSpec("hidden", "float32", (1, a, h)),), graph=f"embed_ar{a}")
        for a in (ar, 1)
    ]
    for c in contexts:
        for role, a in (("prefill", ar), ("decode", 1)):
            b = Bucket(a, c)
            ranges = (splits or {}).get(f"{role}_ar{a}_cl{c}") or [(0, n)]
            for k, (s, e) in enumerate(ranges, 1):
                out.append(_stack_component(cfg, role, b, s, e, (k, len(ranges)) if len(ranges) > 1 else None))
    out.append(Component("head_ar1", "head", Bucket(1, 1), (TensorSpec("hidden", "float32", (1, 1, h)),),
                         (TensorSpec("logits", "float32", (1, 1, v)),), graph="head_ar1"))
    return tuple(out)


def state_layout(cfg: dict) -> dict:
    """The state contract: enough for a runtime to allocate, fill, advance and move state between buckets."""
    kinds = layer_types(cfg)
    kvh, hd, w = cfg["num_key_value_heads"], cfg["head_dim"], cfg["sliding_window"]
    ar, contexts = buckets(cfg)
    buffers = []
    for i, kind in enumerate(kinds):
        for role in ("key", "value"):
            if kind == "sliding_attention":
                buffers.append({"name": f"ring_{role}_{i}", "layer": i, "role": role, "kind": "ring", "shape": [1, kvh, w, hd],
                                "time_axis": 2, "transposed": False})
            else:
                buffers.append({"name": f"global_{role}_{i}", "layer": i, "role": role, "kind": "full",
                                "shape": [1, kvh, contexts[-1], hd], "shape_by_context": {str(c): [1, kvh, c, hd] for c in contexts},
                                "time_axis": 2, "transposed": False})
    return {
        "kind": "kv-ring+full",
        "dtype": "float32",
        "layers": len(kinds),
        "layer_types": kinds,
        "window": w,
        "hidden_size": cfg["hidden_size"],
        "vocab_size": cfg["vocab_size"],
        "prefill_ar": ar,
        "contexts": contexts,
        "buffers": buffers,
        "call": ("one token step = embed_ar{N}(input_ids) -> hidden; the stack graph(s) of the chosen bucket in part order, "
                 "each taking the previous hidden_out as hidden; head_ar1(hidden_out[:, n_valid-1:n_valid]) -> logits of the last real token"),
        "bucket_selection": "for a call of n real tokens with AR slots, use the smallest context C with n_past + n <= C and n_past <= C - AR",
        "transition": ("moving to a larger context C2: allocate global buffers [1, kv_heads, C2, head_dim] and copy rows [0, n_past) from the "
                       "old ones; ring buffers are identical in every bucket and stay as they are"),
        "graph_inputs": {
            "sliding": "past_{key|value}_{i} = the whole ring buffer [1, kv_heads, window, head_dim], slot order",
            "global": "past_{key|value}_{i} = buffer[:, :, 0:C-AR, :] for the bucket's graph with AR tokens per call",
        },
        "graph_outputs": "new_{key|value}_{i} has AR rows; row j belongs to the j-th token of the call (keys already rotated)",
        "write": {
            "ring": "row j (j < n_valid) goes to ring slot (n_past + j) mod window; older contents of that slot are overwritten (the wrap)",
            "global": "row j (j < n_valid) goes to slot n_past + j",
            "then": "n_past += n_valid",
        },
        "ring_slot_position": "after n_past tokens, ring slot s holds position p = n_past - 1 - ((n_past - 1 - s) mod window) if p >= 0, else nothing",
        "positions": "position_ids[j] = n_past + j for real tokens; padded tokens repeat the last real position",
        "padding": "prompts shorter than AR are right-padded with token 0; rows of padded tokens are never written and their outputs are ignored",
        "mask": {
            "value_hidden": MASK_VALUE,
            "value_visible": 0.0,
            "sliding": {"shape": [1, 1, "AR", "window + AR"],
                        "rule": ("row j (position P = n_past + j) sees ring column s if slot s holds position p with P - p < window, "
                                 "and new column window + k for k <= j")},
            "global": {"shape": [1, 1, "AR", "C"],
                       "rule": "row j sees past slots [0, n_past) and new column C - AR + k for k <= j"},
        },
        "capacity": f"a sequence may hold at most {contexts[-1]} tokens (the largest bucket); a longer one is refused, never truncated",
        "reset": "set n_past = 0 and return to the smallest bucket; buffer contents need not be cleared (the masks hide them)",
        "cancellation": "drop the new rows of the cancelled call without writing them; n_past and the bucket are unchanged",
        "sampler": {
            "runs_on": "cpu (the runtime), over head_ar1's logits [1, 1, vocab] float32",
            "greedy": "token = argmax(logits) (lowest index on ties)",
            "inputs": {"temperature": "float > 0", "top_k": "int >= 1 (vocab = off)", "top_p": "float in (0, 1] (1 = off)", "seed": "uint64"},
            "top_k_top_p": ("z = logits / temperature; keep the top_k largest; softmax; keep the smallest prefix of tokens sorted by "
                            "probability whose mass reaches top_p; renormalise; draw with a PCG64 generator seeded by seed"),
            "outputs": {"token": "int32", "probability": "float32 of the drawn token after filtering"},
            "reference": "verify/sampler.py",
        },
    }


def cost(cfg: dict) -> CostModel:
    ar, contexts = buckets(cfg)
    shapes = gemma3_text_tensor_shapes(cfg)
    pre, layers, post = split_by_layer(shapes)
    h, i_, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    kinds = layer_types(cfg)
    graphs = [GraphCost(f"embed_ar{a}", "embedding", Bucket(a, a), "embed", pre, (), 0, h, name=f"embed_ar{a}") for a in (ar, 1)]
    for c in contexts:
        for role, a in (("prefill", ar), ("decode", 1)):
            graphs.append(GraphCost(f"{role}_ar{a}_cl{c}", role, Bucket(a, c), "decoder", 0, layers, 0, 8 * h + 3 * i_,
                                    cfg["num_attention_heads"], name=f"{role}_ar{a}_cl{c}"))
    graphs.append(GraphCost("head_ar1", "head", Bucket(1, 1), "embed", 0, (), post + v * h, v, name="head_ar1"))
    glob = kinds.count("full_attention")
    return CostModel(
        graphs=tuple(graphs),
        states=(kv_state("kv-sliding", len(kinds) - glob, cfg["num_key_value_heads"], cfg["head_dim"], window=cfg["sliding_window"], dtype_bytes=4),
                kv_state("kv-global", glob, cfg["num_key_value_heads"], cfg["head_dim"], dtype_bytes=4)),
        source="exact: recipes/shapes.py gemma3_text_tensor_shapes of the checkpoint config (checked against transformers)",
        language_weight_sets=("embed", "decoder"),
        shares_weights=True,
    )


THRESHOLDS = {
    "fp32": Thresholds(min_cosine=0.99999, min_psnr_db=70.0, max_abs=1e-3, min_token_agreement=1.0, min_greedy_prefix=128),
    # quantized acceptance for the synthetic tiny checkpoint, set from measurement (random weights: thin argmax margins)
    "int8": Thresholds(min_cosine=0.99, min_psnr_db=30.0, max_abs=2.0, min_token_agreement=0.85, min_greedy_prefix=3),
    # measured on the tiny twin (6 layers in one stack graph, uint8 per-tensor weights): worst per-call cosine 0.956 on a
    # 16-wide KV row of the last layer, PSNR 23 dB; 128-token greedy agreement 1.0 on the HTP simulator
    "w8a16": Thresholds(min_cosine=0.95, min_psnr_db=20.0, max_abs=4.0, min_token_agreement=0.9, min_greedy_prefix=3),
    # ExecuTorch 8da4w (4-bit grouped weights, 4-bit embedding): as tiny-lm's, set from measurement on random weights
    "8da4w": Thresholds(min_cosine=0.93, min_psnr_db=18.0, max_abs=6.0, min_token_agreement=0.6, min_greedy_prefix=0),
}


def _init(name: str, shape, rng):
    import numpy as np

    if name.endswith("norm.weight"):  # Gemma norms scale by (1 + w)
        return 0.1 * rng.standard_normal(shape)
    if name == "model.embed_tokens.weight":  # scaled by sqrt(hidden) in the model; also the tied head
        return rng.standard_normal(shape) * (4.0 / shape[1] ** 0.5)
    return rng.standard_normal(shape) / np.sqrt(shape[1])


def synthesize(directory: object, cfg: dict = TINY_CONFIG, seed: int = SEED) -> None:
    """Write config.json and model.safetensors of a seeded Gemma3ForCausalLM checkpoint."""
    write_seeded_checkpoint(directory, cfg, gemma3_text_tensor_shapes(cfg), seed, _init)


TINY_PIN = CheckpointPin(
    source="synthesized:tiny-spark",
    revision=f"seed-{SEED}",
    files={
        "config.json": "44e40556fd85fe5a0fb8cdfb6463326003e9e063076948c0f243d7fab9d76118",
        "model.safetensors": "510bfe781035b4494496cf4318182ce2c87a94bbf6f65617d3fc93d65e71abbe",
    },
)

PRECISIONS = {"cpu": ("fp32", "int8"), "htp": ("w8a16",), "executorch": ("fp32", "int8", "8da4w"), "executorch:htp": ("w8a16",), "cuda": ("fp32",), "gpu": ("fp16",), "vitisai": ("w8a16",)}


def make_recipe(cfg: dict, pin: CheckpointPin | None, name: str, blocked: str | None = None, synth=None, blocked_fix: str = "") -> Recipe:
    validate(cfg, f"recipe {name}")
    return Recipe(
        name=name,
        family="spark",
        description=("Gemma-3-style sliding-window text model: embedding, prefill/decode per context bucket, ring/full KV, "
                     f"LM head, sampler contract (window {cfg['sliding_window']}, buckets {buckets(cfg)[1]})"),
        architecture="Gemma3ForCausalLM",
        pin=pin,
        model_config=cfg,
        components=components(cfg),
        precisions=PRECISIONS,
        thresholds=THRESHOLDS,
        decode_steps=128,
        state_layout=state_layout(cfg),
        cost=cost(cfg),
        blocked=blocked,
        **({"blocked_fix": blocked_fix} if blocked_fix else {}),
        synthesize=synth,
        variant_for=for_checkpoint,
        components_for=lambda splits, cfg=cfg: components(cfg, splits),
    )


def for_checkpoint(cfg: dict) -> Recipe:
    """`spark` for the checkpoint whose config.json is `cfg`: the tiny twin's pin if it is that one, else unpinned."""
    pin = TINY_PIN if cfg == TINY_CONFIG else None
    return make_recipe(cfg, pin, "spark")


RECIPE = make_recipe(REAL_CONFIG, None, "spark",
                     blocked="spark's checkpoint is not public, so the recipe needs one named on the command line",
                     blocked_fix=("pass --checkpoint DIR (a Gemma3ForCausalLM snapshot of the family's layout: config.json and "
                                  "*.safetensors); to try the tiny twin: edge-export synthesize tiny-spark DIR"))
TINY = make_recipe(TINY_CONFIG, TINY_PIN, "tiny-spark", synth=synthesize)

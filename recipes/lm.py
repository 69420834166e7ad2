"""Graph contract shared by decoder-only language-model recipes.

One graph per (role, bucket): ``input_ids``, ``position_ids`` and an additive
``attention_mask`` in, plus the past KV of every layer; ``logits`` and only the
*new* KV rows out. The runtime owns the KV buffers and writes the new rows in;
the graph never scatters into state (HTP rejects ScatterND/Expand on KV).
"""

from __future__ import annotations

from recipes.base import Bucket, Component, TensorSpec

MASK_VALUE = -100.0  # additive mask for hidden slots; keeps the uint16 range of scores+mask tight


def lm_components(config: dict, buckets: list[tuple[str, Bucket]]) -> tuple[Component, ...]:
    n_layers = config["num_hidden_layers"]
    kvh = config["num_key_value_heads"]
    hd = config["head_dim"]
    vocab = config["vocab_size"]
    out = []
    for role, b in buckets:
        inputs = [
            TensorSpec("input_ids", "int32", (1, b.ar)),
            TensorSpec("position_ids", "int32", (1, b.ar)),
            TensorSpec("attention_mask", "float32", (1, 1, b.ar, b.context)),
        ]
        outputs = [TensorSpec("logits", "float32", (1, b.ar, vocab))]
        for i in range(n_layers):
            inputs.append(TensorSpec(f"past_key_{i}", "float32", (1, kvh, b.past, hd)))
            inputs.append(TensorSpec(f"past_value_{i}", "float32", (1, kvh, b.past, hd)))
            outputs.append(TensorSpec(f"new_key_{i}", "float32", (1, kvh, b.ar, hd)))
            outputs.append(TensorSpec(f"new_value_{i}", "float32", (1, kvh, b.ar, hd)))
        out.append(Component(name=role, role=role, bucket=b, inputs=tuple(inputs), outputs=tuple(outputs)))
    return tuple(out)


def lm_state_layout(config: dict, context: int) -> dict:
    """The KV contract, precise enough for a runtime to drive the graphs alone."""
    n_layers = config["num_hidden_layers"]
    kvh = config["num_key_value_heads"]
    hd = config["head_dim"]
    return {
        "kind": "kv-cache",
        "dtype": "float32",
        "layers": n_layers,
        "buffers": [
            {"name": f"{role}_{i}", "layer": i, "role": role, "shape": [1, kvh, context, hd], "time_axis": 2, "transposed": False}
            for i in range(n_layers)
            for role in ("key", "value")
        ],
        "graph_inputs": "past_{key|value}_{i} = buffer[:, :, 0:context-AR, :] for the graph with AR tokens per call",
        "graph_outputs": "new_{key|value}_{i} has AR rows; row j belongs to the j-th token of the call (keys already rotated)",
        "write": "after a call with n_valid real tokens, copy rows [0, n_valid) of new_* into buffer slots [n_past, n_past+n_valid); then n_past += n_valid",
        "capacity": "a call with AR tokens requires n_past + n_valid <= context and n_past <= context - AR",
        "positions": "position_ids[j] = n_past + j for real tokens; padded tokens repeat the last real position",
        "padding": "prompts shorter than AR are right-padded with token 0; logits of padded rows are ignored",
        "mask": {
            "shape": [1, 1, "AR", context],
            "value_hidden": MASK_VALUE,
            "value_visible": 0.0,
            "rule": "row j sees past slots [0, n_past) and new columns context-AR+k for k <= j; everything else is value_hidden",
        },
        "reset": "set n_past = 0; buffer contents need not be cleared (masked)",
        "cancellation": "drop the new_* rows of the cancelled call without writing them; n_past is unchanged",
    }

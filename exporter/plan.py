"""Execution plans: what will be built for (recipe, target, precision), or a recorded rejection.

A plan never substitutes: an unsupported precision, format or a request that
does not fit is a Rejection with a reason code, not a quieter alternative.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from exporter.targets import Target
from recipes.base import PRECISIONS, Recipe

BYTES_PER_WEIGHT = {"fp32": 4.0, "int8": 1.0, "w8a16": 1.0}
FORMAT_FOR_PROVIDER = {"CPUExecutionProvider": "onnx", "QNNExecutionProvider": "qnn-context"}


@dataclass(frozen=True)
class Rejection:
    code: str  # capacity | precision-unsupported | format-unsupported | graph-too-large | missing-prerequisite
    reason: str
    fix: str


@dataclass(frozen=True)
class ArtifactPlan:
    component: str
    graph_name: str
    ar: int
    context: int
    format: str
    precision: str
    weight_bytes: int


@dataclass(frozen=True)
class Plan:
    recipe: str
    target: str
    precision: str
    format: str
    artifacts: tuple[ArtifactPlan, ...] = ()
    memory: dict = field(default_factory=dict)
    rejection: Rejection | None = None

    @property
    def admitted(self) -> bool:
        return self.rejection is None

    def to_json(self) -> dict:
        d = asdict(self)
        d["admitted"] = self.admitted
        return d


def _param_count(recipe: Recipe) -> int:
    from math import prod

    from recipes.lm import qwen3_tensor_shapes

    return sum(prod(s) for s in qwen3_tensor_shapes(recipe.model_config).values())


def make_plan(recipe: Recipe, target: Target, precision: str | None = None) -> Plan:
    offered = recipe.precisions.get(target.name, ())
    fmt = FORMAT_FOR_PROVIDER.get(target.execution_provider, target.formats[0])
    wanted = precision or (offered[0] if offered else (target.precisions[0] if target.precisions else "fp32"))

    def reject(code: str, reason: str, fix: str) -> Plan:
        return Plan(recipe.name, target.name, wanted, fmt, rejection=Rejection(code, reason, fix))

    if wanted not in PRECISIONS:
        return reject("precision-unsupported", f"precision {wanted!r} is not a known scheme", f"choose one of {sorted(PRECISIONS)}")
    if wanted not in target.precisions:
        return reject(
            "precision-unsupported",
            f"target {target.name} ({target.accelerator.kind}) does not run {wanted}; it accepts {list(target.precisions)}",
            f"ask for one of {list(target.precisions)}, or choose another target",
        )
    if wanted not in offered:
        return reject(
            "precision-unsupported",
            f"recipe {recipe.name} defines no {wanted} build for {target.name} (it defines {list(offered) or 'none'})",
            "add the precision and its parity thresholds to the recipe",
        )
    if fmt not in target.formats:
        return reject("format-unsupported", f"target {target.name} does not accept {fmt}", f"formats accepted: {list(target.formats)}")

    params = _param_count(recipe)
    per_graph = int(params * BYTES_PER_WEIGHT[wanted])
    cfg = recipe.model_config
    artifacts = tuple(
        ArtifactPlan(c.name, c.graph_name, c.bucket.ar, c.bucket.context, fmt, wanted, per_graph) for c in recipe.components
    )
    shared = target.accelerator.weight_sharing
    weights = per_graph if shared else per_graph * len(artifacts)
    ctx = max(c.bucket.context for c in recipe.components)
    kv = 2 * cfg["num_hidden_layers"] * cfg["num_key_value_heads"] * ctx * cfg["head_dim"] * 4
    ar = max(c.bucket.ar for c in recipe.components)
    activations = ar * (cfg["vocab_size"] + 4 * cfg["intermediate_size"] + ctx * cfg["num_attention_heads"]) * 4
    runtime = 64 << 20
    subtotal = weights + kv + activations + runtime
    margin = subtotal // 5
    memory = {
        "weights_bytes": weights,
        "weights_counted_per_graph": not shared,
        "kv_bytes": kv,
        "activations_bytes": activations,
        "runtime_overhead_bytes": runtime,
        "loading_peak_bytes": weights + per_graph,
        "safety_margin_bytes": margin,
        "total_bytes": subtotal + margin,
        "budget_bytes": target.ram_bytes,
    }
    limit = target.accelerator.per_graph_limit_bytes
    if limit is not None and per_graph > limit:
        return Plan(recipe.name, target.name, wanted, fmt, artifacts, memory,
                    Rejection("graph-too-large", f"each graph holds {per_graph} weight bytes, over the per-graph limit {limit}", "split the graph by layer range"))
    if memory["total_bytes"] > target.ram_bytes:
        return Plan(recipe.name, target.name, wanted, fmt, artifacts, memory,
                    Rejection("capacity", f"needs {memory['total_bytes']} bytes, the target has {target.ram_bytes}", "choose a target with more memory; no smaller model is substituted"))
    return Plan(recipe.name, target.name, wanted, fmt, artifacts, memory)

"""Execution plans: what will be built for (recipe, target, precision, context), or a recorded rejection.

A plan never substitutes. An unsupported precision, format or context, a graph
that cannot be cut under the accelerator's per-graph limit, or a model that does
not fit the target's memory is a Rejection with a reason code, not a quieter
alternative. What this host lacks to build an admitted plan (a tool, an execution
provider, a backend, a recipe's export path) is listed as missing prerequisites.

Rejection codes:
  precision-unsupported  the target's accelerator cannot run the precision
  precision-undefined    the recipe defines no such build (no parity thresholds for it)
  format-unsupported     the target does not load that artifact format
  context-unsupported    the recipe has no context bucket of that size
  graph-too-large        one layer (or the embedding/head) is over the per-graph limit
  capacity               the plan's memory does not fit the target's budget
"""

from __future__ import annotations

from dataclasses import dataclass, field
from exporter.prereq import Prerequisite, missing_for, verification_plan
from exporter.targets import GiB, MiB, Target, all_targets
from recipes.base import PRECISIONS, Precision, Recipe
from recipes.cost import GraphCost

SAFETY_MARGIN = 0.10  # fraction added on top of the steady/loading requirement
HOST_STAGING_OVERHEAD = 512 * MiB  # host-side runtime when the weights live in separate VRAM


@dataclass(frozen=True)
class Rejection:
    code: str
    reason: str
    fix: str

    def to_json(self) -> dict:
        return {"code": self.code, "reason": self.reason, "fix": self.fix}


@dataclass(frozen=True)
class ArtifactPlan:
    component: str
    graph_name: str
    role: str
    ar: int
    context: int
    format: str
    precision: str
    part: int  # 1-based
    parts: int
    layers: tuple[int, int]  # [start, end) of the layer stack in this part
    weight_set: str
    weight_bytes: int

    def to_json(self) -> dict:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.__dict__.items()}


@dataclass(frozen=True)
class Plan:
    recipe: str
    target: str
    precision: str
    format: str
    requested: dict  # what was asked: target name as typed, precision, context, ram, format
    artifacts: tuple[ArtifactPlan, ...] = ()
    memory: dict = field(default_factory=dict)
    rejection: Rejection | None = None
    missing: tuple[Prerequisite, ...] = ()
    cost_source: str = ""
    verification: dict = field(default_factory=dict)  # where parity is measured (prereq.verification_plan)
    build_memory: dict = field(default_factory=dict)  # the build's budget, what cut the parts, its estimated peak

    @property
    def admitted(self) -> bool:
        return self.rejection is None

    @property
    def buildable(self) -> bool:
        return self.admitted and not self.missing

    def to_json(self) -> dict:
        return {
            "recipe": self.recipe,
            "target": self.target,
            "precision": self.precision,
            "format": self.format,
            "requested": dict(self.requested),
            "admitted": self.admitted,
            "buildable": self.buildable,
            "rejection": self.rejection.to_json() if self.rejection else None,
            "missing_prerequisites": [m.to_json() for m in self.missing],
            "artifacts": [a.to_json() for a in self.artifacts],
            "memory": dict(self.memory),
            "cost_source": self.cost_source,
            "verification": dict(self.verification),
            "build_memory": dict(self.build_memory),
        }


def gib(n: int | float) -> str:
    return f"{n / GiB:.2f} GiB"


def _split_parts(g: GraphCost, bpw: float, limit: int | None, what_limit: str = "the per-graph limit") -> list[tuple[tuple[int, int], int]] | Rejection:
    """Layer-range parts of one graph, each at most `limit` weight bytes: [((start, end), bytes)]."""
    n = len(g.layer_params)
    total = int(g.params * bpw)
    if limit is None or total <= limit:
        return [((0, n), total)]
    chunks = [("pre", g.pre_params)] + [(i, p) for i, p in enumerate(g.layer_params)] + [("post", g.post_params)]
    for label, p in chunks:
        if p * bpw > limit:
            what = "the embedding" if label == "pre" else "the final norm and head" if label == "post" else f"layer {label}"
            return Rejection("graph-too-large", f"{g.graph_name}: {what} alone holds {gib(p * bpw)}, over {what_limit} {gib(limit)}",
                             "split that tensor (e.g. a vocabulary-sharded head) in the recipe; a part cannot be cut smaller than one layer")
    parts: list[list] = []
    cur: list = []
    cur_bytes = 0.0
    for label, p in chunks:
        b = p * bpw
        if cur and cur_bytes + b > limit:
            parts.append(cur)
            cur, cur_bytes = [], 0.0
        cur.append((label, b))
        cur_bytes += b
    parts.append(cur)
    out = []
    for part in parts:
        idx = [lbl for lbl, _ in part if isinstance(lbl, int)]
        if idx:
            rng = (min(idx), max(idx) + 1)
        else:  # a part of only the embedding or only the head
            rng = (0, 0) if part[0][0] == "pre" else (n, n)
        out.append((rng, int(sum(b for _, b in part))))
    return out


def weight_sharing(recipe: Recipe, target: Target, requested: bool = True, fmt: str | None = None) -> dict:
    """Whether the graphs of one weight set share one copy on this target, and why not if they do not.

    On the QNN HTP the graphs of one weight set and layer range are compiled into one weight-shared context binary
    (`qnn_stages.compile_shared_groups`); its load is verified on a device only (exporter/htp_sharing.py), which
    the plan states in `load_verified`."""
    from exporter import backends
    from exporter.htp_sharing import LOAD_VERIFIED, PARITY_MEASURED_ON, SIMULATOR_CANNOT_LOAD

    acc, rec = target.accelerator.weight_sharing, recipe.cost.shares_weights
    fmt = fmt or target.formats[0]
    backend = backends.find(fmt)
    tool = backend is not None and backend.shares_weights
    if tool:  # the QNN HTP's weight-shared context binaries
        extra = {"load_verified": LOAD_VERIFIED, "parity_measured_on": PARITY_MEASURED_ON}
        note = ("the graphs of each weight set and layer range ship in one weight-shared context binary; "
                f"parity is measured on {PARITY_MEASURED_ON}, and the shared load is verified on a device only: "
                f"{SIMULATOR_CANNOT_LOAD}")
    else:  # ONNX Runtime sessions could share initializers (SessionOptions.add_initializer): not implemented
        extra, note = {}, f"the {fmt} format ships every graph with its own weights; sharing them between sessions is not implemented"
    if not acc:
        note, extra = f"the {target.accelerator.kind} accelerator of {target.name} has no weight sharing", {}
    elif not rec:
        note, extra = f"recipe {recipe.name} builds no weight-shared graphs", {}
    elif tool and not requested:
        note, extra = "not requested (--no-weight-sharing): every graph carries its own weights and loads on the HTP simulator", {}
    return {"accelerator": acc, "recipe": rec, "toolchain": tool, "requested": requested,
            "used": acc and rec and tool and requested, "note": note, **extra}


def _memory(recipe: Recipe, target: Target, precision: Precision, graphs: list[GraphCost], artifacts: list[ArtifactPlan],
            share_weights: bool = True, fmt: str | None = None) -> dict:
    bpw = precision.bytes_per_weight
    act_bytes = precision.act_bits // 8
    sharing = weight_sharing(recipe, target, share_weights, fmt)
    shared = sharing["used"]
    per_set: dict[str, int] = {}
    for a in artifacts:
        key = (a.weight_set, a.part, a.layers)
        per_set[str(key)] = max(per_set.get(str(key), 0), a.weight_bytes)
    shared_weights = sum(per_set.values())
    all_graphs = sum(a.weight_bytes for a in artifacts)
    # Without sharing, only the active bucket's stack graphs need to be resident: the KV state is
    # runtime-owned, so at a bucket transition the runtime releases the old bucket's sessions and
    # loads the next ones (recorded as the residency rule and its transition load, never assumed silently).
    by_bucket: dict[int, int] = {}
    for a in artifacts:
        if a.role in ("prefill", "decode"):
            by_bucket[a.context] = by_bucket.get(a.context, 0) + a.weight_bytes
    unbucketed = sum(a.weight_bytes for a in artifacts if a.role not in ("prefill", "decode"))
    if shared:
        residency = {"policy": "all-buckets", "rule": "every graph stays loaded; one weight copy is shared between them",
                     "transition_load_bytes": 0}
        weights = shared_weights
    elif len(by_bucket) > 1:
        residency = {"policy": "active-bucket",
                     "rule": ("keep the unbucketed graphs (embedding, head, encoders) and the prefill/decode graphs of the active "
                              "context bucket loaded; on a move to a larger bucket, release the old bucket's sessions, then load "
                              "the new ones (the KV buffers are runtime-owned and survive the swap)"),
                     "transition_load_bytes": max(by_bucket.values())}
        weights = unbucketed + max(by_bucket.values())
    else:
        residency = {"policy": "all-buckets", "rule": "every graph stays loaded, each with its own weights", "transition_load_bytes": 0}
        weights = all_graphs
    seen_sets: dict[str, int] = {}
    for g in graphs:
        seen_sets.setdefault(g.weight_set, g.params)
    nominal_params = sum(seen_sets.values())
    lang = sum(p for s, p in seen_sets.items() if s in recipe.cost.language_weight_sets)
    nominal = {
        "parameters": nominal_params,
        "nominal_weight_bytes": int(nominal_params * precision.weight_bits / 8),
        "language_parameters": lang,
        "nominal_language_weight_bytes": int(lang * precision.weight_bits / 8),
    }
    contexts = sorted({g.bucket.context for g in graphs if g.role in ("prefill", "decode")})
    state_by_ctx = {c: sum(s.bytes_at(c, act_bytes) for s in recipe.cost.states) for c in contexts}
    state = max(state_by_ctx.values(), default=0)
    transition = max((state_by_ctx[a] + state_by_ctx[b] for a, b in zip(contexts, contexts[1:])), default=state)
    activations = max(
        ((g.bucket.ar * g.act_elems_per_token + g.bucket.ar * g.score_heads * g.bucket.context) * act_bytes for g in graphs),
        default=0,
    )
    largest = max((a.weight_bytes for a in artifacts), default=0)
    # shared RAM: the graph being deserialised is held twice for a moment; separate VRAM: the
    # host stages it and the device receives only the final copy
    loading_peak = weights if target.vram_bytes is not None else weights + largest
    runtime = target.runtime_overhead_bytes
    steady = weights + max(state, transition) + activations + runtime
    loading = loading_peak + runtime
    base = max(steady, loading)
    margin = int(base * SAFETY_MARGIN)
    required = base + margin
    # what sharing would save where only the toolchain stands in the way (reported, not assumed)
    if not shared and sharing["accelerator"] and sharing["recipe"] and weights > shared_weights:
        delta = weights - shared_weights
        required_if_shared = int((max(steady - delta, loading - delta)) * (1 + SAFETY_MARGIN))
    else:
        required_if_shared = None
    mem = {
        "weights_bytes": weights,
        "weights_all_graphs_bytes": all_graphs,
        "residency": residency,
        "weights_shared_between_graphs": shared,
        "weight_sharing": sharing,
        "weight_bytes_per_parameter": bpw,
        **nominal,
        "state_bytes_by_context": {str(c): b for c, b in state_by_ctx.items()},
        "state_bytes": state,
        "state_transition_bytes": transition,
        "activations_bytes": activations,
        "runtime_overhead_bytes": runtime,
        "loading_peak_bytes": loading_peak,
        "steady_bytes": steady,
        "safety_margin_bytes": margin,
        "required_bytes": required,
        "required_bytes_if_weights_shared": required_if_shared,
        "budget_kind": "vram" if target.vram_bytes is not None else "shared-ram",
        "budget_bytes": target.budget_bytes,
        "ram_bytes": target.ram_bytes,
        "os_reserved_bytes": target.os_reserved_bytes,
        "headroom_bytes": target.budget_bytes - required,
    }
    if target.vram_bytes is not None:
        host = largest + HOST_STAGING_OVERHEAD
        mem |= {"host_required_bytes": host, "host_budget_bytes": target.host_budget_bytes}
    return mem


BUDGET_LIMIT = "the build budget's part size"


def _part_limit(recipe: Recipe, acc_limit: int | None, bpw: float, budget) -> tuple[int | None, str]:
    """The most weight bytes (at the precision's width) one part may hold: the accelerator's per-graph limit and, where
    a stack can be cut, the build budget's part size (float32 bytes while the build holds it)."""
    limits = []
    if acc_limit is not None:
        limits.append((acc_limit, "the per-graph limit"))
    if budget is not None and recipe.components_for is not None:
        limits.append((int(budget.part_limit_bytes * bpw / 4), BUDGET_LIMIT))
    return min(limits, default=(None, ""))


def role_bytes_per_weight(recipe: Recipe, precision: str, role: str, bpw: float) -> float:
    """Bytes per weight of a graph of `role`: the precision's, or 8 bits where the recipe keeps that role's MatMul weights
    at 8 inside a 4-bit build (quant option roles[role].matmul_bits, e.g. the LM head)."""
    bits = (((recipe.quant_options.get(precision) or {}).get("roles") or {}).get(role) or {}).get("matmul_bits")
    return 1.0 if bits == 8 and PRECISIONS[precision].weight_bits == 4 else bpw


def _build_memory(recipe: Recipe, artifacts: list[ArtifactPlan], bpw: float, what_limit: str, budget) -> dict:
    from exporter import build_memory as bm

    # float32 bytes a build stage holds
    largest = max((int(a.weight_bytes * 4 / role_bytes_per_weight(recipe, a.precision, a.role, bpw)) for a in artifacts), default=0)
    return {
        "budget": budget.to_json() if budget is not None else None,
        "parts_cut_by": what_limit if any(a.parts > 1 for a in artifacts) else "none",
        "cuttable": recipe.components_for is not None,
        "largest_part_fp32_bytes": largest,
        "estimated_peak_bytes": bm.estimated_peak(largest),
        "estimate": f"{bm.WORKING_SET_BYTES / bm.GiB:.1f} GiB working set + {bm.PART_FACTOR} x the largest part's float32 bytes",
    }


def make_plan(
    recipe: Recipe,
    target: Target,
    precision: str | None = None,
    context: int | None = None,
    fmt: str | None = None,
    requested_target: str | None = None,
    budget=None,
    share_weights: bool = True,
) -> Plan:
    """The plan of one bundle. `budget` (exporter/build_memory.BuildBudget, a build's memory budget): where the target
    sets no tighter per-graph limit it cuts a stack that can be cut into parts whose float32 tensors fit it, and a build
    that cannot fit it (estimated peak above it, or one layer over its part size) names `build-memory` as a missing
    prerequisite, the target's plan unchanged; without one (the matrix's target-only plans) the cut is
    the target's alone and the estimate is reported against no budget. `share_weights` False (--no-weight-sharing):
    every graph keeps its own weights where the target would share them (loadable on the QNN simulator), counted so."""
    from exporter.errors import UnknownNameError

    fmt = fmt or target.formats[0]
    known_formats = sorted({f for t in all_targets() for f in t.formats})
    if fmt not in known_formats:  # a name, never a path: it becomes part of record and bundle names
        raise UnknownNameError("format", fmt, known_formats)
    if context is not None and (not isinstance(context, int) or context <= 0):
        from exporter.errors import UsageError

        raise UsageError(f"--context {context!r} is not a positive number of tokens", f"choose one of the recipe's buckets: {recipe.cost.contexts()}")
    offered = recipe.precisions_for(target, fmt)
    wanted = precision or (offered[0] if offered else (target.precisions[0] if target.precisions else "fp32"))
    if wanted not in PRECISIONS:
        raise UnknownNameError("precision", wanted, sorted(PRECISIONS))
    requested = {"target": requested_target or target.name, "precision": precision, "context": context, "format": fmt, "ram_bytes": target.ram_bytes}
    if not share_weights:
        requested["weight_sharing"] = False
    head = dict(recipe=recipe.name, target=target.name, precision=wanted, format=fmt, requested=requested, cost_source=recipe.cost.source)

    def reject(code: str, reason: str, fix: str, **kw) -> Plan:
        return Plan(**head, rejection=Rejection(code, reason, fix), **kw)

    acc = target.accelerator
    p = PRECISIONS[wanted]
    if wanted not in target.precisions:
        why = ""
        if acc.kind == "htp" and not acc.float_support and p.method in ("float", "fp16-convert"):
            why = f"; HTP v{acc.htp_arch} has no float path"
        elif p.weight_bits == 4 and not acc.int4_weights:
            why = f"; {acc.kind}{f' v{acc.htp_arch}' if acc.htp_arch else ''} has no 4-bit weight path"
        return reject(
            "precision-unsupported",
            f"target {target.name} does not run {wanted}{why}; it accepts {list(target.precisions)}",
            f"ask for one of {list(target.precisions)} explicitly, or choose another target; no other precision is substituted",
        )
    if wanted not in offered:
        return reject(
            "precision-undefined",
            f"recipe {recipe.name} defines no {wanted} build for {target.name} (it defines {list(offered) or 'none'} there)",
            "add the precision, its parity thresholds and its target to the recipe",
        )
    if fmt not in target.formats:
        return reject("format-unsupported", f"target {target.name} does not load {fmt}", f"formats it loads: {list(target.formats)}")

    graphs = list(recipe.cost.graphs)
    contexts = recipe.cost.contexts()
    if context is not None:
        if context not in contexts:
            return reject(
                "context-unsupported",
                f"recipe {recipe.name} has context buckets {contexts}; {context} is not one of them",
                f"ask for one of {contexts}; a shorter context is never substituted",
            )
        graphs = [g for g in graphs if g.role not in ("prefill", "decode") or g.bucket.context <= context]

    bpw = p.bytes_per_weight
    limit, what_limit = _part_limit(recipe, acc.per_graph_limit_bytes, bpw, budget)

    def cut(limit, what_limit) -> list[ArtifactPlan] | Rejection:
        out: list[ArtifactPlan] = []
        for g in graphs:
            parts = _split_parts(g, role_bytes_per_weight(recipe, wanted, g.role, bpw), limit, what_limit)
            if isinstance(parts, Rejection):
                return parts
            for k, (rng, nbytes) in enumerate(parts, 1):
                name = g.graph_name if len(parts) == 1 else f"{g.graph_name}_part{k}of{len(parts)}"
                out.append(ArtifactPlan(g.component, name, g.role, g.bucket.ar, g.bucket.context, fmt, wanted, k, len(parts), rng, g.weight_set, nbytes))
        return out

    artifacts = cut(limit, what_limit)
    short = None  # why this host's budget cannot build the target's plan
    if isinstance(artifacts, Rejection) and what_limit == BUDGET_LIMIT:
        # one layer (or the embedding, or the head) over the budget's part size: the host, not the target, stands in the
        # way; the plan stays the target's (cut by its own limit only) and the build is refused as a missing prerequisite
        short = f"{artifacts.reason} ({budget.source})"
        limit, what_limit = acc.per_graph_limit_bytes, "the per-graph limit"
        artifacts = cut(limit, what_limit)
    if isinstance(artifacts, Rejection):
        return Plan(**head, rejection=artifacts)
    memory = _memory(recipe, target, p, graphs, artifacts, share_weights, fmt)
    missing = list(missing_for(target.requires, fmt, p, recipe.blocked, recipe.blocked_fix, target))
    if not recipe.blocked and recipe.has_exporter and wanted not in recipe.thresholds:
        # offered for capacity planning, but verify would have nothing to judge the build by: stop before heavy work
        missing.append(Prerequisite(f"{wanted} parity thresholds", f"recipe {recipe.name} offers {wanted} on {target.name} but defines "
                                    f"no {wanted} parity thresholds, so verify could not judge the build",
                                    f"measure {wanted} on the recipe's tiny twin (bench/w4a16.py for w4a16) and add its thresholds to the recipe"))
    if (recipe.quant_options.get(wanted) or {}).get("quantizer") == "aimet-onnx":
        from exporter import aimet_env

        if aimet_env.python() is None:
            missing.append(Prerequisite("aimet-onnx environment", f"recipe {recipe.name} quantizes {wanted} with aimet-onnx, whose "
                                        f"environment is not set up at {aimet_env.env_dir()} (it cannot live in the project's: "
                                        "exporter/aimet_env.py)", f"run `{aimet_env.SETUP}`"))
    build_memory = _build_memory(recipe, artifacts, bpw, what_limit, budget)
    if short is None and budget is not None and build_memory["estimated_peak_bytes"] > budget.bytes:
        short = (f"building it is estimated to need {gib(build_memory['estimated_peak_bytes'])} ({build_memory['estimate']}; its largest "
                 f"graph holds {gib(build_memory['largest_part_fp32_bytes'])} of float32 tensors"
                 f"{'' if recipe.components_for else ' and this recipe cannot cut its graphs into parts'}); the build may use "
                 f"{gib(budget.bytes)} ({budget.source})")
    if short is not None:
        missing.append(Prerequisite("build-memory", short, "pass a larger --max-memory on a host that has it"
                                    + ("" if recipe.components_for else ", or use a recipe whose stack can be cut into layer-range parts")
                                    + "; a part is never cut below one layer and nothing smaller is substituted"))
    kw = dict(artifacts=tuple(artifacts), memory=memory, missing=tuple(missing), verification=verification_plan(target), build_memory=build_memory)
    if memory["required_bytes"] > memory["budget_bytes"]:
        alt = memory["required_bytes_if_weights_shared"]
        why = ""
        if alt is not None and alt <= memory["budget_bytes"]:
            why = (f"; with one weight copy shared between graphs it would need {gib(alt)} and fit, but weight sharing is not "
                   f"usable: {memory['weight_sharing']['note']}")
        return reject(
            "capacity",
            f"{recipe.name} {wanted} needs {gib(memory['required_bytes'])}{why} (weights {gib(memory['weights_bytes'])}, "
            f"state {gib(max(memory['state_bytes'], memory['state_transition_bytes']))}, loading peak {gib(memory['loading_peak_bytes'])}, "
            f"margin {gib(memory['safety_margin_bytes'])}); {target.name} has {gib(memory['budget_bytes'])} "
            f"({memory['budget_kind']}: {gib(target.vram_bytes or target.ram_bytes)} less {gib(0 if target.vram_bytes else target.os_reserved_bytes)} for the OS)",
            "choose a target (or --ram SKU) with more memory, or a recipe variant with a smaller checkpoint; no smaller model, precision or context is substituted",
            **kw,
        )
    if "host_required_bytes" in memory and memory["host_required_bytes"] > memory["host_budget_bytes"]:
        return reject("capacity", f"host staging needs {gib(memory['host_required_bytes'])}; the host has {gib(memory['host_budget_bytes'])}",
                      "choose a host with more RAM", **kw)
    return Plan(**head, **kw)


@dataclass(frozen=True)
class GroupPlan:
    """One component group of a multi-component recipe, planned alone on the target."""

    group: str
    plan: Plan

    def to_json(self) -> dict:
        m = self.plan.memory or {}
        r = self.plan.rejection
        return {"group": self.group, "admitted": self.plan.admitted, "precision": self.plan.precision,
                "graphs": [a.graph_name for a in self.plan.artifacts], "weights_bytes": m.get("weights_bytes"),
                "weights_shared_between_graphs": m.get("weights_shared_between_graphs"), "state_bytes": m.get("state_bytes"), "required_bytes": m.get("required_bytes"), "budget_bytes": m.get("budget_bytes"),
                "rejection": r.to_json() if r else None}


def make_group_plans(recipe: Recipe, target: Target, precision: str | None = None, context: int | None = None,
                     fmt: str | None = None, requested_target: str | None = None, share_weights: bool = True) -> dict:
    """Each group of ``recipe.cost.groups`` planned alone (same precision, target and format), and the
    groups admitted alone checked together: a runtime that holds them at once needs their sum (one
    runtime overhead and one safety margin per group is an over-count this reports as is)."""
    from dataclasses import replace

    groups = []
    built = recipe.group_recipes() if recipe.group_recipes else {}
    for g in recipe.cost.groups:
        cost = recipe.cost.group(g)
        ctx = context if cost.contexts() else None  # an encoder has no context buckets
        # a group that builds plans at its own recipe's precisions (the towers stay at 8 bits where the language model
        # takes 4); one that does not (a missing prerequisite) at the whole recipe's
        own = built.get(g.name)
        sub = replace(recipe, name=f"{recipe.name}/{g.name}", cost=cost, **({"precisions": own.precisions} if own else {}))
        groups.append(GroupPlan(g.name, make_plan(sub, target, precision, ctx, fmt, requested_target, share_weights=share_weights)))
    admitted = [x for x in groups if x.plan.admitted and x.plan.memory]
    overhead = max((x.plan.memory["runtime_overhead_bytes"] for x in admitted), default=0)
    together = sum(x.plan.memory["required_bytes"] - x.plan.memory["runtime_overhead_bytes"] for x in admitted) + overhead
    budget = admitted[0].plan.memory["budget_bytes"] if admitted else None
    return {"groups": [x.to_json() for x in groups],
            "admitted_together": {"groups": [x.group for x in admitted], "required_bytes": together, "budget_bytes": budget,
                                  "fits": budget is not None and together <= budget,
                                  "rule": "sum of the admitted groups' requirements, with one runtime overhead"}}

"""Parity measurement of LM graphs against the torch reference, per stage.

A stage is one form of the artifact on one execution provider: the float export
on ORT CPU, the fake-quantized QDQ graph on ORT CPU, the compiled context on
the target's accelerator. Each is driven through the same generation loop as a
runtime would (verify.lm_driver) on the held-out set.
"""

from __future__ import annotations

from dataclasses import dataclass, field


from recipes.base import Thresholds
from verify.drivers import driver_for
from verify.metrics import Accumulator, cosine
from verify.thresholds import has_decode, stage_failures


@dataclass
class StageResult:
    stage: str
    provider: str
    precision: str
    thresholds: dict
    outputs: dict = field(default_factory=dict)  # component -> output -> metrics
    decode: dict = field(default_factory=dict)
    failures: list = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.failures

    def to_json(self) -> dict:
        return {
            "stage": self.stage,
            "provider": self.provider,
            "precision": self.precision,
            "thresholds": self.thresholds,
            "outputs": self.outputs,
            "decode": self.decode,
            "failures": self.failures,
            "verdict": "pass" if self.passed else "fail",
        }


def _check(res: StageResult, th: Thresholds) -> None:
    res.failures += stage_failures(res.to_json(), th.to_json())


@dataclass
class Prompt:
    """A held-out prompt whose embedding rows at some positions come from an encoder: `artifact_rows` as the
    exported encoder produced them (fed to the graphs), `reference_rows` as the torch encoder did (fed to HF)."""

    tokens: list[int]
    artifact_rows: dict = field(default_factory=dict)
    reference_rows: dict = field(default_factory=dict)
    label: str = ""


class _DeferredCalls:
    """The calls of one graph level, stored until the level ends; then the level's sessions close and every call is
    checked against the reference, one component's tensors held for all of its calls."""

    def __init__(self, store, runners, reference, check):
        self.store, self.runners, self.reference, self.check = store, runners, reference, check
        self._open()

    def _open(self) -> None:
        if self.store is not None:
            self.rec = self.store([])
        else:
            from exporter.feed_store import FeedRecorder

            self.rec = FeedRecorder([])
        self.n_valid: dict[str, list[int]] = {}  # component -> n_valid of each stored call, in the store's order

    def add(self, component: str, feeds: dict, outputs: dict, n_valid: int) -> None:
        self.rec.add(component, {**{f"in.{k}": v for k, v in feeds.items()}, **{f"out.{k}": v for k, v in outputs.items()}})
        self.n_valid.setdefault(component, []).append(n_valid)

    def flush(self) -> None:
        import contextlib

        from exporter.heap import HeapWatch, release_free_heap

        if hasattr(self.runners, "close"):
            self.runners.close()
            release_free_heap()
        watch = HeapWatch()  # each call's reference forward frees its temporaries between stored feeds read back
        try:
            for component, counts in self.n_valid.items():
                hold = self.reference.holding(component) if hasattr(self.reference, "holding") else contextlib.nullcontext()
                with hold:
                    for i, n_valid in enumerate(counts):
                        rec = self.rec.lists[component][i]
                        feeds = {k[3:]: v for k, v in rec.items() if k.startswith("in.")}
                        outs = {k[4:]: v for k, v in rec.items() if k.startswith("out.")}
                        self.check(component, feeds, outs, n_valid)
                        watch.check()
        finally:
            self.rec.cleanup()
        if hasattr(self.reference, "drop_resident"):
            self.reference.drop_resident()
        self._open()


def greedy_prefix(forced_argmax: list[int], reference: list[int]) -> int:
    """How many of the reference's greedy tokens the artifact's own greedy run reproduces, from its argmax when it was
    fed the reference's tokens (teacher forcing): equal to the free-running run's, which sees the same inputs up to its
    first miss. Tested against free-running runs in tests/test_e2e.py."""
    return next((i for i, (x, y) in enumerate(zip(forced_argmax, reference)) if x != y), len(reference))


def measure_stage(
    stage: str,
    provider: str,
    precision: str,
    runners: dict,
    manifest_components: list[dict],
    layout: dict,
    prompts: list,
    reference,
    thresholds: Thresholds,
    steps: int,
    extra_outputs: dict | None = None,
    store=None,
) -> StageResult:
    """`prompts`: token lists or Prompt objects; `extra_outputs`: component -> output -> Accumulator measured
    before decoding (an encoder whose rows the prompts carry), reported with the decoder's graphs. `store(names)`: where
    bounded runners' calls wait for their check (an exporter.feed_store.FeedRecorder that spills; default in memory)."""
    lm_driver = driver_for(layout)
    extra_outputs = extra_outputs or {}
    graphs = {c["name"]: lm_driver.GraphSpec.from_manifest_component(c) for c in manifest_components if c["name"] not in extra_outputs}
    acc: dict[str, dict[str, Accumulator]] = {c: {n: Accumulator() for n in g.outputs} for c, g in graphs.items()}
    vs_hf = Accumulator()
    agree = total = 0
    prefixes, per_prompt = [], []
    step_hits: list[list[int]] = []  # [step] -> 1/0 per prompt that reached that step
    capacity = max(g.context for g in graphs.values() if g.role in ("prefill", "decode"))

    def check(component: str, feeds: dict, outputs: dict, n_valid: int) -> None:
        """One call of the artifact against the reference step module on the same inputs."""
        g = graphs[component]
        ref = reference.call(component, {n: feeds[n] for n in g.inputs}, g.outputs)
        n = min(n_valid, g.ar)
        for name, value in outputs.items():
            # only the rows of real tokens count; padded rows are discarded by the runtime.
            # Token rows are axis 1 of [1, AR, ...] outputs and axis 2 of KV rows [1, heads, AR, dim].
            if value.ndim == 4:
                acc[component][name].add(ref[name][:, :, :n], value[:, :, :n])
            else:
                acc[component][name].add(ref[name][:, :n], value[:, :n])

    def recorder(contexts: set[int], later: "_DeferredCalls | None" = None):
        """The per-call check of one prompt's teacher-forced run; `contexts` collects the buckets its calls ran in;
        with `later`, the call is stored and checked when its level ends."""

        def record(step) -> None:
            g = graphs[step.component]
            if g.role in ("prefill", "decode"):
                contexts.add(g.context)
            if later is not None:
                later.add(step.component, {n: step.feeds[n] for n in g.inputs}, step.outputs, step.n_valid)
            else:
                check(step.component, step.feeds, step.outputs, step.n_valid)

        return record

    runs = []
    for item in prompts:
        p = item if isinstance(item, Prompt) else Prompt(list(item))
        rkw, akw = ({"inject": p.reference_rows} if p.reference_rows else {}), ({"inject": p.artifact_rows} if p.artifact_rows else {})
        n_steps = min(steps, capacity - len(p.tokens) + 1)  # a sequence never exceeds the largest bucket
        ref_tokens = reference.generate(p.tokens, n_steps, **rkw)
        runs.append((p, akw, n_steps, ref_tokens, reference.teacher_logits(p.tokens, ref_tokens, **rkw), set()))
    forced = None
    if getattr(runners, "bounded", False) and hasattr(lm_driver, "teacher_forced_by_parts"):
        # the sessions do not all fit the budget: every teacher-forced run one graph level at a time, so each session
        # opens once per level instead of once per token (the same calls on the same inputs: the same numbers). A
        # level's calls are stored (spilled past the store's memory) and checked once its sessions are closed, so a
        # part's session and its reference tensors are never in memory together
        later = _DeferredCalls(store, runners, reference, check)
        if hasattr(reference, "drop_resident"):
            reference.drop_resident()  # what generate() kept resident goes before the first session opens
        forced = lm_driver.teacher_forced_by_parts(runners, graphs, layout, [
            lm_driver.ForcedRun(p.tokens, ref_tokens, n_steps, akw.get("inject"), recorder(contexts, later))
            for p, akw, n_steps, ref_tokens, _, contexts in runs], on_level_end=later.flush)
    for ri, (p, akw, n_steps, ref_tokens, ref_logits, contexts) in enumerate(runs):
        prompt = p.tokens
        if forced is not None:
            tokens, logits = forced[ri]
        else:
            tokens, logits = lm_driver.generate(runners, graphs, layout, prompt, n_steps, forced=ref_tokens, on_step=recorder(contexts), **akw)
        for a, b in zip(ref_logits, logits):
            vs_hf.add(a, b)
        matches = [int(x == y) for x, y in zip(tokens, ref_tokens)]
        for i, m in enumerate(matches):
            if i == len(step_hits):
                step_hits.append([])
            step_hits[i].append(m)
        hits = sum(matches)
        agree += hits
        total += len(ref_tokens)
        # the free-running greedy prefix, without a free-running run: until the artifact's first miss its own greedy run
        # feeds it exactly the reference tokens the teacher-forced run fed it (the same calls on the same inputs), and at
        # the first miss both runs return the same token; after it, neither metric looks (verify.parity.greedy_prefix)
        prefix = greedy_prefix(tokens, ref_tokens)
        prefixes.append(prefix)
        per_prompt.append({
            **({"label": p.label} if p.label else {}),
            "prompt_tokens": len(prompt),
            "steps": n_steps,
            "teacher_forced_agreement": hits / len(ref_tokens),
            "greedy_prefix": prefix,
            "greedy_exact": prefix == len(ref_tokens),
            "last_logits_cosine": cosine(ref_logits[-1], logits[-1]),  # None when either is not finite
            "contexts": sorted(contexts),
        })
    res = StageResult(stage, provider, precision, thresholds.to_json())
    res.outputs = {c: {n: a.to_json() for n, a in outs.items()} for c, outs in {**extra_outputs, **acc}.items()}
    res.decode = {
        "steps": steps,
        "prompts": len(prompts),
        "token_agreement": agree / max(total, 1),
        "min_greedy_prefix": min(prefixes) if prefixes else 0,
        "all_greedy_exact": all(p["greedy_exact"] for p in per_prompt),
        "logits_vs_hf": vs_hf.to_json(),
        "per_prompt": per_prompt,
        # teacher-forced top-1 agreement at each decode step over the prompts that reached it
        "agreement_by_step": [round(sum(h) / len(h), 4) for h in step_hits],
    }
    _check(res, thresholds)
    return res


NO_DECODE = {"applicable": False, "steps": 0, "token_agreement": None, "min_greedy_prefix": None, "all_greedy_exact": None,
             "per_prompt": [], "agreement_by_step": []}


def measure_encoder_stage(stage: str, provider: str, precision: str, runners: dict, manifest_components: list[dict],
                          items: list[dict], reference, thresholds: Thresholds) -> StageResult:
    """A stateless graph on every held-out input: per output cosine, PSNR and max abs against `reference(component,
    feeds) -> {output: array}` (the torch module, float). No decode: token metrics do not apply."""
    acc = {c["name"]: {t["name"]: Accumulator() for t in c["outputs"]} for c in manifest_components}
    for c in manifest_components:
        names = [t["name"] for t in c["inputs"]]
        outs = [t["name"] for t in c["outputs"]]
        for item in items:
            feeds = {n: item[n] for n in names}
            got = dict(zip(outs, runners[c["name"]].run(outs, feeds)))
            ref = reference(c["name"], feeds)
            for n in outs:
                acc[c["name"]][n].add(ref[n], got[n])
    res = StageResult(stage, provider, precision, thresholds.to_json())
    res.outputs = {c: {n: a.to_json() for n, a in outs.items()} for c, outs in acc.items()}
    res.decode = {**NO_DECODE, "prompts": len(items)}
    _check(res, thresholds)
    return res


def summarize(stages: list[StageResult]) -> dict:
    first = next((f for s in stages for f in s.failures), None)
    return {
        "verdict": "pass" if all(s.passed for s in stages) else "fail",
        "first_failure": first,
        "stages": [s.to_json() for s in stages],  # pipeline order: the first failure is the first diverging stage
    }


def _f(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def markdown(summary: dict, title: str) -> str:
    lines = [f"# Parity: {title}", "", f"Verdict: **{summary['verdict'].upper()}**", ""]
    if summary.get("first_failure"):
        f = summary["first_failure"]
        lines += [f"First failure: stage `{f['stage']}`, component `{f['component']}`, output `{f['output']}`, {f['metric']} = {f['value']} (threshold {f['threshold']})", ""]
    for s in summary["stages"]:
        name, d = s["stage"], s["decode"]
        lines += [f"## Stage `{name}` ({s['provider']}, {s['precision']}): {s['verdict']}", ""]
        if has_decode(s):
            lines += [
                f"Greedy decode over {d['steps']} steps on {d['prompts']} held-out prompts: teacher-forced agreement {d['token_agreement']:.3f}, "
                f"shortest exact greedy prefix {d['min_greedy_prefix']}, all exact: {d['all_greedy_exact']}; logits vs HF min cosine {_f(d['logits_vs_hf']['min_cosine'], '.6f')}.",
                ""]
        else:
            lines += [f"Stateless graph on {d['prompts']} held-out inputs (no decode).", ""]
        lines += [
            "| component | output | calls | non-finite calls | min cosine | min PSNR dB | max abs |",
            "|---|---|---|---|---|---|---|",
        ]
        for comp, outs in s["outputs"].items():
            for out, m in outs.items():
                bad = (m.get("nonfinite_calls") or 0) + (m.get("reference_nonfinite_calls") or 0)
                psnr = ("inf" if bad < m["calls"] else "-") if m["min_psnr_db"] is None else f"{m['min_psnr_db']:.1f}"
                lines.append(f"| {comp} | {out} | {m['calls']} | {bad} | {_f(m['min_cosine'], '.6f')} | {psnr} | {_f(m['max_abs'], '.3g')} |")
        lines.append("")
    return "\n".join(lines) + "\n"

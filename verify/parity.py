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
from verify.thresholds import stage_failures


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


def measure_stage(
    stage: str,
    provider: str,
    precision: str,
    runners: dict,
    manifest_components: list[dict],
    layout: dict,
    prompts: list[list[int]],
    reference,
    thresholds: Thresholds,
    steps: int,
) -> StageResult:
    lm_driver = driver_for(layout)
    graphs = {c["name"]: lm_driver.GraphSpec.from_manifest_component(c) for c in manifest_components}
    acc: dict[str, dict[str, Accumulator]] = {c: {n: Accumulator() for n in g.outputs} for c, g in graphs.items()}
    vs_hf = Accumulator()
    agree = total = 0
    prefixes, per_prompt = [], []
    step_hits: list[list[int]] = []  # [step] -> 1/0 per prompt that reached that step
    capacity = max(g.context for g in graphs.values() if g.role in ("prefill", "decode"))

    contexts: set[int] = set()  # the buckets the current prompt's calls ran in

    def record(step) -> None:
        g = graphs[step.component]
        if g.role in ("prefill", "decode"):
            contexts.add(g.context)
        ref = reference.call(step.component, {n: step.feeds[n] for n in g.inputs}, g.outputs)
        n = min(step.n_valid, g.ar)
        for name, value in step.outputs.items():
            # only the rows of real tokens count; padded rows are discarded by the runtime.
            # Token rows are axis 1 of [1, AR, ...] outputs and axis 2 of KV rows [1, heads, AR, dim].
            if value.ndim == 4:
                acc[step.component][name].add(ref[name][:, :, :n], value[:, :, :n])
            else:
                acc[step.component][name].add(ref[name][:, :n], value[:, :n])

    for prompt in prompts:
        contexts.clear()
        n_steps = min(steps, capacity - len(prompt) + 1)  # a sequence never exceeds the largest bucket
        ref_tokens = reference.generate(prompt, n_steps)
        ref_logits = reference.teacher_logits(prompt, ref_tokens)
        tokens, logits = lm_driver.generate(runners, graphs, layout, prompt, n_steps, forced=ref_tokens, on_step=record)
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
        free, _ = lm_driver.generate(runners, graphs, layout, prompt, n_steps)
        prefix = next((i for i, (x, y) in enumerate(zip(free, ref_tokens)) if x != y), len(ref_tokens))
        prefixes.append(prefix)
        per_prompt.append({
            "prompt_tokens": len(prompt),
            "steps": n_steps,
            "teacher_forced_agreement": hits / len(ref_tokens),
            "greedy_prefix": prefix,
            "greedy_exact": free == ref_tokens,
            "last_logits_cosine": cosine(ref_logits[-1], logits[-1]),
            "contexts": sorted(contexts),
        })
    res = StageResult(stage, provider, precision, thresholds.to_json())
    res.outputs = {c: {n: a.to_json() for n, a in outs.items()} for c, outs in acc.items()}
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


def summarize(stages: list[StageResult]) -> dict:
    first = next((f for s in stages for f in s.failures), None)
    return {
        "verdict": "pass" if all(s.passed for s in stages) else "fail",
        "first_failure": first,
        "stages": [s.to_json() for s in stages],  # pipeline order: the first failure is the first diverging stage
    }


def markdown(summary: dict, title: str) -> str:
    lines = [f"# Parity: {title}", "", f"Verdict: **{summary['verdict'].upper()}**", ""]
    if summary.get("first_failure"):
        f = summary["first_failure"]
        lines += [f"First failure: stage `{f['stage']}`, component `{f['component']}`, output `{f['output']}`, {f['metric']} = {f['value']} (threshold {f['threshold']})", ""]
    for s in summary["stages"]:
        name, d = s["stage"], s["decode"]
        lines += [
            f"## Stage `{name}` ({s['provider']}, {s['precision']}): {s['verdict']}",
            "",
            f"Greedy decode over {d['steps']} steps on {d['prompts']} held-out prompts: teacher-forced agreement {d['token_agreement']:.3f}, "
            f"shortest exact greedy prefix {d['min_greedy_prefix']}, all exact: {d['all_greedy_exact']}; logits vs HF min cosine {d['logits_vs_hf']['min_cosine']:.6f}.",
            "",
            "| component | output | calls | min cosine | min PSNR dB | max abs |",
            "|---|---|---|---|---|---|",
        ]
        for comp, outs in s["outputs"].items():
            for out, m in outs.items():
                psnr = "inf" if m["min_psnr_db"] is None else f"{m['min_psnr_db']:.1f}"
                lines.append(f"| {comp} | {out} | {m['calls']} | {m['min_cosine']:.6f} | {psnr} | {m['max_abs']:.3g} |")
        lines.append("")
    return "\n".join(lines) + "\n"

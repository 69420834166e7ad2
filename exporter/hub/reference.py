"""Held-out inputs for a device run, and the torch reference's outputs for them.

The bundle's own evaluation prompts are generated through the manifest's graphs with the torch step
modules as the runners (the reference trajectory), and the first ``per_component`` calls of each
graph are kept: their feeds go to the device, their outputs are what the device must reproduce.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Sample:
    feeds: dict  # input name -> array
    outputs: dict  # output name -> reference array
    n_valid: int  # real token rows (the rest is padding a runtime discards)


class _ReferenceRunner:
    def __init__(self, reference, component: str):
        self.reference, self.component = reference, component

    def run(self, output_names, feeds):
        out = self.reference.call(self.component, feeds, output_names)
        return [out[n] for n in output_names]


def reference_samples(ctx, per_component: int) -> dict[str, list[Sample]]:
    from exporter.errors import UsageError
    from verify.drivers import driver_for
    from verify.reference import LMReference

    if ctx.recipe.harness:
        raise UsageError(f"AI Hub validation of {ctx.recipe.name} bundles is not implemented: its held-out inputs (images, audio, "
                         "injected encoder rows) are not replayed by exporter/hub/reference.py yet",
                         "validate the language-model recipes (tiny-lm, spark) on AI Hub; multimodal groups are verified on the simulator only")

    layout = ctx.recipe.state_layout
    lm_driver = driver_for(layout)
    comps = ctx.manifest_components()
    graphs = {c["name"]: lm_driver.GraphSpec.from_manifest_component(c) for c in comps}
    reference = LMReference(ctx.model(), {c.name: ctx.step_module(c) for c in ctx.components})
    runners = {name: _ReferenceRunner(reference, name) for name in graphs}
    samples: dict[str, list[Sample]] = {name: [] for name in graphs}

    def record(step) -> None:
        kept = samples[step.component]
        if len(kept) < per_component:
            kept.append(Sample({k: v.copy() for k, v in step.feeds.items()}, {k: v.copy() for k, v in step.outputs.items()}, step.n_valid))

    capacity = max(g.context for g in graphs.values() if g.role in ("prefill", "decode"))
    for prompt in ctx.evaluation().sequences:
        prompt = list(prompt)
        lm_driver.generate(runners, graphs, layout, prompt, min(ctx.recipe.decode_steps, capacity - len(prompt) + 1), on_step=record)
        if all(len(v) >= per_component for v in samples.values()):
            break
    return samples

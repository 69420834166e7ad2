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


def reference_samples(build, per_component: int) -> dict[str, list[Sample]]:
    """The first `per_component` calls of every graph along the bundle's evaluation prompts (its family adapter says
    whether it can replay them)."""
    return build.adapter.hub_samples(per_component)


def decoder_samples(build, reference, evaluation, per_component: int) -> dict[str, list[Sample]]:
    """A decoder LM's samples: the evaluation prompts generated through the manifest's graphs with the torch step
    modules as runners (the reference trajectory)."""
    from verify.drivers import driver_for

    layout = build.recipe.state_layout
    lm_driver = driver_for(layout)
    comps = build.manifest_components()
    graphs = {c["name"]: lm_driver.GraphSpec.from_manifest_component(c) for c in comps}
    runners = {name: _ReferenceRunner(reference, name) for name in graphs}
    samples: dict[str, list[Sample]] = {name: [] for name in graphs}

    def record(step) -> None:
        kept = samples[step.component]
        if len(kept) < per_component:
            kept.append(Sample({k: v.copy() for k, v in step.feeds.items()}, {k: v.copy() for k, v in step.outputs.items()}, step.n_valid))

    capacity = max(g.context for g in graphs.values() if g.role in ("prefill", "decode"))
    for prompt in evaluation.sequences:
        prompt = list(prompt)
        lm_driver.generate(runners, graphs, layout, prompt, min(build.recipe.decode_steps, capacity - len(prompt) + 1), on_step=record)
        if all(len(v) >= per_component for v in samples.values()):
            break
    return samples

"""The decoder language-model adapter: transformers causal LMs by their own class and tensor names (tiny-lm's Qwen3,
spark's Gemma 3), with KV state driven by the manifest's layout (kv-cache, or ring + full KV for sliding windows).

Step graphs are ours over the loaded weights (exporter/models/); the reference is the untouched transformers model
(greedy `generate`, teacher-forced logits) plus the step graphs run eagerly in float on the artifact's own inputs.
Calibration and held-out token sets come from calibration/lm_data.py; calibration feeds are the inputs of every graph
along the calibration runs of the float graphs, driven through the layout's reference driver.
"""

from __future__ import annotations

import contextlib

from exporter.adapters.base import FamilyAdapter

CALIBRATION_PROCEDURE = ("per calibration sequence: prefill of the whole sequence; teacher-forced decode over every position; "
                         "free-running greedy decode from its first AR tokens to the end of the largest bucket (float graphs)")


def lm_calibration_feeds(build, float_graphs: dict, sequences, prompts=()) -> dict[str, list[dict]]:
    """Inputs of every graph along calibration sequences, produced by the float graphs; `prompts` adds (tokens, injected
    rows, steps) runs of greedy decoding (multimodal prompts)."""
    from exporter.loaders import open_graphs
    from verify.drivers import driver_for

    layout = build.recipe.state_layout
    lm_driver = driver_for(layout)
    runners, _ = open_graphs(float_graphs, build.manifest_components(), build.cpu_target(), budget_bytes=build.budget.session_bytes)
    graphs = {c["name"]: lm_driver.GraphSpec.from_manifest_component(c) for c in build.manifest_components() if c["name"] in float_graphs}
    feeds = feed_recorder(build, graphs)

    def rec(step):
        feeds.add(step.component, step.feeds)  # copied: the driver updates its state buffers in place after the call

    ar = max(g.ar for g in graphs.values() if g.role == "prefill")
    for seq in sequences:
        seq = list(seq)
        # prefill over the whole bucket (every prefill position), then decode over every position
        lm_driver.generate(runners, graphs, layout, seq, 1, on_step=rec)
        lm_driver.generate(runners, graphs, layout, seq[:1], len(seq), forced=seq[1:], on_step=rec)
        # and the model's own greedy continuation of a short prompt: generated text concentrates
        # attention far more than random tokens, and its activation ranges are what a runtime sees
        lm_driver.generate(runners, graphs, layout, seq[:ar], len(seq) - ar + 1, on_step=rec)
    for tokens, inject, steps in prompts:
        lm_driver.generate(runners, graphs, layout, tokens, steps, on_step=rec, inject=inject)
    return feeds.lists


def feed_recorder(build, names):
    """A recorder of calibration feeds that keeps the build budget's share in memory and spills the rest to the stage
    cache (exporter/feed_store.py)."""
    from exporter.feed_store import FeedRecorder

    return FeedRecorder(names, build.budget.reference_bytes, build.cache.root / "calibration-feeds")


def call_store(build):
    """Where verify's calls wait for their reference check while a level of bounded sessions runs (verify.parity): a
    quarter of the part budget in memory, the rest spilled to the stage cache."""
    from exporter.feed_store import FeedRecorder

    return lambda names: FeedRecorder(names, build.budget.reference_bytes // 4, build.cache.root / "verify-calls")


class DecoderLM(FamilyAdapter):
    calibration_procedure = CALIBRATION_PROCEDURE
    loads_parts = True

    def streamed(self):
        """The model on the meta device, its tensors read from the checkpoint by name as parts need them."""
        from exporter.errors import EdgeExportError, IntegrityError
        from exporter.models.streamed import StreamedModel

        def make():
            b = self.build
            try:
                return StreamedModel(b.ckpt.directory, b.recipe.architecture)
            except EdgeExportError:
                raise
            except Exception as e:  # transformers' config errors on a damaged snapshot: name the checkpoint
                raise IntegrityError(f"{b.ckpt.source}: reading the checkpoint failed ({type(e).__name__}: {str(e).splitlines()[0][:300]})",
                                     "the checkpoint is damaged or not of this architecture: check it with `edge-export pin`") from None

        return self.once("streamed", make)

    def load(self):
        """The whole model (verify's reference): every tensor held, exactly what `from_pretrained` gives."""
        return self.streamed().hold_all()

    def step_module(self, component, pooled_mean: bool = False):
        from exporter.models import step_module

        return step_module(self.model(), self.build.recipe.architecture, component, pooled_mean)

    def graph_bytes(self, component) -> int:
        from exporter.models import step_module

        s = self.streamed()
        return s.part_bytes(s.names_used_by(step_module(s.model, self.build.recipe.architecture, component)))

    @contextlib.contextmanager
    def graph_module(self, component, pooled_mean: bool = False):
        """The step module over the model's skeleton, holding the tensors it uses while the caller exports or lowers it
        (the whole model is read only by verify, which needs it for the reference)."""
        from exporter.models import step_module

        if self._model is not None:  # already whole (a step after verify started): no second copy
            yield self.step_module(component, pooled_mean)
            return
        s = self.streamed()
        with self.build.log.stage("load", f"{component.graph_name}'s tensors from {self.build.ckpt.directory}"):
            module = step_module(s.model, self.build.recipe.architecture, component, pooled_mean)
            names = s.names_used_by(module)
            s.acquire(names)
        try:
            yield module
        finally:
            s.release(names)

    def calibration(self):
        """The one calibration set of this build: it fills the largest context bucket."""
        from calibration.lm_data import calibration_set

        context = max(c.bucket.context for c in self.build.components)
        return self.once("calibration", lambda: calibration_set(self.build.recipe.model_config["vocab_size"], context))

    def evaluation(self):
        """The held-out prompts of this build (verify; AI Hub validation replays the same set)."""
        from calibration.lm_data import evaluation_set

        comps = self.build.components
        pre = next(c for c in comps if c.role == "prefill")
        contexts = sorted({c.bucket.context for c in comps if c.role in ("prefill", "decode")})
        # with several buckets, one long prompt makes prefill run in every bucket
        return self.once("evaluation", lambda: evaluation_set(self.build.recipe.model_config["vocab_size"], pre.bucket.ar,
                                                              long_prompt=contexts[-2] + pre.bucket.ar + 3 if len(contexts) > 1 else None))

    def check_disjoint(self, cal, ev) -> None:
        from calibration.lm_data import check_disjoint

        check_disjoint(cal, ev)

    def calibration_feeds(self, float_graphs):
        return lm_calibration_feeds(self.build, float_graphs, self.calibration().sequences)

    def reference(self):
        """The torch reference, shared by every stage of the build (its greedy generations are cached), over the streamed
        model: it reads tensors as blocks run and keeps at most the build budget's share resident (the whole model, read
        once, where the budget allows)."""
        from exporter.models import step_module
        from verify.reference import StreamedLMReference

        def make():
            s = self.streamed()
            s.keep_bytes = self.build.budget.reference_bytes
            arch = self.build.recipe.architecture
            return StreamedLMReference(s, {c.name: step_module(s.model, arch, c) for c in self.build.components})

        return self.once("reference", make)

    def measure(self, stage, provider, precision, runners, components):
        from verify.parity import measure_stage

        r = self.build.recipe
        return measure_stage(stage, provider, precision, runners, components, r.state_layout,
                             [list(s) for s in self.evaluation().sequences], self.reference(), r.thresholds[precision], r.decode_steps,
                             store=call_store(self.build))

    def program_constants(self, component):
        cfg = self.build.recipe.model_config
        layers = (component.layers[1] - component.layers[0]) if component.layers else cfg["num_hidden_layers"]
        return {"get_max_context_len": component.bucket.context, "get_ar": component.bucket.ar, "get_n_layers": layers,
                "get_vocab_size": cfg["vocab_size"]}

    def hub_samples(self, per_component: int):
        from exporter.hub.reference import decoder_samples

        return decoder_samples(self.build, self.reference(), self.evaluation(), per_component)

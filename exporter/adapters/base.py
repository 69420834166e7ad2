"""The family adapter protocol: one object per build, owning the torch side of a family.

A recipe (torch-free data) names its adapter by registry key; the pipeline binds it to a build and asks it, in this
order: `step_module(component)` for each graph to export or lower (loading the checkpoint on first use through `load`,
every weight checked finite), `calibration()` / `evaluation()` (data sets with digests, checked disjoint),
`calibration_feeds(float_graphs)` (inputs of every graph along the calibration runs), `measure(stage, ...)` for each
parity stage, `program_constants(component)` for programs, and `release()` once verification is done. What an adapter
computes once per build (data sets, the reference and its generation cache) it keeps itself.
"""

from __future__ import annotations

import contextlib
import dataclasses

_RELEASED = object()


class FamilyAdapter:
    opset = 18  # the ONNX opset its graphs export at, unless the format needs another
    loads_parts = False  # graph_module holds only its part's tensors (no whole model before verify)

    def __init__(self, build):
        self.build = build
        self._model = None
        self._once: dict = {}
        self.held = None  # an adapter that loads by parts: the checkpoint tensors it held (exporter/models/streamed.HeldStats)

    # -- the checkpoint ---------------------------------------------------------------------------------------------
    def load(self):
        raise NotImplementedError

    def model(self):
        """The loaded torch model (on first use: loaded, every weight checked finite)."""
        from exporter.errors import EdgeExportError, IntegrityError
        from exporter.weights import check_finite

        if self._model is _RELEASED:
            raise RuntimeError("the torch model was released after verify (FamilyAdapter.release); a stage after verify "
                               "must not need it: compute what it needs before release")
        if self._model is None:
            b = self.build
            with b.log.stage("load", f"{b.recipe.name} from {b.ckpt.directory}"):
                try:
                    model = self.load()
                except EdgeExportError:
                    raise
                except Exception as e:  # safetensors, torch and transformers errors on a damaged file: name the checkpoint
                    raise IntegrityError(f"{b.ckpt.source}: loading the checkpoint failed ({type(e).__name__}: {str(e).splitlines()[0][:300]})",
                                         "the checkpoint is damaged or not of this architecture: check it with `edge-export pin`") from None
                check_finite(model, b.ckpt.source)  # a NaN or Inf weight is refused by name, before any export
                self._model = model
        return self._model

    def release(self) -> None:
        """Drop the torch model and what was built on it once verify is done: the memory probe and signing do not
        need it, and it is one whole copy of the weights. Its pages go back to the OS with the rest of the freed heap."""
        from exporter.heap import release_free_heap

        self._model = _RELEASED
        self._once.pop("reference", None)
        streamed = self._once.pop("streamed", None)  # an adapter that loads by parts: its skeleton and what it kept resident
        if streamed is not None:
            self.held = dataclasses.asdict(streamed.stats)
        release_free_heap()

    def once(self, key, make):
        """`make()` once per build."""
        if key not in self._once:
            self._once[key] = make()
        return self._once[key]

    # -- what the pipeline asks ---------------------------------------------------------------------------------------
    def step_module(self, component, pooled_mean: bool = False):
        raise NotImplementedError

    def graph_bytes(self, component) -> int | None:
        """Float32 bytes of the tensors `graph_module(component)` holds; None where the adapter loads the whole model."""
        return None

    @contextlib.contextmanager
    def graph_module(self, component, pooled_mean: bool = False):
        """The step module of `component` for one export or lowering. An adapter that loads by parts holds only the
        tensors this module uses, and drops them on exit; the default uses the whole loaded model."""
        yield self.step_module(component, pooled_mean)

    def calibration(self):
        raise NotImplementedError

    def evaluation(self):
        raise NotImplementedError

    def check_disjoint(self, cal, ev) -> None:
        raise NotImplementedError

    def calibration_feeds(self, float_graphs: dict) -> dict[str, list[dict]]:
        raise NotImplementedError

    def measure(self, stage: str, provider: str, precision: str, runners: dict, components: list[dict]):
        raise NotImplementedError

    def program_constants(self, component) -> dict[str, int]:
        """The metadata methods a program of `component` carries (checked against the manifest at load time)."""
        raise NotImplementedError

    def hub_samples(self, per_component: int):
        from exporter.errors import UsageError

        raise UsageError(f"AI Hub validation of {self.build.recipe.name} bundles is not implemented: its held-out inputs (images, audio, "
                         "injected encoder rows) are not replayed by exporter/hub/reference.py yet",
                         "validate the language-model recipes (tiny-lm, spark) on AI Hub; multimodal groups are verified on the simulator only")

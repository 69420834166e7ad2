"""Family adapters of MiniCPM-o's component groups (exporter/adapters/base.py).

Each adapter loads its part of the checkpoint (exporter/models/minicpmo.py), names the graph module of
each component, supplies calibration and held-out data (calibration/), the calibration feeds of every
graph, and measures one verification stage against the torch reference:

* ``vision`` / ``audio``: stateless graphs on held-out images / audio chunks (per-output metrics);
* ``language``: the Qwen3 split graphs through verify/split_lm_driver.py on text prompts and on
  image+text and audio+text prompts whose encoder rows come from the torch encoders (the language
  graphs are judged on real multimodal embeddings; the exported-encoder chain is verify/chain.py);
* ``speech_decoder``: the condition graph (exported) feeds its rows to the speech decoder's graphs;
  the reference is the torch condition feeding transformers' LlamaForCausalLM.

One adapter object per build; what a build needs more than once (data sets, prompts with their encoder rows, the
torch reference and its generation cache) it computes once (``FamilyAdapter.once``). Heavy imports happen inside
methods.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from exporter.adapters.base import FamilyAdapter
from recipes.minicpm_o import PLACEHOLDER


@dataclass(frozen=True)
class DataBundle:
    """Several data sets judged as one (a digest over all of them)."""

    name: str
    purpose: str
    parts: tuple

    @property
    def digest(self) -> str:
        from exporter.hashing import sha256_json

        return sha256_json({"name": self.name, "parts": [p.digest for p in self.parts]})

    @property
    def sequences(self) -> tuple:  # what the calibration progress line counts
        return tuple(x for p in self.parts for x in getattr(p, "sequences", getattr(p, "items", ())))

    def to_json(self) -> dict:
        return {"name": self.name, "purpose": self.purpose, "sha256": self.digest, "parts": [p.to_json() for p in self.parts]}


def _torch_call(module, names: list[str], feeds: dict) -> tuple:
    import torch

    with torch.no_grad():
        out = module(*[torch.from_numpy(np.ascontiguousarray(feeds[n])) for n in names])
    return tuple(o.detach() for o in ((out,) if isinstance(out, torch.Tensor) else out))


class _Base(FamilyAdapter):
    part = ""

    def load(self):
        from exporter.models.minicpmo import load_part

        return load_part(self.build.ckpt.directory, self.part)

    def step_module(self, comp, pooled_mean: bool = False):
        from exporter.models.minicpmo import step_module

        return step_module(self.model(), self.part, comp, pooled_mean)

    def reference_fn(self):
        comps = {c.name: c for c in self.build.components}

        def ref(name: str, feeds: dict) -> dict:
            c = comps[name]
            out = _torch_call(self.step_module(c), [t.name for t in c.inputs], feeds)
            return {t.name: o.numpy() for t, o in zip(c.outputs, out)}

        return ref


class _Encoder(_Base):
    calibration_procedure = "every calibration item (image slice or audio chunk) as one call of the float graph"

    def data(self, purpose: str):
        raise NotImplementedError

    def calibration(self):
        return self.once("calibration", lambda: self.data("calibration"))

    def evaluation(self):
        return self.once("evaluation", lambda: self.data("evaluation"))

    def check_disjoint(self, cal, ev) -> None:
        from calibration.media import check_disjoint

        check_disjoint(cal, ev)

    def calibration_feeds(self, float_graphs) -> dict:
        c = self.build.components[0]
        return {c.name: [{t.name: it[t.name] for t in c.inputs} for it in self.calibration().items]}

    def measure(self, stage, provider, precision, runners, components):
        from verify.parity import measure_encoder_stage

        return measure_encoder_stage(stage, provider, precision, runners, components, list(self.evaluation().items),
                                     self.reference_fn(), self.build.recipe.thresholds[precision])


class Vision(_Encoder):
    part = "vision"

    def data(self, purpose):
        from calibration.media import image_set

        return image_set(purpose, self.build.recipe.model_config["image_size"], 8 if purpose == "calibration" else 3)


class Audio(_Encoder):
    part = "audio"
    opset = 20  # Whisper's exact GELU: opset 20 exports one Gelu node, which the HTP runs; at 18 it is an Erf chain it rejects

    def data(self, purpose):
        from calibration.media import audio_set
        from recipes.minicpm_o import AUDIO_FRAMES

        return audio_set(purpose, self.build.recipe.model_config["audio_config"]["num_mel_bins"], AUDIO_FRAMES, 8 if purpose == "calibration" else 3)


def multimodal_prompts(cfg: dict, rows_list: list[np.ndarray], seed: int) -> list[tuple[list[int], dict]]:
    """Image/audio + text prompts: a few text tokens, the encoder's rows, a few more text tokens."""
    from verify.split_lm_driver import placeholder_prompt

    rng = np.random.Generator(np.random.PCG64(seed))
    out = []
    for rows in rows_list:
        pre = [int(t) for t in rng.integers(1, cfg["vocab_size"], 5)]
        post = [int(t) for t in rng.integers(1, cfg["vocab_size"], 4)]
        out.append(placeholder_prompt(pre, rows[0], post, PLACEHOLDER))
    return out


class _Decoder(_Base):
    from exporter.adapters.decoder_lm import CALIBRATION_PROCEDURE as calibration_procedure

    def reference(self):
        """The torch reference, shared by every stage of the build (its greedy generations are cached)."""
        from verify.reference import LMReference

        return self.once("reference", lambda: LMReference(self.hf_model(), {c.name: self.step_module(c) for c in self.build.components
                                                                            if c.role != "encoder"}))

    def hf_model(self):
        raise NotImplementedError

    def check_disjoint(self, cal, ev) -> None:
        from calibration.lm_data import check_disjoint

        check_disjoint(cal.parts[0], ev.parts[0])

    def lm_components(self, components: list[dict]) -> list[dict]:
        return [c for c in components if c["role"] != "encoder"]


class Language(_Decoder):
    part = "language"

    def hf_model(self):
        return self.model()

    def calibration(self):
        return self.once("calibration", lambda: self._calibration())

    def _calibration(self):
        from calibration.lm_data import calibration_set
        from calibration.media import audio_set, image_set
        from recipes.minicpm_o import AUDIO_FRAMES

        cfg = self.build.recipe.model_config
        context = max(c.bucket.context for c in self.build.components)
        return DataBundle("minicpm-o-language-calibration-v1", "calibration",
                          (calibration_set(cfg["vocab_size"], context), image_set("calibration", cfg["image_size"], 2),
                           audio_set("calibration", cfg["audio_config"]["num_mel_bins"], AUDIO_FRAMES, 2)))

    def evaluation(self):
        return self.once("evaluation", lambda: self._evaluation())

    def _evaluation(self):
        from calibration.lm_data import evaluation_set
        from calibration.media import audio_set, image_set
        from recipes.minicpm_o import AUDIO_FRAMES

        cfg = self.build.recipe.model_config
        pre = next(c for c in self.build.components if c.role == "prefill")
        contexts = sorted({c.bucket.context for c in self.build.components if c.role in ("prefill", "decode")})
        text = evaluation_set(cfg["vocab_size"], pre.bucket.ar, long_prompt=contexts[-2] + pre.bucket.ar + 3 if len(contexts) > 1 else None)
        return DataBundle("minicpm-o-language-evaluation-v1", "evaluation",
                          (text, image_set("evaluation", cfg["image_size"], 1), audio_set("evaluation", cfg["audio_config"]["num_mel_bins"], AUDIO_FRAMES, 1)))

    def encoder_rows(self, data) -> dict[str, list[np.ndarray]]:
        """Torch encoder rows of the data's images and audio (the reference embeddings)."""
        from exporter.models.minicpmo import load_part

        vision, audio = load_part(self.build.ckpt.directory, "vision"), load_part(self.build.ckpt.directory, "audio")
        return {"image": [_torch_call(vision, ["pixel_values"], it)[0].numpy() for it in data.parts[1].items],
                "audio": [_torch_call(audio, ["input_features"], it)[0].numpy() for it in data.parts[2].items]}

    def prompts(self, data, seed: int, text: bool = True):
        from verify.parity import Prompt

        cfg = self.build.recipe.model_config
        rows = self.encoder_rows(data)
        out = [Prompt(list(s)) for s in data.parts[0].sequences] if text else []
        for kind in ("image", "audio"):
            for i, (tokens, inj) in enumerate(multimodal_prompts(cfg, rows[kind], seed + (kind == "audio"))):
                out.append(Prompt(tokens, inj, inj, label=f"{kind}+text #{i}"))
        return out

    def calibration_feeds(self, float_graphs) -> dict:
        from exporter.adapters.decoder_lm import lm_calibration_feeds

        cal = self.calibration()
        # the text recipes' runs over the token sequences, and, since image and audio rows have their own ranges,
        # greedy decoding of multimodal prompts
        prompts = [(p.tokens, p.artifact_rows, 16) for p in self.prompts(cal, 7001, text=False)]
        return lm_calibration_feeds(self.build, float_graphs, cal.parts[0].sequences, prompts)

    def measure(self, stage, provider, precision, runners, components):
        from exporter.adapters.decoder_lm import call_store
        from verify.parity import measure_stage

        r = self.build.recipe
        prompts = self.once("evaluation-prompts", lambda: self.prompts(self.evaluation(), 9001))
        return measure_stage(stage, provider, precision, runners, self.lm_components(components), r.state_layout,
                             prompts, self.reference(), r.thresholds[precision], r.decode_steps, store=call_store(self.build))


class SpeechDecoder(_Decoder):
    part = "speech"

    def hf_model(self):
        return self.model().decoder

    def _conditions(self, purpose):
        from calibration.media import condition_set

        tc = self.build.recipe.model_config["tts_config"]
        ar = next(c for c in self.build.components if c.role == "encoder").bucket.ar
        lengths = (3, ar // 2, ar) if purpose == "calibration" else (4, ar // 2 + 3, ar - 1)
        return condition_set(purpose, tc["num_text_tokens"], tc["llm_dim"], ar, lengths)

    def calibration(self):
        from calibration.lm_data import calibration_set

        tc = self.build.recipe.model_config["tts_config"]
        context = max(c.bucket.context for c in self.build.components)
        return self.once("calibration", lambda: DataBundle(
            "minicpm-o-speech-calibration-v1", "calibration", (calibration_set(tc["num_audio_tokens"], context), self._conditions("calibration"))))

    def evaluation(self):
        from calibration.lm_data import evaluation_set

        tc = self.build.recipe.model_config["tts_config"]
        pre = next(c for c in self.build.components if c.role == "prefill")
        return self.once("evaluation", lambda: DataBundle(
            "minicpm-o-speech-evaluation-v1", "evaluation",
            (evaluation_set(tc["num_audio_tokens"], pre.bucket.ar, count=0), self._conditions("evaluation"))))

    def condition_prompts(self, conds, runner, acc=None):
        """(Prompt per condition): rows from the exported condition graph (`runner`) and from the torch one."""
        from verify.parity import Prompt

        comp = next(c for c in self.build.components if c.role == "encoder")
        ref = self.reference_fn()
        outs = [t.name for t in comp.outputs]
        prompts = []
        for it in conds.items:
            feeds = {"text_ids": it["text_ids"], "llm_hidden": it["llm_hidden"]}
            n = int(it["n"][0])
            got = dict(zip(outs, runner.run(outs, feeds)))
            want = ref(comp.name, feeds)
            if acc is not None:
                acc["condition"].add(want["condition"][:, :n], got["condition"][:, :n])
                acc["audio_bos"].add(want["audio_bos"], got["audio_bos"])

            def rows(o):
                return {i: r for i, r in enumerate(list(o["condition"][0, :n]) + [o["audio_bos"][0, 0]])}

            prompts.append(Prompt([PLACEHOLDER] * (n + 1), rows(got), rows(want), label=f"condition of {n} text tokens"))
        return prompts

    def calibration_feeds(self, float_graphs) -> dict:
        from exporter.adapters.decoder_lm import feed_recorder
        from exporter.loaders import open_graphs
        from verify import split_lm_driver as drv

        cal = self.calibration()
        comps = self.build.manifest_components()
        runners, _ = open_graphs(float_graphs, comps, self.build.cpu_target())
        cond = next(c for c in comps if c["role"] == "encoder")
        graphs = {c["name"]: drv.GraphSpec.from_manifest_component(c) for c in self.lm_components(comps)}
        feeds = feed_recorder(self.build, [c["name"] for c in comps])
        for it in cal.parts[1].items:
            feeds.add(cond["name"], {"text_ids": it["text_ids"], "llm_hidden": it["llm_hidden"]})
        layout = self.build.recipe.state_layout
        context = max(g.context for g in graphs.values())

        def rec(step):
            feeds.add(step.component, step.feeds)  # copied: the driver updates its state buffers in place after the call

        for seq in cal.parts[0].sequences:
            seq = list(seq)
            drv.generate(runners, graphs, layout, seq[:1], len(seq), forced=seq[1:], on_step=rec)
        for p in self.condition_prompts(cal.parts[1], runners[cond["name"]]):
            drv.generate(runners, graphs, layout, p.tokens, context - len(p.tokens), on_step=rec, inject=p.artifact_rows)
        return feeds.lists

    def measure(self, stage, provider, precision, runners, components):
        from exporter.adapters.decoder_lm import call_store
        from verify.metrics import Accumulator
        from verify.parity import measure_stage

        r = self.build.recipe
        ev = self.evaluation()
        cond = next(c for c in components if c["role"] == "encoder")
        acc = {"condition": Accumulator(), "audio_bos": Accumulator()}
        # speech decoding always starts from a condition (the prompt is never plain audio codes)
        prompts = self.condition_prompts(ev.parts[1], runners[cond["name"]], acc)
        return measure_stage(stage, provider, precision, runners, components, r.state_layout, prompts,
                             self.reference(), r.thresholds[precision], r.decode_steps, extra_outputs={cond["name"]: acc},
                             store=call_store(self.build))

"""The torch reference for language-model parity: the untouched transformers model.

Greedy tokens come from HF `generate`; teacher-forced logits from one full HF
forward; per-call references from the same step graph that was exported, run
eagerly in float on the artifact's own inputs (so a quantized artifact's drift
in KV state does not hide or inflate a single call's error).
"""

from __future__ import annotations

import numpy as np


class LMReference:
    def __init__(self, hf_model, step_modules: dict):
        self.model = hf_model
        self.steps = step_modules  # component name -> torch module (float)
        self._gen: dict[tuple, list[int]] = {}

    def _embeds(self, ids, inject: dict[int, np.ndarray]):
        import torch

        emb = self.model.get_input_embeddings()(ids).clone()
        for pos, row in inject.items():
            emb[0, pos] = torch.from_numpy(np.asarray(row, dtype=np.float32))
        return emb

    def generate(self, prompt: list[int], steps: int, inject: dict[int, np.ndarray] | None = None) -> list[int]:
        """HF greedy generation; with `inject`, the prompt goes in as embeddings with those rows replaced."""
        import torch

        key = (tuple(prompt), steps, tuple((p, np.asarray(r).tobytes()) for p, r in sorted((inject or {}).items())))
        if key not in self._gen:
            ids = torch.tensor([prompt], dtype=torch.long)
            kw = dict(attention_mask=torch.ones_like(ids),  # explicit: never infer padding from token ids
                      max_new_tokens=steps, min_new_tokens=steps, do_sample=False, pad_token_id=0)
            with torch.no_grad():
                if inject:  # generate() from embeddings returns only the new tokens
                    self._gen[key] = self.model.generate(inputs_embeds=self._embeds(ids, inject), **kw)[0].tolist()
                else:
                    self._gen[key] = self.model.generate(ids, **kw)[0, len(prompt) :].tolist()
        return self._gen[key]

    def teacher_logits(self, prompt: list[int], tokens: list[int], inject: dict[int, np.ndarray] | None = None) -> list[np.ndarray]:
        """Logits at the last prompt position and after each of tokens[:-1] (one full forward)."""
        import torch

        seq = torch.tensor([prompt + tokens[:-1]], dtype=torch.long)
        with torch.no_grad():
            if inject:
                logits = self.model(inputs_embeds=self._embeds(seq, inject), attention_mask=torch.ones_like(seq)).logits[0].numpy()
            else:
                logits = self.model(seq, attention_mask=torch.ones_like(seq)).logits[0].numpy()
        return [logits[len(prompt) - 1 + i] for i in range(len(tokens))]

    def holding(self, component: str):
        """While inside, `call(component, ...)` reads no tensor again (the whole model is already in memory here)."""
        import contextlib

        return contextlib.nullcontext()

    def drop_resident(self) -> None:
        """Give back what the reference keeps between calls (nothing here: the model is whole)."""

    def call(self, component: str, feeds: dict[str, np.ndarray], output_names: list[str]) -> dict[str, np.ndarray]:
        import torch

        mod = self.steps[component]
        names = list(feeds)
        with torch.no_grad():
            outs = mod(*[torch.from_numpy(np.ascontiguousarray(feeds[n])) for n in names])
        if isinstance(outs, torch.Tensor):  # single-output graphs (embedding, head)
            outs = (outs,)
        return {n: o.numpy() for n, o in zip(output_names, outs)}


class StreamedLMReference(LMReference):
    """The same reference over a model whose tensors stay in the checkpoint (exporter/models/streamed.py): a forward
    or `generate` holds one block at a time (plus what the model's budget keeps resident), and a per-call reference
    holds the tensors of that call's step module only. Computes what LMReference computes over the whole model."""

    def __init__(self, streamed, step_modules: dict):
        super().__init__(streamed.model, step_modules)
        self.streamed = streamed
        self._names = {c: streamed.names_used_by(m) for c, m in step_modules.items()}

    def generate(self, prompt, steps, inject=None):
        with self.streamed.stream():
            return super().generate(prompt, steps, inject)

    def teacher_logits(self, prompt, tokens, inject=None):
        with self.streamed.stream():
            return super().teacher_logits(prompt, tokens, inject)

    def call(self, component, feeds, output_names):
        with self.streamed.holding(self._names[component]):
            return super().call(component, feeds, output_names)

    def holding(self, component: str):
        return self.streamed.holding(self._names[component])

    def drop_resident(self) -> None:
        self.streamed.drop_resident()

"""Static-shape step graphs over loaded transformers models, one module per architecture."""

from __future__ import annotations


def step_module(hf_model, architecture: str, component):
    """The torch module that is exported (and run eagerly as the per-call reference) for `component`."""
    if architecture == "Qwen3ForCausalLM":
        from exporter.models.qwen3 import Qwen3Step

        return Qwen3Step(hf_model, component.bucket.ar, component.bucket.context).eval()
    if architecture == "Gemma3ForCausalLM":
        from exporter.models.gemma3 import Gemma3Embed, Gemma3Head, Gemma3Stack

        if component.role == "embedding":
            return Gemma3Embed(hf_model).eval()
        if component.role == "head":
            return Gemma3Head(hf_model).eval()
        start, end = component.layers
        return Gemma3Stack(hf_model, component.bucket.ar, component.bucket.context, start, end).eval()
    raise ValueError(f"no step graphs for architecture {architecture}")

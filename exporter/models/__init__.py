"""Static-shape step graphs over loaded transformers models, one module per architecture."""

from __future__ import annotations


def step_module(hf_model, architecture: str, component, pooled_mean: bool = False):
    """The torch module that is exported (and run eagerly as the per-call reference) for `component`.

    ``pooled_mean`` computes the RMSNorm statistic in the form XNNPACK delegates (ExecuTorch programs);
    the reference always uses the plain form, so parity also checks that the two agree."""
    if architecture == "Qwen3ForCausalLM":
        if component.role in ("embedding", "head") or component.layers is not None:  # split graphs (recipes/qwen3_split.py)
            from exporter.models.split_decoder import split_step_module

            return split_step_module(hf_model, component, pooled_mean)
        from exporter.models.qwen3 import Qwen3Step

        return Qwen3Step(hf_model, component.bucket.ar, component.bucket.context, pooled_mean).eval()
    if architecture == "Gemma3ForCausalLM":
        from exporter.models.gemma3 import Gemma3Embed, Gemma3Head, Gemma3Stack

        if component.role == "embedding":
            return Gemma3Embed(hf_model).eval()
        if component.role == "head":
            return Gemma3Head(hf_model, pooled_mean).eval()
        start, end = component.layers
        return Gemma3Stack(hf_model, component.bucket.ar, component.bucket.context, start, end, pooled_mean).eval()
    raise ValueError(f"no step graphs for architecture {architecture}")

"""The sampler contract of split LM bundles (state_layout["sampler"]), as a reference implementation.

Runs on the CPU over the head graph's logits. Greedy is argmax (lowest index on ties);
top-k/top-p follows the manifest's rule, drawing with numpy's PCG64 seeded by the
caller, so the same logits, settings and seed give the same token on every host.
"""

from __future__ import annotations

import numpy as np


def greedy(logits: np.ndarray) -> int:
    return int(np.argmax(np.asarray(logits).reshape(-1)))


def greedy_decode(last: np.ndarray, steps: int, advance, forced: list[int] | None = None) -> tuple[list[int], list[np.ndarray]]:
    """`steps` greedy tokens from the logits `last`; `advance(token)` runs one decode call and returns its logits.

    With `forced` (teacher forcing) forced[i] is fed back instead of the argmax; the argmax is still returned.
    """
    tokens: list[int] = []
    logits: list[np.ndarray] = []
    for i in range(steps):
        logits.append(last)
        tokens.append(greedy(last))
        if i == steps - 1:
            break
        last = advance(forced[i] if forced is not None else tokens[-1])
    return tokens, logits


def prefill_then_decode(prompt: list[int], ar: int, prefill, decode, steps: int, forced: list[int] | None = None):
    """The generation loop of every driver: `prefill(chunk)` over AR-sized chunks of the prompt, each returning the
    logits of its last real token, then greedy_decode with `decode(token)`."""
    last = None
    for start in range(0, len(prompt), ar):
        last = prefill(prompt[start : start + ar])
    return greedy_decode(last, steps, decode, forced)


def sample(logits: np.ndarray, temperature: float = 1.0, top_k: int | None = None, top_p: float = 1.0, seed: int = 0) -> tuple[int, float]:
    z = np.asarray(logits, dtype=np.float64).reshape(-1)
    if not temperature > 0:
        raise ValueError("temperature must be > 0 (use greedy() for argmax)")
    if not 0 < top_p <= 1:
        raise ValueError("top_p must be in (0, 1]")
    z = z / temperature
    order = np.argsort(-z, kind="stable")
    if top_k is not None:
        if top_k < 1:
            raise ValueError("top_k must be >= 1")
        order = order[:top_k]
    p = np.exp(z[order] - z[order[0]])
    p /= p.sum()
    keep = int(np.searchsorted(np.cumsum(p), top_p) + 1) if top_p < 1 else len(p)
    order, p = order[:keep], p[:keep] / p[:keep].sum()
    i = np.random.Generator(np.random.PCG64(seed)).choice(len(p), p=p)
    return int(order[i]), float(p[i])

"""Deterministic token data for language-model recipes: calibration and held-out sets.

The two sets come from different seeds and are checked disjoint; every set has a
digest that goes into the manifest. Calibration sequences fill a whole context
bucket, so every position of every bucket is seen by the quantizer (position ids
feed the rotary tables). The held-out set adds adversarial prompts: the extreme
token ids, one repeated token, a prompt that is exactly one prefill chunk, and
one that spans several chunks.
"""

from __future__ import annotations

from dataclasses import dataclass

from exporter.hashing import sha256_json

CALIBRATION_SEED = 1001
EVALUATION_SEED = 2002


@dataclass(frozen=True)
class TokenSet:
    name: str
    purpose: str  # "calibration" | "evaluation"
    sequences: tuple[tuple[int, ...], ...]

    @property
    def digest(self) -> str:
        return sha256_json({"name": self.name, "sequences": [list(s) for s in self.sequences]})

    def to_json(self) -> dict:
        return {"name": self.name, "purpose": self.purpose, "count": len(self.sequences), "sha256": self.digest}


def _rng(seed: int):
    import numpy as np

    return np.random.Generator(np.random.PCG64(seed))


def calibration_set(vocab: int, context: int, count: int = 2) -> TokenSet:
    """`count` uniform random sequences plus one of short runs (each token 4 times): repetition
    concentrates attention, which widens activation ranges that random tokens never reach. Runs
    are shorter than the 8-gram disjointness window, so the held-out repeated-token prompt stays disjoint."""
    rng = _rng(CALIBRATION_SEED)
    seqs = [tuple(int(t) for t in rng.integers(0, vocab, context)) for _ in range(count)]
    runs = [int(t) for t in rng.integers(0, vocab, (context + 3) // 4) for _ in range(4)][:context]
    seqs.append(tuple(runs))
    return TokenSet("lm-calibration-v2", "calibration", tuple(seqs))


def evaluation_set(vocab: int, prefill_ar: int, count: int = 3, long_prompt: int | None = None) -> TokenSet:
    """Held-out prompts; `long_prompt` adds one prompt of that length, so that prefill runs in
    every context bucket (bucketed recipes pass a length past their second-largest bucket)."""
    rng = _rng(EVALUATION_SEED)
    lengths = [5, prefill_ar, prefill_ar + prefill_ar // 2 + 3][:count]
    seqs = [tuple(int(t) for t in rng.integers(0, vocab, n)) for n in lengths]
    seqs.append(tuple([vocab - 1, 0] * 4))  # adversarial: extreme ids
    seqs.append(tuple([int(rng.integers(0, vocab))] * 12))  # adversarial: one repeated token
    name = "lm-evaluation-v1"
    if long_prompt:
        seqs.append(tuple(int(t) for t in rng.integers(0, vocab, long_prompt)))
        name = f"lm-evaluation-v1+long{long_prompt}"
    return TokenSet(name, "evaluation", tuple(seqs))


def check_disjoint(cal: TokenSet, ev: TokenSet, ngram: int = 8) -> None:
    """No held-out prompt may share an n-gram with a calibration sequence."""
    grams = {s[i : i + ngram] for s in cal.sequences for i in range(len(s) - ngram + 1)}
    for s in ev.sequences:
        for i in range(len(s) - ngram + 1):
            if s[i : i + ngram] in grams:
                raise ValueError(f"held-out set {ev.name} overlaps calibration set {cal.name}")

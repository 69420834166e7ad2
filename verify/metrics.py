"""Parity metrics (numpy only), safe with non-finite numbers.

A NaN never reaches a fold or a JSON file: Python's `min(1.0, nan)` is 1.0, so a naive fold reports an all-NaN output
as a perfect match. A call whose artifact output has a NaN or an infinity where the reference is finite is counted
(`nonfinite_calls`, `nonfinite_values`) and judged a failure by verify/thresholds.py; a call whose reference is not
finite proves nothing and is counted apart (`reference_nonfinite_calls`), also a failure. The figures (cosine, PSNR,
max abs) are folded over the finite calls only, and are None when there were none.
"""

from __future__ import annotations

import math

import numpy as np


def cosine(a: np.ndarray, b: np.ndarray) -> float | None:
    """Cosine similarity; None when either side holds a non-finite value."""
    a = np.asarray(a, dtype=np.float64).ravel()
    b = np.asarray(b, dtype=np.float64).ravel()
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        return None
    na, nb = np.linalg.norm(a), np.linalg.norm(b)
    if na == 0.0 and nb == 0.0:
        return 1.0
    if na == 0.0 or nb == 0.0:
        return 0.0
    return float(np.dot(a, b) / (na * nb))


def psnr_db(ref: np.ndarray, test: np.ndarray) -> float:
    """PSNR with the reference's peak-to-peak range as the signal range (inf when equal; finite inputs only)."""
    ref = np.asarray(ref, dtype=np.float64)
    mse = float(np.mean((ref - np.asarray(test, dtype=np.float64)) ** 2))
    peak = float(ref.max() - ref.min()) or 1.0
    if mse == 0.0:
        return math.inf
    if not math.isfinite(mse):
        return -math.inf
    return 10.0 * math.log10(peak * peak / mse)


def max_abs(ref: np.ndarray, test: np.ndarray) -> float:
    return float(np.max(np.abs(np.asarray(ref, dtype=np.float64) - np.asarray(test, dtype=np.float64)))) if np.size(ref) else 0.0


class Accumulator:
    """Worst-case metrics of one output over many calls."""

    def __init__(self):
        self.count = 0
        self.nonfinite = 0  # calls whose artifact output is not finite where the reference is
        self.nonfinite_values = 0
        self.ref_nonfinite = 0  # calls whose reference itself is not finite
        self.cos = 1.0
        self.psnr = math.inf
        self.mabs = 0.0
        self.cos_values: list[float] = []
        self.psnr_values: list[float] = []

    @property
    def finite_calls(self) -> int:
        return self.count - self.nonfinite - self.ref_nonfinite

    def add(self, ref: np.ndarray, test: np.ndarray) -> None:
        self.count += 1
        ref = np.asarray(ref, dtype=np.float64)
        test = np.asarray(test, dtype=np.float64)
        if not np.isfinite(ref).all():
            self.ref_nonfinite += 1
            return
        bad = ~np.isfinite(test)
        if bad.any():
            self.nonfinite += 1
            self.nonfinite_values += int(bad.sum())
            return
        c = cosine(ref, test)
        self.cos = min(self.cos, c)
        self.cos_values.append(c)
        p = psnr_db(ref, test)
        self.psnr_values.append(p)
        self.psnr = min(self.psnr, p)
        self.mabs = max(self.mabs, max_abs(ref, test))

    def to_json(self) -> dict:
        finite = self.finite_calls > 0
        vals = np.array(self.cos_values) if self.cos_values else np.array([1.0])
        return {
            "calls": self.count,
            "nonfinite_calls": self.nonfinite,
            "nonfinite_values": self.nonfinite_values,
            "reference_nonfinite_calls": self.ref_nonfinite,
            "min_cosine": self.cos if finite else None,
            "p05_cosine": float(np.quantile(vals, 0.05)) if finite else None,
            # None: an exact match (infinite PSNR), or no finite call to measure (then nonfinite_calls says so)
            "min_psnr_db": None if (not finite or math.isinf(self.psnr) and self.psnr > 0) else (self.psnr if math.isfinite(self.psnr) else -1e9),
            "max_abs": self.mabs if finite else None,
            "distribution": {"quantiles": list(QUANTILES), "cosine": _quantiles(self.cos_values), "psnr_db": _quantiles(self.psnr_values)},
        }


QUANTILES = (0.0, 0.05, 0.25, 0.5, 0.75, 0.95, 1.0)


def _quantiles(values: list[float]) -> list[float | None] | None:
    """Per-call distribution of a metric (None for an infinite PSNR: an exact match)."""
    if not values:
        return None
    q = np.quantile(np.array(values, dtype=np.float64), QUANTILES, method="nearest")  # no interpolation across inf
    return [None if math.isinf(x) else float(x) for x in q]

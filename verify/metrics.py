"""Parity metrics (numpy only)."""

from __future__ import annotations

import math

import numpy as np


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    a = a.astype(np.float64).ravel()
    b = b.astype(np.float64).ravel()
    na, nb = np.linalg.norm(a), np.linalg.norm(b)
    if na == 0.0 and nb == 0.0:
        return 1.0
    if na == 0.0 or nb == 0.0:
        return 0.0
    return float(np.dot(a, b) / (na * nb))


def psnr_db(ref: np.ndarray, test: np.ndarray) -> float:
    """PSNR with the reference's peak-to-peak range as the signal range."""
    ref = ref.astype(np.float64)
    mse = float(np.mean((ref - test.astype(np.float64)) ** 2))
    peak = float(ref.max() - ref.min()) or 1.0
    if mse == 0.0:
        return math.inf
    return 10.0 * math.log10(peak * peak / mse)


def max_abs(ref: np.ndarray, test: np.ndarray) -> float:
    return float(np.max(np.abs(ref.astype(np.float64) - test.astype(np.float64))))


class Accumulator:
    """Worst-case metrics of one output over many calls."""

    def __init__(self):
        self.count = 0
        self.cos = 1.0
        self.psnr = math.inf
        self.mabs = 0.0
        self.cos_values: list[float] = []
        self.psnr_values: list[float] = []

    def add(self, ref: np.ndarray, test: np.ndarray) -> None:
        self.count += 1
        c = cosine(ref, test)
        self.cos = min(self.cos, c)
        self.cos_values.append(c)
        p = psnr_db(ref, test)
        self.psnr_values.append(p)
        self.psnr = min(self.psnr, p)
        self.mabs = max(self.mabs, max_abs(ref, test))

    def to_json(self) -> dict:
        vals = np.array(self.cos_values) if self.cos_values else np.array([1.0])
        return {
            "calls": self.count,
            "min_cosine": self.cos,
            "p05_cosine": float(np.quantile(vals, 0.05)),
            "min_psnr_db": None if math.isinf(self.psnr) else self.psnr,
            "max_abs": self.mabs,
            "distribution": {"quantiles": list(QUANTILES), "cosine": _quantiles(self.cos_values), "psnr_db": _quantiles(self.psnr_values)},
        }


QUANTILES = (0.0, 0.05, 0.25, 0.5, 0.75, 0.95, 1.0)


def _quantiles(values: list[float]) -> list[float | None] | None:
    """Per-call distribution of a metric (None for an infinite PSNR: an exact match)."""
    if not values:
        return None
    q = np.quantile(np.array(values, dtype=np.float64), QUANTILES, method="nearest")  # no interpolation across inf
    return [None if math.isinf(x) else float(x) for x in q]

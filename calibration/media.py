"""Deterministic images and audio for the multimodal recipes: calibration and held-out sets.

Images are synthetic scenes (smooth gradients, a few filled shapes, edges and sensor-like noise),
normalised the way MiniCPM-V's processor does (x / 255, then (x - 0.5) / 0.5) into one 448² slice,
NCHW. Audio is one second at 16 kHz (a few harmonic tones with vibrato, a chirp, a noise burst and
silence) turned into Whisper's 80-bin log-mel by transformers' own WhisperFeatureExtractor (numpy),
the frames MiniCPM-o feeds its Whisper encoder. The held-out sets add adversarial inputs: a flat
black slice, a saturated white one, silence, and a full-scale square wave; the audio calibration set
covers the ends of the range with a near-silent room and a clipped tone of another pitch. Calibration and
held-out sets come from different seeds and are checked disjoint by digest.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from exporter.hashing import sha256_json

CALIBRATION_SEED = 3003
EVALUATION_SEED = 4004
SAMPLE_RATE = 16000


@dataclass(frozen=True)
class ArraySet:
    name: str
    purpose: str  # "calibration" | "evaluation"
    kind: str  # "image" | "audio" | "speech-condition"
    items: tuple[dict, ...]  # each: input name -> array

    @property
    def digest(self) -> str:
        return sha256_json({"name": self.name, "items": [{k: _array_digest(v) for k, v in sorted(it.items())} for it in self.items]})

    def item_digests(self) -> set[str]:
        return {sha256_json({k: _array_digest(v) for k, v in sorted(it.items())}) for it in self.items}

    def to_json(self) -> dict:
        return {"name": self.name, "purpose": self.purpose, "kind": self.kind, "count": len(self.items), "sha256": self.digest}


def _array_digest(a: np.ndarray) -> str:
    import hashlib

    a = np.ascontiguousarray(a)
    return hashlib.sha256(str((a.dtype.str, a.shape)).encode() + a.tobytes()).hexdigest()


def _rng(seed: int):
    return np.random.Generator(np.random.PCG64(seed))


def scene(rng, size: int) -> np.ndarray:
    """An RGB uint8 image [size, size, 3]."""
    y, x = np.mgrid[0:size, 0:size] / size
    img = np.stack([rng.uniform(0.2, 1) * x + rng.uniform(0, 0.3), rng.uniform(0.2, 1) * y, rng.uniform(0, 1) * (1 - x * y)], -1)
    for _ in range(int(rng.integers(2, 6))):
        cx, cy, r = rng.uniform(0, 1), rng.uniform(0, 1), rng.uniform(0.05, 0.3)
        color = rng.uniform(0, 1, 3)
        if rng.uniform() < 0.5:
            img[(x - cx) ** 2 + (y - cy) ** 2 < r * r] = color
        else:
            img[(abs(x - cx) < r) & (abs(y - cy) < r / 2)] = color
    img += rng.normal(0, 0.03, img.shape)
    return (np.clip(img, 0, 1) * 255).round().astype(np.uint8)


def normalise_slice(img: np.ndarray) -> np.ndarray:
    """uint8 [S, S, 3] -> float32 [1, 3, S, S] as MiniCPM-V's processor normalises (mean 0.5, std 0.5)."""
    x = img.astype(np.float32) / 255.0
    return ((x - 0.5) / 0.5).transpose(2, 0, 1)[None].astype(np.float32)


def waveform(rng) -> np.ndarray:
    t = np.arange(SAMPLE_RATE) / SAMPLE_RATE
    f0 = rng.uniform(90, 300)
    wave = sum(rng.uniform(0.05, 0.3) / k * np.sin(2 * np.pi * k * f0 * t + 0.3 * np.sin(2 * np.pi * 5 * t)) for k in range(1, 6))
    f1, f2 = rng.uniform(200, 1000), rng.uniform(1000, 6000)
    wave = wave + 0.1 * np.sin(2 * np.pi * (f1 + (f2 - f1) * t / 2) * t) * (t > 0.5)
    burst = slice(int(rng.integers(0, SAMPLE_RATE - 2000)), None)
    noise = np.zeros_like(t)
    noise[burst][:2000] = rng.normal(0, 0.1, 2000)
    wave = wave + noise
    wave[int(rng.integers(0, SAMPLE_RATE - 3000)):][:3000] = 0.0  # a pause
    return wave.astype(np.float32)


def log_mel(wave: np.ndarray, mel_bins: int, frames: int) -> np.ndarray:
    """float32 [1, mel, frames]: transformers' WhisperFeatureExtractor (numpy path), first `frames` frames."""
    from transformers import WhisperFeatureExtractor

    fe = WhisperFeatureExtractor(feature_size=mel_bins, sampling_rate=SAMPLE_RATE)
    feats = fe._np_extract_fbank_features(wave[None].astype(np.float32), "cpu")  # [1, mel, 101] for one second
    return np.ascontiguousarray(feats[:, :, :frames]).astype(np.float32)


def image_set(purpose: str, size: int, count: int) -> ArraySet:
    rng = _rng(CALIBRATION_SEED if purpose == "calibration" else EVALUATION_SEED)
    items = [{"pixel_values": normalise_slice(scene(rng, size))} for _ in range(count)]
    if purpose == "evaluation":
        items += [{"pixel_values": normalise_slice(np.zeros((size, size, 3), np.uint8))},
                  {"pixel_values": normalise_slice(np.full((size, size, 3), 255, np.uint8))}]
    return ArraySet(f"images-{size}-{purpose}-v1", purpose, "image", tuple(items))


def audio_set(purpose: str, mel_bins: int, frames: int, count: int) -> ArraySet:
    rng = _rng(CALIBRATION_SEED + 1 if purpose == "calibration" else EVALUATION_SEED + 1)
    waves = [waveform(rng) for _ in range(count)]
    t = np.arange(SAMPLE_RATE) / SAMPLE_RATE
    if purpose == "calibration":  # the input range's ends: a near-silent room and a clipped tone (not the held-out ones)
        waves += [rng.normal(0, 1e-4, SAMPLE_RATE).astype(np.float32), np.sign(np.sin(2 * np.pi * 300 * t)).astype(np.float32)]
    if purpose == "evaluation":
        waves += [np.zeros(SAMPLE_RATE, np.float32), np.sign(np.sin(2 * np.pi * 440 * t)).astype(np.float32)]
    items = [{"input_features": log_mel(w, mel_bins, frames)} for w in waves]
    return ArraySet(f"audio-1s-{mel_bins}mel-{purpose}-v1", purpose, "audio", tuple(items))


def condition_set(purpose: str, num_text_tokens: int, llm_dim: int, ar: int, lengths: tuple[int, ...]) -> ArraySet:
    """Speech-decoder conditions: reply text ids (padded to the graph's AR with 0) and LLM hidden rows.

    The hidden rows are seeded Gaussians with the scale of an RMS-normalised hidden state; the
    projector output is L2-normalised, so only their direction matters. ``n`` is the real length."""
    rng = _rng(CALIBRATION_SEED + 2 if purpose == "calibration" else EVALUATION_SEED + 2)
    items = []
    for n in lengths:
        ids = np.zeros((1, ar), np.int32)
        ids[0, :n] = rng.integers(0, num_text_tokens, n)
        hidden = np.zeros((1, ar, llm_dim), np.float32)
        hidden[0, :n] = rng.normal(0, 1, (n, llm_dim))
        items.append({"text_ids": ids, "llm_hidden": hidden, "n": np.array([n], np.int32)})
    return ArraySet(f"speech-conditions-{purpose}-v1", purpose, "speech-condition", tuple(items))


def check_disjoint(cal: ArraySet, ev: ArraySet) -> None:
    if cal.item_digests() & ev.item_digests():
        raise ValueError(f"held-out set {ev.name} shares an item with calibration set {cal.name}")

"""The CPU features of this host that can change an artifact's numbers, and the ISA baselines targets declare.

ONNX Runtime's MLAS picks its integer GEMM kernel by CPUID at start-up (onnxruntime/core/mlas/lib/platform.cpp):
on x86-64 a U8S8 product (uint8 activations x int8 weights) runs ``vpmaddubsw`` on AVX2 and on AVX-512 without
VNNI, whose 16-bit pair sums saturate, and ``vpdpbusd`` (exact int32) with AVX-VNNI, AVX-512 VNNI or AMX. A
parity verdict measured on one of those hosts need not hold on another, so every manifest records the features of
the host that measured parity (``host_cpu()``), every CPU target declares the ISA baseline it promises
(``targets.toml: isa_baseline``), and the audit reports a bundle measured above its target's baseline whose
scheme is not proven ISA-independent (``manifests/audit.py``, check ``host-isa``).

Torch-free and dependency-free: Linux reads ``/proc/cpuinfo``; elsewhere the features are reported unknown
rather than guessed.
"""

from __future__ import annotations

import platform
from pathlib import Path

# features that select a different numeric kernel somewhere in ONNX Runtime, XNNPACK or torch (names as Linux's
# /proc/cpuinfo spells them)
X86_NUMERIC = ("sse4_1", "sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512_vnni",
               "avx512_bf16", "avx512_fp16", "avx_vnni", "avx_vnni_int8", "avx_ne_convert", "amx_tile", "amx_int8", "amx_bf16",
               "amx_fp16")
ARM64_NUMERIC = ("asimd", "asimdhp", "asimddp", "i8mm", "bf16", "sve", "sve2", "sme")

# baseline name -> the numeric features every host of that baseline has
BASELINES: dict[str, tuple[str, ...]] = {
    "x86-64-v3": ("sse4_1", "sse4_2", "avx", "avx2", "fma", "f16c"),  # Haswell and newer, AMD Zen and newer
    "armv8.0-a": ("asimd",),  # every arm64-v8a host
}


def _cpuinfo(text: str, machine: str) -> dict:
    flags: set[str] = set()
    model = None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip().lower()
        if key in ("flags", "features") and not flags:
            flags = set(value.split())
        elif key in ("model name", "cpu model", "hardware") and model is None:
            model = value.strip()
    numeric = X86_NUMERIC if machine == "x86_64" else ARM64_NUMERIC if machine == "aarch64" else ()
    return {"model": model, "features": sorted(f for f in numeric if f in flags)}


def normalized_machine() -> str:
    m = platform.machine().lower()
    return {"amd64": "x86_64", "x86_64": "x86_64", "arm64": "aarch64", "aarch64": "aarch64"}.get(m, m)


def host_cpu(cpuinfo: Path = Path("/proc/cpuinfo")) -> dict:
    """{arch, model, features (numeric ones present), source, mlas_qgemm}: what measured this build's parity."""
    machine = normalized_machine()
    try:
        parsed = _cpuinfo(cpuinfo.read_text(errors="replace"), machine)
        source = str(cpuinfo)
    except OSError:
        parsed, source = {"model": None, "features": None}, f"unavailable on {platform.system() or 'this OS'} (no {cpuinfo})"
    out = {"arch": machine, "model": parsed["model"], "features": parsed["features"], "source": source}
    out["mlas_qgemm"] = mlas_qgemm_paths(machine, parsed["features"])
    return out


def mlas_qgemm_paths(machine: str, features: list[str] | None) -> dict | None:
    """The kernel ONNX Runtime's MLAS uses for a uint8 x int8 and a uint8 x uint8 product on a host with these
    features (the order of onnxruntime/core/mlas/lib/platform.cpp; 'saturating' marks vpmaddubsw's 16-bit pair sums)."""
    if features is None:
        return None
    f = set(features)
    if machine == "x86_64":
        if not {"avx2", "fma"} <= f:
            return {"u8s8": "sse4.1 (exact int32)" if "sse4_1" in f else "sse2 (exact int32)", "u8u8": "sse2 (exact int32)"}
        u8s8 = "avx2 vpmaddubsw (16-bit pair sums saturate)"
        if "avx_vnni" in f:
            u8s8 = "avx-vnni vpdpbusd (exact int32)"
        if {"avx512f", "avx512bw", "avx512dq", "avx512vl"} <= f:
            u8s8 = "avx512core vpmaddubsw (16-bit pair sums saturate)"
            if "avx512_vnni" in f:
                u8s8 = "avx512-vnni vpdpbusd (exact int32)"
        if {"amx_tile", "amx_int8"} <= f:
            u8s8 = "amx tdpbusd (exact int32)"
        u8u8 = "avx512core vpmaddwd on zero-extended words (exact int32)" if {"avx512f", "avx512bw", "avx512dq", "avx512vl"} <= f \
            else "avx2 vpmaddwd on zero-extended words (exact int32)"
        if "avx_vnni_int8" in f:
            u8u8 = "avx-vnni-int8 vpdpbuud (exact int32)"
        return {"u8s8": u8s8, "u8u8": u8u8}
    if machine == "aarch64":
        dot = "i8mm (exact int32)" if "i8mm" in f else "dotprod (exact int32)" if "asimddp" in f else "neon (exact int32)"
        return {"u8s8": dot, "u8u8": dot}
    return None


def above_baseline(host: dict | None, baseline: str | None) -> list[str] | None:
    """Numeric features of `host` beyond `baseline` ([] when within it), or None when either is unknown."""
    if not host or host.get("features") is None or baseline not in BASELINES:
        return None
    base = set(BASELINES[baseline])
    arch = "x86_64" if baseline.startswith("x86") else "aarch64"
    if host.get("arch") != arch:
        return None
    return sorted(set(host["features"]) - base)


def missing_from_baseline(host: dict | None, baseline: str | None) -> list[str]:
    """Baseline features this host lacks (it cannot stand for the baseline at all)."""
    if not host or host.get("features") is None or baseline not in BASELINES:
        return []
    return sorted(set(BASELINES[baseline]) - set(host["features"]))

"""int8 CPU artifacts give the same numbers on every host their target admits (issue #27, item 1).

The verdict of an int8 bundle is measured on whatever host builds it. These tests prove that the tiny-lm int8
bundle computes bit-identical outputs on the x86-64-v3 baseline path (AVX2, no VNNI, no AVX-512) even when the test
host has VNNI: the bundle's graphs run in a child under qemu-user emulating a Haswell core, where ONNX Runtime's
CPUID dispatch selects the AVX2 kernels for real. A control graph quantized the old way (int8 weights, U8S8) shows
that the emulated run does take another kernel path. A pure-integer model of vpmaddubsw backs the build-time guard.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from verify import isa_replay

REQUIRE_QEMU = os.environ.get("EDGE_EXPORT_REQUIRE_QEMU") == "1"  # .ci/run sets it: CI never skips the emulated path


def _need_qemu():
    if isa_replay.qemu_for("x86-64-v3") is None:
        if REQUIRE_QEMU:
            pytest.fail("qemu-x86_64 is required to run the AVX2 baseline path (apt-get install qemu-user)")
        pytest.skip("qemu-x86_64 not installed: the AVX2 baseline path cannot be run on this host (apt-get install qemu-user)")


@pytest.fixture(scope="module")
def cpu_bundles(tmp_path_factory, dev_keys):
    out = tmp_path_factory.mktemp("isa")
    exe = Path(sys.executable).with_name("edge-export")
    p = subprocess.run([str(exe), "recipe", "tiny-lm", "--target", "cpu", "--out", str(out), "--json"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr[-3000:]
    root = out / "tiny-lm" / "cpu-x86-linux"
    return {"fp32": root / "fp32", "int8": root / "int8", "out": out}


def _u8s8_graphs(fp32_bundle: Path, dest: Path) -> dict:
    """The same float graphs quantized as before issue #27 (int8 per-channel weights: U8S8 products)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    manifest = json.loads((fp32_bundle / "manifest.json").read_text())
    graphs = {}
    for c in manifest["components"]:
        dst = dest / f"{c['name']}_u8s8.onnx"
        quantize_dynamic(str(fp32_bundle / c["entry"]), str(dst), weight_type=QuantType.QInt8, per_channel=True)
        graphs[c["name"]] = dst
    return graphs


def test_int8_manifest_records_the_scheme_the_kernels_and_the_measuring_cpu(cpu_bundles):
    m = json.loads((cpu_bundles["int8"] / "manifest.json").read_text())
    q = m["quantization"]
    assert q["options"]["weight_type"] == "QUInt8" and q["weights"].startswith("uint8 per-channel")
    k = q["integer_kernels"]
    assert k["products"] > 0 and k["exact_on_every_path"] and not k["saturating"]
    assert set(k["weight_types"]) <= {"uint8", "uint8 (dynamic)"}
    assert q["isa"]["dependent"] is False
    cpu = m["verification"]["host_cpu"]
    assert cpu["arch"] in ("x86_64", "aarch64") and isinstance(cpu["features"], list)
    assert m["verification"]["isa_baseline"] == m["target"]["isa_baseline"] == "x86-64-v3"


def test_int8_bundle_is_bit_identical_on_the_avx2_baseline_path(cpu_bundles, tmp_path):
    _need_qemu()
    native = isa_replay.load(isa_replay.run_child(cpu_bundles["int8"], tmp_path / "native.npz"))
    avx2 = isa_replay.load(isa_replay.run_child(cpu_bundles["int8"], tmp_path / "avx2.npz", baseline="x86-64-v3"))
    r = isa_replay.compare(native, avx2)
    assert r["same_calls"] and r["calls"] >= 20
    assert r["identical"], f"int8 outputs differ on the AVX2 path: {r}"


def test_the_emulated_run_takes_another_kernel_path(cpu_bundles, tmp_path):
    """Control: U8S8 graphs of the same model. Where this host's own U8S8 kernel is exact (VNNI, AMX), the AVX2 run
    under qemu must differ (vpmaddubsw saturates); where this host itself is an AVX2-class host, both runs take the
    same saturating kernel and must agree."""
    _need_qemu()
    from exporter.hostcpu import host_cpu

    graphs = _u8s8_graphs(cpu_bundles["fp32"], tmp_path)
    native = isa_replay.load(isa_replay.run_child(cpu_bundles["int8"], tmp_path / "n.npz", graphs=graphs))
    avx2 = isa_replay.load(isa_replay.run_child(cpu_bundles["int8"], tmp_path / "a.npz", baseline="x86-64-v3", graphs=graphs))
    r = isa_replay.compare(native, avx2)
    paths = host_cpu()["mlas_qgemm"] or {}
    if "exact" in paths.get("u8s8", ""):
        assert not r["identical"] and r["max_abs"] > 1e-3, r
    else:
        assert r["identical"], r


def test_guard_flags_int8_weights_that_can_saturate_and_passes_the_bundle(cpu_bundles, tmp_path):
    from exporter.backends.quantize import integer_kernel_report

    bundle = integer_kernel_report(cpu_bundles["int8"] / "prefill_ar32_cl256.onnx")
    assert bundle["exact_on_every_path"] and bundle["products"] >= 7
    old = integer_kernel_report(_u8s8_graphs(cpu_bundles["fp32"], tmp_path)["prefill"])
    assert not old["exact_on_every_path"] and old["saturating"]


def _vpmaddubsw_gemm(a_u8: np.ndarray, b_s8: np.ndarray) -> np.ndarray:
    """The AVX2 U8S8 kernel's arithmetic: u8*s8 pair sums saturated to int16 (vpmaddubsw), widened and summed in int32
    (vpmaddwd with ones, vpaddd). a: [M, K] uint8, b: [K, N] int8."""
    k = a_u8.shape[1] + a_u8.shape[1] % 2
    a = np.zeros((a_u8.shape[0], k), np.int32)
    a[:, : a_u8.shape[1]] = a_u8
    b = np.zeros((k, b_s8.shape[1]), np.int32)
    b[: b_s8.shape[0]] = b_s8
    pairs = a[:, 0::2, None] * b[None, 0::2, :] + a[:, 1::2, None] * b[None, 1::2, :]
    return np.clip(pairs, -32768, 32767).sum(axis=1, dtype=np.int64)


def test_integer_model_of_vpmaddubsw_agrees_with_the_guard():
    """The guard's rule (255 * (|b0| + |b1|) > 32767 with equal signs) is exactly when saturation can change a sum."""
    from exporter.backends.quantize import saturating_pairs

    rng = np.random.default_rng(0)
    a = rng.integers(0, 256, (64, 96)).astype(np.uint8)
    a[0] = 255  # DynamicQuantizeLinear maps each call's maximum to 255: the worst case occurs
    safe = rng.integers(-64, 65, (96, 32)).astype(np.int8)  # |b| <= 64: reduce_range's 7-bit weights
    assert saturating_pairs(safe) == 0
    assert np.array_equal(_vpmaddubsw_gemm(a, safe), a.astype(np.int64) @ safe.astype(np.int64))
    risky = safe.copy()
    risky[10, 3], risky[11, 3] = 127, 120
    assert saturating_pairs(risky) == 1
    assert not np.array_equal(_vpmaddubsw_gemm(a, risky), a.astype(np.int64) @ risky.astype(np.int64))
    u8 = rng.integers(0, 256, (96, 32)).astype(np.int64)  # U8U8 widens to 16-bit words: vpmaddwd pair sums fit int32
    assert int((255 * u8[0::2] + 255 * u8[1::2]).max()) < 2**31


CPUINFO_AVX2 = "processor\t: 0\nmodel name\t: AMD EPYC 7B12\nflags\t\t: fpu sse sse2 ssse3 sse4_1 sse4_2 avx avx2 fma f16c bmi2\n"
CPUINFO_ICX = ("processor\t: 0\nmodel name\t: Intel Xeon\nflags\t\t: sse4_1 sse4_2 avx avx2 fma f16c avx512f avx512bw avx512dq "
               "avx512vl avx512_vnni\n")
CPUINFO_ARM = "processor\t: 0\nFeatures\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp asimddp i8mm\n"


@pytest.mark.parametrize("text,machine,features,u8s8", [
    (CPUINFO_AVX2, "x86_64", ["avx", "avx2", "f16c", "fma", "sse4_1", "sse4_2"], "saturate"),
    (CPUINFO_ICX, "x86_64", ["avx", "avx2", "avx512_vnni", "avx512bw", "avx512dq", "avx512f", "avx512vl", "f16c", "fma", "sse4_1", "sse4_2"],
     "avx512-vnni"),
    (CPUINFO_ARM, "aarch64", ["asimd", "asimddp", "asimdhp", "i8mm"], "i8mm"),
])
def test_host_cpu_reads_the_numeric_features(tmp_path, monkeypatch, text, machine, features, u8s8):
    from exporter import hostcpu

    f = tmp_path / "cpuinfo"
    f.write_text(text)
    monkeypatch.setattr(hostcpu, "normalized_machine", lambda: machine)
    h = hostcpu.host_cpu(f)
    assert h["features"] == features and u8s8 in h["mlas_qgemm"]["u8s8"]
    base = "x86-64-v3" if machine == "x86_64" else "armv8.0-a"
    extra = hostcpu.above_baseline(h, base)
    assert (extra == []) == (text is CPUINFO_AVX2)
    assert hostcpu.missing_from_baseline(h, base) == []


def test_host_cpu_unknown_is_reported_not_guessed(tmp_path):
    from exporter import hostcpu

    h = hostcpu.host_cpu(tmp_path / "absent")
    assert h["features"] is None and "unavailable" in h["source"] and h["mlas_qgemm"] is None
    assert hostcpu.above_baseline(h, "x86-64-v3") is None


def _isa_manifest(features, isa, baseline="x86-64-v3"):
    host = {"arch": "x86_64", "model": "test cpu", "features": features, "source": "test"}
    return {"target": {"name": "cpu-x86-linux", "isa_baseline": baseline}, "verification": {"host_cpu": host},
            "quantization": {"scheme": "ort-dynamic", **({"isa": isa} if isa else {})}}


def test_audit_reports_a_bundle_measured_above_the_baseline_as_a_finding():
    from manifests.audit import Policy, _check_host_isa

    base = ["avx", "avx2", "f16c", "fma", "sse4_1", "sse4_2"]
    vnni = base + ["avx512_vnni", "avx512bw", "avx512dq", "avx512f", "avx512vl"]
    at = _check_host_isa(_isa_manifest(base, None), Policy())
    assert at.ok and not at.finding
    proven = _check_host_isa(_isa_manifest(vnni, {"dependent": False, "why": "U8U8"}), Policy())
    assert proven.ok and not proven.finding and "avx512_vnni" in proven.message
    unproven = _check_host_isa(_isa_manifest(vnni, None), Policy())
    assert unproven.ok and unproven.finding and "avx512_vnni" in unproven.message
    strict = _check_host_isa(_isa_manifest(vnni, None), Policy(require_baseline_host=True))
    assert not strict.ok and strict.fix
    unknown = _check_host_isa({**_isa_manifest(vnni, None), "verification": {}}, Policy())
    assert unknown.finding and "does not record" in unknown.message
    accel = _check_host_isa({**_isa_manifest(vnni, None), "target": {"name": "qcs6490", "isa_baseline": None}}, Policy())
    assert accel.ok and not accel.finding


def test_every_cpu_target_declares_a_known_baseline():
    from exporter.hostcpu import BASELINES
    from exporter.targets import all_targets

    cpu = [t for t in all_targets() if t.accelerator.kind == "cpu"]
    assert cpu and all(t.isa_baseline in BASELINES for t in cpu)
    assert all(t.isa_baseline is None for t in all_targets() if t.accelerator.kind != "cpu")

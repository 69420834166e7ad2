"""ExecuTorch: XNNPACK programs for CPU routes, load-checked, parity-gated, signed; the QNN delegate as a precise prerequisite."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from manifests import manifest as mf

pytest.importorskip("executorch", reason="the [executorch] extra is part of the test install; install it")
pytestmark = pytest.mark.e2e


@pytest.fixture(scope="session")
def et_root(tmp_path_factory):
    return tmp_path_factory.mktemp("et-artifacts")


@pytest.fixture(scope="session")
def et_built(et_root, dev_keys):
    from exporter.pipeline import build

    return {r.precision: r for r in build("tiny-lm", "cpu-arm64", fmt="executorch", out_root=et_root)}


def test_every_variant_is_a_load_checked_signed_verified_program(et_built, dev_keys):
    from verify import gate

    assert set(et_built) == {"fp32", "int8", "8da4w"}
    for p, r in et_built.items():
        assert r.status == "published" and r.parity["verdict"] == "pass", (p, r.to_json())
        assert r.bundle.name == f"executorch-{p}"
        data = mf.load(r.bundle)
        assert data["bundle"]["format"] == "executorch" and data["target"]["abi"] == "linux-aarch64"
        assert not data["verification"]["on_target"]  # measured on x86: numerics, not the phone
        for c in data["components"]:
            assert c["entry"].endswith(".pte")
            prog = data["quantization"]["programs"][c["name"]]
            lc = prog["load_check"]
            assert lc["verification"] == "InternalConsistency" and lc["fresh_process"] and "forward" in lc["methods"]
            assert set(lc["constants_checked"]) == {"get_max_context_len", "get_ar", "get_n_layers", "get_vocab_size"}
            assert prog["delegation"]["unexpected"] == [] and prog["delegation"]["delegated_share"] > 0.8
            assert c["placement"]["by_provider"]["XnnpackBackend"] > 0
        measured = data["memory"]["measured"]  # a fresh process loads and runs every program
        assert measured["provider"] == "executorch:XnnpackBackend" and measured["run_peak_bytes"] > 0, measured
        # the gate opens it (a loaded forward) and it runs
        dec = next(c for c in data["components"] if c["role"] == "decode")
        runner = gate.open_session(r.bundle, dev_keys.public, "cpu-arm64-linux", dec["name"])
        import numpy as np

        feeds = {t["name"]: np.zeros(t["shape"], np.int32 if t["dtype"] == "int32" else np.float32) for t in dec["inputs"]}
        (logits,) = runner.run(["logits"], feeds)[:1]
        assert logits.shape == (1, 1, 512) and np.isfinite(logits).all()


def test_parity_follows_the_onnx_policy(et_built):
    fp32 = et_built["fp32"].parity["stages"][0]
    assert fp32["stage"] == "program" and fp32["provider"] == "executorch:XnnpackBackend"
    assert fp32["decode"]["all_greedy_exact"] and fp32["decode"]["steps"] >= 32
    assert {p["prompt_tokens"] for p in fp32["decode"]["per_prompt"]} >= {5, 32, 51}  # the held-out set of the ONNX builds
    int8 = et_built["int8"].parity["stages"][0]
    assert int8["decode"]["token_agreement"] >= 0.9
    q4 = mf.load(et_built["8da4w"].bundle)
    assert q4["quantization"]["scheme"].startswith("torchao 8da4w")
    assert q4["components"][0]["kernel_libraries"] == ["executorch.kernels.quantized"]
    # 4-bit weights cost accuracy: the manifest shows it against its own thresholds, nothing is hidden
    worst = q4["parity"]["stages"][0]["worst"]
    assert worst["min_cosine"] < mf.load(et_built["int8"].bundle)["parity"]["stages"][0]["worst"]["min_cosine"]


def test_smaller_programs_for_fewer_bits(et_built):
    size = {p: sum(f["size"] for n, f in mf.load(r.bundle)["files"].items() if n.endswith(".pte")) for p, r in et_built.items()}
    assert size["8da4w"] < size["int8"] < size["fp32"]


def test_a_program_missing_its_kernel_library_fails_the_load_check(et_built):
    """The check runs in a fresh process: a program whose declared kernels are not registered does not load."""
    from exporter.backends.executorch_export import LoadCheckError, load_check

    data = mf.load(et_built["8da4w"].bundle)
    dec = next(c for c in data["components"] if c["role"] == "decode")
    constants = data["quantization"]["programs"][dec["name"]]["constant_methods"]
    names = [t["name"] for t in dec["inputs"]]
    with pytest.raises(LoadCheckError, match="embedding_4bit"):
        load_check(et_built["8da4w"].bundle / dec["entry"], constants, names, [])
    with pytest.raises(LoadCheckError, match="disagree"):
        load_check(et_built["8da4w"].bundle / dec["entry"], {**constants, "get_vocab_size": 7}, names, dec["kernel_libraries"])


def test_unknown_kernel_library_in_a_manifest_is_refused():
    from exporter.backends.executorch_export import register_kernels
    from exporter.errors import EdgeExportError

    with pytest.raises(EdgeExportError, match="unknown ExecuTorch kernel library"):
        register_kernels(["os"])


def test_qnn_delegate_is_a_precise_prerequisite_record(tmp_path, monkeypatch):
    from exporter.backends.executorch_format import EXECUTORCH_QAIRT, executorch_qnn_missing

    # the version is the one the installed executorch says it is built against
    from executorch.backends.qualcomm.scripts import download_qnn_sdk

    assert download_qnn_sdk.QNN_VERSION == EXECUTORCH_QAIRT
    env = {k: v for k, v in __import__("os").environ.items() if k != "QNN_SDK_ROOT"}
    p = subprocess.run([sys.executable, "-m", "exporter", "recipe", "tiny-lm", "--target", "qcs6490", "--format", "executorch",
                        "--out", str(tmp_path)], capture_output=True, text=True, env=env)
    err = " ".join(p.stderr.split())
    assert p.returncode == 6 and "QNN_SDK_ROOT" in err and EXECUTORCH_QAIRT in err
    rec = json.loads((tmp_path / "tiny-lm" / "qcs6490" / "executorch-w8a16.record.json").read_text())
    assert rec["status"] == "missing-prerequisite" and rec["format"] == "executorch" and "QNN_SDK_ROOT" in rec["reason"]
    # the QAIRT inside onnxruntime-qnn is found and named as the wrong version
    import onnxruntime_qnn

    sdk = tmp_path / "sdk" / "lib" / "x86_64-linux-clang"
    sdk.mkdir(parents=True)
    (sdk / "libQnnHtp.so").symlink_to(Path(onnxruntime_qnn.__file__).parent / "libQnnHtp.so")
    (m,) = executorch_qnn_missing({"QNN_SDK_ROOT": str(tmp_path / "sdk")})
    assert "v2.51" in m.reason and EXECUTORCH_QAIRT in m.reason
    # with the right SDK present, what remains is named too (the lowering edge-export does not have yet)
    fake = tmp_path / "sdk237" / "lib" / "x86_64-linux-clang"
    fake.mkdir(parents=True)
    (fake / "libQnnHtp.so").write_bytes(b"\0build v2.37.0.250724\0")
    (m,) = executorch_qnn_missing({"QNN_SDK_ROOT": str(tmp_path / "sdk237")})
    assert m.name == "ExecuTorch QNN lowering" and "v2.37.0.250724" in m.reason


@pytest.fixture(scope="session")
def et_spark(et_root, dev_keys):
    """tiny-spark (Gemma 3 layout: sliding-window ring KV + global KV) at its first context bucket."""
    from exporter.pipeline import build

    return {r.precision: r for r in build("tiny-spark", "cpu-arm64", "fp32", fmt="executorch", out_root=et_root, context=32)
            + build("tiny-spark", "cpu-arm64", "8da4w", fmt="executorch", out_root=et_root, context=32)}


def test_spark_programs_delegate_whole_stacks_and_match_torch(et_spark, dev_keys):
    from manifests.audit import Policy, audit_bundle

    fp32 = et_spark["fp32"]
    assert fp32.status == "published", fp32.to_json()
    data = mf.load(fp32.bundle)
    # exactly the planned graphs: --context 32 builds the 32 bucket only
    assert sorted(c["graph_name"] for c in data["components"]) == ["decode_ar1_cl32", "embed_ar1", "embed_ar8", "head_ar1", "prefill_ar8_cl32"]
    for name, prog in data["quantization"]["programs"].items():
        d = prog["delegation"]
        assert d["unexpected"] == [] and prog["load_check"]["fresh_process"], name
        if name.startswith(("prefill", "decode")):
            # one XNNPACK call per stack: no norm, cat, alias or expand splits it
            assert d["delegated_subgraphs"] == 1 and d["delegated_share"] > 0.95, (name, d)
            assert set(d["not_delegated"]) <= {"aten_embedding_default", "aten_unsqueeze_copy_default", "getitem", "alloc"}, d
    stage = fp32.parity["stages"][0]
    assert stage["provider"] == "executorch:XnnpackBackend"
    assert stage["decode"]["all_greedy_exact"] and stage["decode"]["token_agreement"] == 1.0
    q4 = et_spark["8da4w"]
    assert q4.status == "published" and q4.parity["verdict"] == "pass", q4.to_json()
    assert mf.load(q4.bundle)["components"][0]["kernel_libraries"] == ["executorch.kernels.quantized"]
    for r in (fp32, q4):
        a = audit_bundle(r.bundle, dev_keys.public, Policy())
        assert a.ok, [c.to_json() for c in a.failing()]


def test_x86_route_gets_the_same_programs_verified_for_its_own_target(et_built, et_root):
    """XNNPACK programs are not compiled per CPU: the x86-64 bundle reuses the lowered programs
    (cache hit) and is verified and signed for its own target."""
    from exporter.pipeline import build

    (r,) = build("tiny-lm", "cpu-x86-linux", "fp32", fmt="executorch", out_root=et_root)
    assert r.status == "published" and r.parity["verdict"] == "pass"
    assert all(hit for k, hit in r.cache.items() if k.startswith("lower/")), r.cache
    data = mf.load(r.bundle)
    assert data["target"]["abi"] == "linux-x86_64" and data["bundle"]["format"] == "executorch"
    arm = mf.load(et_built["fp32"].bundle)
    assert {n: f["sha256"] for n, f in data["files"].items() if n.endswith(".pte")} == \
        {n: f["sha256"] for n, f in arm["files"].items() if n.endswith(".pte")}

"""w4a16 for HTP v73+ (issue #31): int4 symmetric MatMul weights, per channel or in the explicit LPBQ form, with uint16
activations; the 4-bit guard refuses what the HTP would run wrongly, naming the tensor; the simulator runs both forms
as ORT's CPU runs the same QDQ graph; tiny-lm builds, verifies and signs at w4a16 on sm8750."""

from __future__ import annotations

import json

import numpy as np
import pytest

from exporter.backends import quantize as q


def _toy(path, opset=18):
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w1 = (rng.standard_normal((256, 128)) / 16).astype(np.float32)
    w1[:64, :3] *= 20  # a block of large weights in a few channels: the block scales differ within a channel
    w2 = (rng.standard_normal((128, 64)) / 11).astype(np.float32)
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
                           helper.make_node("MatMul", ["r", "w2"], ["y"])], "toy",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 256])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 64])],
                          [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 10
    onnx.save(m, str(path))
    return {"w1": w1, "w2": w2}


def _feeds(n=8):
    rng = np.random.default_rng(1)
    return [{"x": rng.standard_normal((1, 8, 256)).astype(np.float32)} for _ in range(n)]


def _cos(a, b):
    a, b = np.ravel(a).astype(np.float64), np.ravel(b).astype(np.float64)
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


def test_lpbq_blocks_reconstruct_within_half_a_step_with_4_bit_block_scales():
    rng = np.random.default_rng(2)
    w = rng.standard_normal((200, 48)).astype(np.float32)  # 200 = 3 blocks of 64 and a partial one
    w[64:128, 5] *= 50
    qv, ints, channel = q.lpbq_blocks(w, 64)
    assert qv.dtype == np.int8 and qv.min() >= -8 and qv.max() <= 7
    assert ints.shape == (4, 48) and ints.min() >= 1 and ints.max() <= 16 and ints.max() == 16
    assert np.all(channel > 0)
    step = np.repeat(ints.astype(np.float32) * channel, 64, axis=0)[:200]
    assert np.all(np.abs(qv * step - w) <= step / 2 + 1e-6)  # no value clipped: the block scale was rounded up
    assert ints[1, 5] == 16 and ints[0, 5] < 4  # the large block sets the channel scale; the others use fewer steps


def test_the_guard_names_asymmetric_and_negative_scale_4_bit_weights(tmp_path):
    """ORT's block quantizer with `weight_symmetric` left unset writes asymmetric block int4 (silent garbage on the
    HTP, cosine 0.05 measured); a negative block scale stops the HTP's LPBQ conversion. The guard names each."""
    import onnx
    from onnx import numpy_helper
    from onnxruntime.quantization import CalibrationDataReader, CalibrationMethod, QuantType, quantize
    from onnxruntime.quantization.execution_providers.qnn import get_qnn_qdq_config

    src = tmp_path / "toy.onnx"
    _toy(src, opset=21)

    class Reader(q._Feeds, CalibrationDataReader):
        pass

    for wtype in (QuantType.QInt4, QuantType.QUInt4):  # `weight_symmetric` left to the tool: asymmetric for 4-bit types
        cfg = get_qnn_qdq_config(str(src), Reader(_feeds()), calibrate_method=CalibrationMethod.MinMax, activation_type=QuantType.QUInt16,
                                 weight_type=wtype)
        cfg.extra_options["BlockSize"] = 64
        asym = tmp_path / f"asym-{wtype.name}.onnx"
        quantize(str(src), str(asym), cfg)
        found = q.int4_findings(asym)
        assert any("w1_quantized" in f and "asymmetric" in f for f in found) and any("w2_quantized" in f for f in found), (wtype, found)

    good = tmp_path / "lpbq.onnx"
    info = q.static_w4a16(src, good, _feeds(), weights="lpbq", block_size=64)
    assert q.int4_findings(good) == [] and info["int4"]["lpbq"]["weights"] == 2
    m = onnx.load(str(good))
    for i in m.graph.initializer:
        if i.name == "w2_quantized_lpbq_channel_scale":
            i.CopyFrom(numpy_helper.from_array(-numpy_helper.to_array(i), i.name))
    onnx.save(m, str(tmp_path / "negative.onnx"))
    (found,) = q.int4_findings(tmp_path / "negative.onnx")
    assert "w2_quantized" in found and "not positive" in found

    from exporter.errors import UsageError

    for bad in ({"weights": "int3"}, {"weights": "lpbq", "block_size": 1}):
        with pytest.raises(UsageError):
            q.static_w4a16(src, tmp_path / "x.onnx", _feeds(), **bad)


@pytest.mark.parametrize("form", ["per-channel", "lpbq"])
def test_both_forms_run_on_the_htp_simulator_as_on_the_cpu(tmp_path, form):
    """From an opset-18 float graph (the exporter's), standard opset-21 Q/DQ; on sm8750's HTP (no CPU fallback) the
    LPBQ form matches ORT CPU on the same QDQ graph to float rounding, per channel to the HTP's requantization."""
    import onnx

    from exporter.runtime import open_session
    from exporter.targets import get_target

    pytest.importorskip("onnxruntime_qnn")
    src, dst = tmp_path / "toy.onnx", tmp_path / f"{form}.onnx"
    _toy(src)
    info = q.static_w4a16(src, dst, _feeds(), weights=form, block_size=64)
    assert info["int4"]["form"] == form and info["opset"] == 21
    m = onnx.load(str(dst))
    assert {(o.domain or "ai.onnx", o.version) for o in m.opset_import} == {("ai.onnx", 21)}
    x = _feeds(1)[0]
    cpu = open_session(dst, get_target("cpu").to_json())[0].run(None, x)[0]
    htp_session, placement = open_session(dst, get_target("sm8750").to_json())
    htp = htp_session.run(None, x)[0]
    assert set(placement.by_provider) == {"QNNExecutionProvider"}
    assert _cos(htp, cpu) > (0.9999999 if form == "lpbq" else 0.9999)
    flt = open_session(src, get_target("cpu").to_json())[0].run(None, x)[0]
    assert 0.97 < _cos(cpu, flt) < 0.9999  # 4-bit weights: close to the float graph, and not equal to it


@pytest.mark.e2e
def test_tiny_lm_builds_verifies_and_signs_at_w4a16_on_sm8750(tmp_path):
    import os
    import subprocess
    import sys

    env = {**os.environ, "EDGE_EXPORT_KEY_DIR": str(tmp_path / "keys")}
    p = subprocess.run([sys.executable, "-m", "exporter", "recipe", "tiny-lm", "--target", "sm8750", "-p", "w4a16", "--out", str(tmp_path),
                        "--json"], capture_output=True, text=True, env=env)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    bundle = tmp_path / "tiny-lm" / "sm8750" / "w4a16"
    m = json.loads((bundle / "manifest.json").read_text())
    assert m["quantization"]["precision"] == "w4a16" and m["quantization"]["int4"]["form"] == "lpbq"
    assert m["quantization"]["int4"]["block_size"] == 32 and m["target"]["accelerator"]["htp_arch"] >= 73
    parity = json.loads((bundle / "parity.json").read_text())
    assert parity["verdict"] == "pass" and [s["stage"] for s in parity["stages"]] == ["float-export", "fake-quant", "compiled"]
    fake, compiled = parity["stages"][1]["decode"], parity["stages"][2]["decode"]
    assert compiled["token_agreement"] == fake["token_agreement"]  # the HTP runs LPBQ as the CPU runs the QDQ graph
    assert abs(compiled["logits_vs_hf"]["min_cosine"] - fake["logits_vs_hf"]["min_cosine"]) < 1e-3
    p = subprocess.run([sys.executable, "-m", "exporter", "plan", "tiny-lm", "--target", "qcs6490", "-p", "w4a16", "--json"],
                       capture_output=True, text=True, env=env)
    assert p.returncode == 4 and json.loads(p.stdout)["rejection"]["code"] == "precision-unsupported"  # v68: still refused


def test_an_offered_precision_without_thresholds_stops_before_any_heavy_work():
    """A recipe that offers w4a16 on v73+ (for capacity planning) without w4a16 thresholds: the plan must not send it to
    a verify with nothing to judge by (a KeyError, exit 1)."""
    from dataclasses import replace

    from exporter.plan import make_plan
    from exporter.targets import get_target
    from recipes import get_recipe

    lang = get_recipe("tiny-minicpm-o.language")
    assert make_plan(lang, get_target("sm8750"), "w4a16").buildable  # measured: bench/README.md, w4a16
    lang = replace(lang, thresholds={k: v for k, v in lang.thresholds.items() if k != "w4a16"})
    p = make_plan(lang, get_target("sm8750"), "w4a16")
    assert p.admitted and not p.buildable
    (m,) = [x for x in p.missing if x.name == "w4a16 parity thresholds"]
    assert "tiny-minicpm-o.language" in m.reason and "thresholds" in m.fix
    assert make_plan(get_recipe("tiny-lm"), get_target("sm8750"), "w4a16").buildable


@pytest.mark.parametrize("seq_mse", [False, True])
def test_aimet_lpbq_runs_on_the_htp_simulator_as_on_the_cpu(tmp_path, seq_mse):
    """The aimet-onnx method (issue #31): AIMET's LPBQ, optionally after SeqMSE, from the exporter's opset-18 float graph;
    the guard passes it, the HTP (no CPU fallback) runs it as ORT's CPU runs the QDQ graph, and the scheme says who
    quantized it."""
    import onnxruntime as ort

    from exporter.backends import quantize as q
    from exporter.runtime import open_session
    from exporter.targets import get_target

    src, dst = tmp_path / "toy.onnx", tmp_path / "aimet.onnx"
    _toy(src)
    feeds = _feeds()
    info = q.static_w4a16(src, dst, feeds, weights="lpbq", block_size=64, quantizer="aimet-onnx", seq_mse=seq_mse)
    assert info["quantizer"].startswith("aimet-onnx ") and info["int4"]["seq_mse"] is seq_mse
    assert info["int4"]["matmul_weights"] == 2 and q.int4_findings(dst) == []
    cpu = ort.InferenceSession(str(dst), providers=["CPUExecutionProvider"])
    ref = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"])
    htp, placement = open_session(dst, get_target("sm8750").to_json())
    assert placement.nodes_not_on("QNNExecutionProvider") == []
    for f in feeds[:3]:
        want, got, dev = ref.run(None, f)[0], cpu.run(None, f)[0], htp.run(None, f)[0]
        assert _cos(want, got) > 0.98 and _cos(got, dev) > 0.99999
    with pytest.raises(Exception, match="LPBQ weights only"):
        q.static_w4a16(src, tmp_path / "x.onnx", feeds, weights="per-channel", quantizer="aimet-onnx")
    with pytest.raises(Exception, match="needs quantizer 'aimet-onnx'"):
        q.static_w4a16(src, tmp_path / "x.onnx", feeds, seq_mse=True)


def test_a_recipe_that_asks_for_aimet_without_its_environment_is_a_missing_prerequisite(tmp_path, monkeypatch):
    from dataclasses import replace

    from exporter.plan import make_plan
    from exporter.targets import get_target
    from recipes import get_recipe

    monkeypatch.setenv("EDGE_EXPORT_AIMET_ENV", str(tmp_path / "none"))
    lm = get_recipe("tiny-lm")
    lm = replace(lm, quant_options={**lm.quant_options, "w4a16": {"weights": "lpbq", "block_size": 32, "quantizer": "aimet-onnx"}})
    p = make_plan(lm, get_target("sm8750"), "w4a16")
    assert p.admitted and not p.buildable
    (m,) = [x for x in p.missing if x.name == "aimet-onnx environment"]
    assert str(tmp_path / "none") in m.reason and "python -m exporter.aimet_env" in m.fix


def test_a_role_can_keep_its_matmul_weights_at_8_bits_and_the_plan_prices_it(tmp_path):
    """Heads at the precision the recipe states: quant option roles.head.matmul_bits = 8 keeps the LM head's MatMul
    weights int8 per channel inside a w4a16 build (as qai-hub-models keeps its LLM heads at 8 bits); the plan prices
    that graph at 8 bits, the quantizer writes it so and the HTP runs it as the CPU does."""
    from dataclasses import replace

    import onnx
    import onnxruntime as ort

    from exporter.backends import quantize as q
    from exporter.backends.onnx_stages import role_options
    from exporter.plan import make_plan
    from exporter.runtime import open_session
    from exporter.targets import get_target
    from recipes import get_recipe

    opts = {"weights": "lpbq", "block_size": 64, "roles": {"head": {"matmul_bits": 8}}}
    assert role_options(opts, "head") == {"weights": "lpbq", "block_size": 64, "matmul_bits": 8}
    assert role_options(opts, "decode") == {"weights": "lpbq", "block_size": 64}
    lang = get_recipe("minicpm-o.language")
    four = make_plan(lang, get_target("sm8750"), "w4a16")
    eight = make_plan(replace(lang, quant_options={**lang.quant_options, "w4a16": opts}), get_target("sm8750"), "w4a16")
    head = lambda p: next(a.weight_bytes for a in p.artifacts if a.role == "head")
    assert head(eight) > 1.8 * head(four) and eight.memory["required_bytes"] > four.memory["required_bytes"]
    assert [a.weight_bytes for a in eight.artifacts if a.role != "head"] == [a.weight_bytes for a in four.artifacts if a.role != "head"]

    src, dst = tmp_path / "toy.onnx", tmp_path / "head8.onnx"
    _toy(src)
    feeds = _feeds()
    info = q.static_w4a16(src, dst, feeds, **role_options(opts, "head"))
    assert info["matmul_bits"] == 8 and "int4" not in info and info["weights"].startswith("int8 symmetric per-channel")
    types = {i.name: i.data_type for i in onnx.load(str(dst)).graph.initializer}
    assert onnx.TensorProto.INT4 not in types.values() and onnx.TensorProto.INT8 in types.values()
    cpu = ort.InferenceSession(str(dst), providers=["CPUExecutionProvider"])
    htp, placement = open_session(dst, get_target("sm8750").to_json())
    assert placement.nodes_not_on("QNNExecutionProvider") == []
    for f in feeds[:3]:
        assert _cos(cpu.run(None, f)[0], htp.run(None, f)[0]) > 0.9999

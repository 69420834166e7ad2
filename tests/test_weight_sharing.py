"""Weight-shared QNN contexts: what onnxruntime-qnn does, checked against the planner's table.

Two QDQ graphs with the same weights (AR-4 and AR-1 of one MatMul, as prefill and decode
of one bucket would be) are compiled in one `ep.share_ep_contexts` group on the HTP
simulator, then opened in a child process. Shared bundles are verified graph by graph and
the gate refuses to open one on the simulator (exporter/htp_sharing.py) because the
simulator cannot load them; this test fails the moment the pinned simulator does.
"""

from importlib import metadata

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from exporter.backends.qnn_share import compile_shared, probe_load
from exporter.htp_sharing import host_htp_is_simulator
from exporter.plan import make_plan
from exporter.targets import get_target
from recipes import get_recipe

pytest.importorskip("onnxruntime_qnn", reason="the [qnn] extra is part of the test install; install it")


def _qdq_matmul(ar: int, weight: np.ndarray) -> onnx.ModelProto:
    """float [1, ar, 16] -> Q/DQ (uint16) -> MatMul with a uint8 weight -> Q/DQ -> float [1, ar, 16]."""
    k, n = weight.shape
    w_scale = float(np.abs(weight).max() / 127)
    w_q = np.clip(np.round(weight / w_scale) + 128, 0, 255).astype(np.uint8)
    inits = [
        numpy_helper.from_array(w_q, "w_q"),
        numpy_helper.from_array(np.array(w_scale, np.float32), "w_scale"),
        numpy_helper.from_array(np.array(128, np.uint8), "w_zp"),
        numpy_helper.from_array(np.array(1 / 8192, np.float32), "a_scale"),
        numpy_helper.from_array(np.array(32768, np.uint16), "a_zp"),
        numpy_helper.from_array(np.array(1 / 1024, np.float32), "y_scale"),
    ]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "a_scale", "a_zp"], ["xq"]),
        helper.make_node("DequantizeLinear", ["xq", "a_scale", "a_zp"], ["xd"]),
        helper.make_node("DequantizeLinear", ["w_q", "w_scale", "w_zp"], ["wd"]),
        helper.make_node("MatMul", ["xd", "wd"], ["y"]),
        helper.make_node("QuantizeLinear", ["y", "y_scale", "a_zp"], ["yq"]),
        helper.make_node("DequantizeLinear", ["yq", "y_scale", "a_zp"], ["out"]),
    ]
    g = helper.make_graph(nodes, f"mm_ar{ar}", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, ar, k])],
                          [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, ar, n])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    m.ir_version = 10
    onnx.checker.check_model(m)
    return m


def test_shared_context_behaviour_matches_the_planners_table(tmp_path):
    acc = get_target("sm8750").to_json()["accelerator"]
    w = np.random.default_rng(0).standard_normal((16, 16)).astype(np.float32)
    sources = []
    for ar in (4, 1):
        p = tmp_path / f"src_ar{ar}.onnx"
        onnx.save(_qdq_matmul(ar, w), p)
        sources.append(p)
    out = tmp_path / "ctx"
    out.mkdir()
    models = compile_shared(sources, out, ["prefill_ar4_cl4", "decode_ar1_cl4"], get_target("sm8750").to_json())
    # one sharing group writes one context binary, referenced by both EPContext models
    bins = sorted(p.name for p in out.glob("*.bin"))
    assert len(bins) == 1, bins
    for m in models:
        refs = {a.s.decode() for n in onnx.load(m).graph.node if n.op_type == "EPContext" for a in n.attribute if a.name == "ep_cache_context"}
        assert refs == set(bins), (m, refs)

    # control: the same graph compiled alone loads and runs in the same loader
    from exporter.runtime import open_session

    solo = tmp_path / "solo"
    solo.mkdir()
    open_session(sources[0], get_target("sm8750").to_json(), context_out=solo / "prefill_ar4_cl4.onnx")
    control = probe_load([solo / "prefill_ar4_cl4.onnx"], acc)
    assert control["loaded"], control

    result = probe_load(models, acc)
    assert host_htp_is_simulator(), "this test measures the x86 HTP simulator"
    assert not result["loaded"], (
        f"onnxruntime-qnn {metadata.version('onnxruntime-qnn')}: the simulator loaded a weight-shared context; "
        "exporter/htp_sharing.py (and the gate's refusal) says it cannot: update them")
    # the planner ships shared contexts anyway (their load is a device check) and says so
    plan = make_plan(get_recipe("spark"), get_target("sm8750"), context=1024)
    assert plan.memory["weights_shared_between_graphs"] and plan.memory["weight_sharing"]["load_verified"] == "device-only"


def test_the_simulator_is_every_x86_host_and_no_arm_device():
    assert host_htp_is_simulator("x86_64") and host_htp_is_simulator("AMD64")
    assert not host_htp_is_simulator("aarch64") and not host_htp_is_simulator("ARM64")

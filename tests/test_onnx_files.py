"""Graphs with external weights: copied into a bundle under their entry's name, the data file renamed with them."""

import numpy as np
import pytest

from exporter.backends.onnx_export import copy_graph, external_data_files
from exporter.errors import IntegrityError


def _graph(path, location="model.onnx.data"):
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.arange(64, dtype=np.float32).reshape(8, 8) / 64, "w")
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])], [w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    onnx.save(m, str(path), save_as_external_data=True, all_tensors_to_one_file=True, location=location, size_threshold=0)


def _run(path):
    import onnxruntime as ort

    s = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return s.run(None, {"x": np.ones((1, 8), np.float32)})[0]


def test_copied_graph_carries_its_weights_under_the_entry_name(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    _graph(tmp_path / "a" / "model.onnx")
    _graph(tmp_path / "b" / "model.onnx")  # two graphs whose data files have the same name
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    assert copy_graph(tmp_path / "a" / "model.onnx", bundle / "prefill.onnx") == ["prefill.onnx", "prefill.onnx.data"]
    assert copy_graph(tmp_path / "b" / "model.onnx", bundle / "decode.onnx") == ["decode.onnx", "decode.onnx.data"]
    assert external_data_files(bundle / "decode.onnx") == ["decode.onnx.data"]
    (tmp_path / "a" / "model.onnx.data").unlink()  # the copy reads nothing from where it came from
    np.testing.assert_array_equal(_run(bundle / "prefill.onnx"), _run(tmp_path / "b" / "model.onnx"))


def test_inline_graph_is_copied_as_is(tmp_path):
    import onnx

    _graph(tmp_path / "x.onnx")
    onnx.save(onnx.load(str(tmp_path / "x.onnx")), str(tmp_path / "inline.onnx"))
    assert copy_graph(tmp_path / "inline.onnx", tmp_path / "copy.onnx") == ["copy.onnx"]
    assert (tmp_path / "copy.onnx").read_bytes() == (tmp_path / "inline.onnx").read_bytes()


def test_data_location_outside_the_graph_directory_is_refused(tmp_path):
    (tmp_path / "g").mkdir()
    _graph(tmp_path / "g" / "model.onnx", location="model.onnx.data")
    import onnx

    m = onnx.load(str(tmp_path / "g" / "model.onnx"), load_external_data=False)
    for e in m.graph.initializer[0].external_data:
        if e.key == "location":
            e.value = "../secret.data"
    onnx.save(m, str(tmp_path / "g" / "model.onnx"))
    with pytest.raises(IntegrityError, match="escapes"):
        copy_graph(tmp_path / "g" / "model.onnx", tmp_path / "out.onnx")


def test_worker_quantization_writes_what_the_in_process_pass_writes(tmp_path):
    """The worker process is a memory boundary, not another quantizer: the same bytes come back."""
    from exporter.backends import quantize as q

    _graph(tmp_path / "model.onnx")
    (tmp_path / "here").mkdir()
    (tmp_path / "there").mkdir()
    info_here = q.dynamic_int8(tmp_path / "model.onnx", tmp_path / "here" / "model.onnx")
    info_there = q.in_worker("dynamic_int8", tmp_path / "model.onnx", tmp_path / "there" / "model.onnx")
    assert info_there == info_here
    assert (tmp_path / "there" / "model.onnx").read_bytes() == (tmp_path / "here" / "model.onnx").read_bytes()
    assert "EDGE_EXPORT_RESULT=" in (tmp_path / "there" / "worker.log").read_text()


def test_a_failing_worker_names_the_graph_and_the_tool_error(tmp_path):
    from exporter.backends import quantize as q
    from exporter.errors import EdgeExportError

    bad = tmp_path / "model.onnx"
    bad.write_bytes(b"\x08\x07not a protobuf graph")
    (tmp_path / "out").mkdir()
    with pytest.raises(EdgeExportError) as e:
        q.in_worker("dynamic_int8", bad, tmp_path / "out" / "model.onnx")
    msg = str(e.value)
    assert str(bad) in msg and "worker process (exit 1)" in msg
    assert not (tmp_path / "out" / "model.onnx").exists()
    with pytest.raises(ValueError):
        q.in_worker("static_w8a16", bad, tmp_path / "out" / "model.onnx")


def _lm_like_graph(path, op="MatMul"):
    """MatMul (or Gemm) -> Add -> Reshape -> Softmax with no value_info: ORT's shape-inferring reload has work to do."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((16, 32)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(32).astype(np.float32), "b")
    shape = numpy_helper.from_array(np.array([1, 4, 8], np.int64), "shape")
    first = helper.make_node(op, ["x", "w"], ["h"]) if op == "MatMul" else helper.make_node("Gemm", ["x", "w"], ["h"])
    g = helper.make_graph([first, helper.make_node("Add", ["h", "b"], ["a"]), helper.make_node("Reshape", ["a", "shape"], ["r"]),
                           helper.make_node("Softmax", ["r"], ["y"], axis=-1)], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8])], [w, b, shape])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    onnx.save(m, str(path), save_as_external_data=True, all_tensors_to_one_file=True, location=path.name + ".data", size_threshold=0)


@pytest.mark.parametrize("op", ["MatMul", "Gemm"])
def test_dynamic_int8_without_the_deepcopy_writes_the_same_bytes(tmp_path, monkeypatch, op):
    """ORT's dynamic quantizer holds the model it loaded while it deep-copies, saves and reloads it (three copies of
    the weights); we reload once, early, without the deepcopy. Same bytes as the tool's own path; with a Gemm (which
    the quantizer rewrites before its reload) the tool's reload runs."""
    from onnxruntime.quantization import onnx_quantizer

    from exporter.backends import quantize as q

    src = tmp_path / "model.onnx"
    _lm_like_graph(src, op)
    (tmp_path / "ort").mkdir()
    (tmp_path / "ours").mkdir()
    q.dynamic_int8(src, tmp_path / "ort" / "model.onnx", reload=True)
    calls = []
    tool_reload = onnx_quantizer.save_and_reload_model_with_shape_infer

    def spy(model):
        calls.append(1)
        return tool_reload(model)

    monkeypatch.setattr(onnx_quantizer, "save_and_reload_model_with_shape_infer", spy)
    q.dynamic_int8(src, tmp_path / "ours" / "model.onnx")
    assert (tmp_path / "ours" / "model.onnx").read_bytes() == (tmp_path / "ort" / "model.onnx").read_bytes()
    assert calls == ([1] if op == "Gemm" else [])  # ours is what ran, not the tool's deepcopy
    assert onnx_quantizer.save_and_reload_model_with_shape_infer is spy  # and the tool's function is back afterwards


def test_dynamic_int8_past_the_inline_limit_writes_external_data_that_loads_the_same(tmp_path, monkeypatch):
    """A float graph over the inline limit (1.8 GiB: what dynamic int8 leaves float, an embedding's Gather, could pass
    protobuf's 2 GiB) gets its int8 weights as external data: same outputs as the inline graph, and the bundle copy
    takes the data file with it."""
    import onnxruntime as ort

    from exporter.backends import quantize as q
    from exporter.backends.onnx_stages import bundle_files

    import onnx
    from onnx import TensorProto, helper, numpy_helper

    src = tmp_path / "model.onnx"  # weights past the 1 KiB that ONNX keeps inline even in an external-data model
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((16, 128)).astype(np.float32), "w")
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 128])], [w])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]), str(src))
    for name, limit in (("inline", q.INLINE_LIMIT_BYTES), ("external", 0)):
        monkeypatch.setattr(q, "INLINE_LIMIT_BYTES", limit)
        (tmp_path / name).mkdir()
        q.dynamic_int8(src, tmp_path / name / "model.onnx")
    assert not (tmp_path / "inline" / "model.onnx.data").exists() and (tmp_path / "external" / "model.onnx.data").is_file()
    (tmp_path / "bundle").mkdir()
    entry, files = bundle_files(tmp_path / "external" / "model.onnx", "g", tmp_path / "bundle")
    assert len(files) == 2 and all((tmp_path / "bundle" / f).is_file() for f in files)
    x = {"x": np.random.default_rng(1).standard_normal((1, 16)).astype(np.float32)}
    want = ort.InferenceSession(str(tmp_path / "inline" / "model.onnx")).run(None, x)[0]
    got = ort.InferenceSession(str(tmp_path / "bundle" / entry)).run(None, x)[0]
    assert np.array_equal(want, got)

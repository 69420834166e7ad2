"""End to end: tiny-lm on cpu (fp32, int8) and qcs6490 (w8a16 on the QNN HTP simulator)."""

import json
import subprocess
import sys
from dataclasses import replace

import numpy as np
import pytest

from manifests import manifest as mf

pytestmark = pytest.mark.e2e


def test_every_bundle_is_published_and_passes(built):
    assert set(built) == {("cpu", "fp32"), ("cpu", "int8"), ("qcs6490", "w8a16")}
    for r in built.values():
        assert r.status in ("published", "up-to-date"), r.to_json()
        assert r.parity["verdict"] == "pass"
        data = mf.load(r.bundle)
        assert data["bundle"]["published"] is True
        assert data["checkpoint"]["pinned"] is True


def test_fp32_graphs_reproduce_torch_generate_token_for_token(built):
    stage = built[("cpu", "fp32")].parity["stages"][0]
    assert stage["stage"] == "float-export"
    d = stage["decode"]
    assert d["steps"] >= 32 and d["all_greedy_exact"] and d["token_agreement"] == 1.0
    # prompts span one chunk, several chunks and adversarial ids
    assert {p["prompt_tokens"] for p in d["per_prompt"]} >= {5, 32, 51}


def test_the_greedy_prefix_from_teacher_forcing_is_the_free_running_one(built, dev_keys):
    """verify derives each prompt's greedy prefix from its teacher-forced run (verify.parity.greedy_prefix) instead of
    running the artifact free: on real int8 sessions, against real free-running runs, they agree, also where the
    artifact's greedy run leaves the reference's."""
    from verify import gate, lm_driver
    from verify.parity import greedy_prefix

    def runners_of(r):
        data = mf.load(r.bundle)
        return ({c["name"]: gate.open_session(r.bundle, dev_keys.public, "cpu", c["name"]) for c in data["components"]},
                {c["name"]: lm_driver.GraphSpec.from_manifest_component(c) for c in data["components"]}, data["state_layout"])

    ref, art = runners_of(built[("cpu", "fp32")]), runners_of(built[("cpu", "int8")])
    rng = np.random.default_rng(11)
    prefixes = []
    for n in (3, 9, 17, 33, 40, 47):
        prompt = [int(x) for x in rng.integers(1, 256, n)]
        steps = 200 - n
        ref_tokens, _ = lm_driver.generate(*ref, prompt, steps)
        forced, _ = lm_driver.generate(*art, prompt, steps, forced=ref_tokens)
        free, _ = lm_driver.generate(*art, prompt, steps)
        actual = next((i for i, (x, y) in enumerate(zip(free, ref_tokens)) if x != y), len(ref_tokens))
        assert greedy_prefix(forced, ref_tokens) == actual, (n, forced[:actual + 2], free[:actual + 2], ref_tokens[:actual + 2])
        prefixes.append(actual)
    assert min(prefixes) < 150, prefixes  # the int8 run leaves the float one somewhere: the derivation is exercised


def test_qcs6490_is_measured_on_the_htp_simulator_with_every_node_on_qnn(built):
    r = built[("qcs6490", "w8a16")]
    stages = [s["stage"] for s in r.parity["stages"]]
    assert stages == ["float-export", "fake-quant", "compiled"]
    compiled = r.parity["stages"][-1]
    assert compiled["provider"] == "QNNExecutionProvider"
    data = mf.load(r.bundle)
    assert data["bundle"]["format"] == "qnn-context"
    assert data["target"]["accelerator"]["htp_arch"] == 68
    for c in data["components"]:
        assert set(c["placement"]["by_provider"]) == {"QNNExecutionProvider"}
        assert any(f.endswith("_qnn.bin") for f in c["files"])
    assert data["quantization"]["calibration"]["sha256"] != data["evaluation"]["sha256"]
    assert data["tools"]["onnxruntime-qnn"] == "2.7.0" and data["tools"]["qairt"]


def test_manifest_records_state_layout_tools_and_thresholds(built):
    data = mf.load(built[("cpu", "int8")].bundle)
    layout = data["state_layout"]
    assert layout["kind"] == "kv-cache" and layout["buffers"][0]["shape"] == [1, 2, 256, 16]
    assert data["tools"]["torch"].startswith("2.13.0") and data["tools"]["onnx"] == "1.22.0"
    th = data["parity"]["thresholds"]
    assert th["quantized"]["min_token_agreement"] == 0.9 and th["float-export"]["min_cosine"] == 0.99999


def test_second_run_redoes_nothing(built, out_root):
    from exporter.pipeline import build

    again = build("tiny-lm", "qcs6490", out_root=out_root)[0]
    assert again.status == "up-to-date"
    assert all(again.cache.values()), again.cache


def test_gate_opens_a_session_that_runs_on_qnn(built, dev_keys):
    from verify import gate

    r = built[("qcs6490", "w8a16")]
    sess = gate.open_session(r.bundle, dev_keys.public, target="rb3-gen2", component="decode")
    feeds = {i.name: np.zeros([d for d in i.shape], dtype=np.int32 if "int32" in i.type else np.float32) for i in sess.get_inputs()}
    logits = sess.run(["logits"], feeds)[0]
    assert logits.shape == (1, 1, 512) and np.isfinite(logits).all()


def test_gate_refuses_the_wrong_target(built, dev_keys):
    from verify import gate

    with pytest.raises(gate.TargetMismatch, match="built for target 'qcs6490', not 'cpu-x86-linux'"):
        gate.check_bundle(built[("qcs6490", "w8a16")].bundle, dev_keys.public, target="cpu")


def test_upstream_model_signing_cli_accepts_our_bundles(built, dev_keys):
    exe = (sys.executable.rsplit("/", 1)[0]) + "/model_signing"
    for r in built.values():
        p = subprocess.run([exe, "verify", "key", "--signature", str(r.bundle / "model.sig"), "--public_key", str(dev_keys.public), str(r.bundle)], capture_output=True, text=True)
        assert p.returncode == 0, p.stdout + p.stderr


def test_gate_works_without_torch(built, dev_keys):
    """A runtime host has onnxruntime but no torch: block torch and open the bundle."""
    r = built[("cpu", "fp32")]
    code = (
        "import sys; sys.modules['torch'] = None; sys.modules['transformers'] = None\n"
        "from verify import gate\n"
        f"s = gate.open_session({str(r.bundle)!r}, {str(dev_keys.public)!r}, target='cpu', component='prefill')\n"
        "print(s.get_providers()[0])\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert "CPUExecutionProvider" in p.stdout


def test_parity_failure_publishes_nothing_and_names_the_stage(built, out_root):
    from exporter.pipeline import build_one
    from exporter.targets import get_target
    from recipes.tiny_lm import RECIPE

    strict = RECIPE.thresholds["int8"].replace(min_cosine=0.999999)
    recipe = replace(RECIPE, thresholds={**RECIPE.thresholds, "int8": strict})
    out = out_root / "strict"
    r = build_one(recipe, get_target("cpu"), "int8", out, cache_root=out_root / ".cache")
    assert r.status == "parity-failed"
    f = r.parity["first_failure"]
    assert (f["stage"], f["metric"]) == ("quantized", "cosine") and f["component"] in ("prefill", "decode")
    assert not (out / "tiny-lm" / "cpu-x86-linux" / "int8").exists()
    failed = out / "tiny-lm" / "cpu-x86-linux" / "int8.failed"
    assert (failed / "parity.md").read_text().count("FAIL") >= 1
    assert mf.load(failed)["bundle"]["published"] is False
    assert r.cache["export/prefill"] and r.cache["quantize/decode"], "only verify may rerun"


def test_cli_json_is_clean_and_exit_codes_mean_something(built, out_root):
    exe = sys.executable.rsplit("/", 1)[0] + "/edge-export"
    p = subprocess.run([exe, "recipe", "tiny-lm", "--target", "qcs6490", "--out", str(out_root), "--json"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["results"][0]["status"] == "up-to-date"
    p = subprocess.run([exe, "verify", str(built[("qcs6490", "w8a16")].bundle), "--open", "--json"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["verdict"] == "pass"
    p = subprocess.run([exe, "recipe", "tiny-lm", "--target", "qcs6940"], capture_output=True, text=True)
    assert p.returncode == 2 and "did you mean 'qcs6490'" in p.stderr
    p = subprocess.run([exe, "recipe", "tiny-lm", "--target", "qcs6490", "--precision", "fp32", "--out", str(out_root)], capture_output=True, text=True)
    assert p.returncode == 4 and "precision-unsupported" in p.stderr
    rec = json.loads((out_root / "tiny-lm" / "qcs6490" / "fp32.record.json").read_text())
    assert (rec["status"], rec["code"], rec["precision"]) == ("rejected", "precision-unsupported", "fp32")


def test_a_killed_run_leaves_no_finished_looking_bundle_and_resumes(tmp_path, dev_keys):
    import os
    import signal
    import time

    exe = sys.executable.rsplit("/", 1)[0] + "/edge-export"
    out = tmp_path / "killed"
    args = [exe, "recipe", "tiny-lm", "--target", "cpu", "--precision", "fp32", "--out", str(out), "--json"]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=os.environ.copy())
    deadline = time.time() + 60
    # kill as soon as the first stage has written something to the cache
    while time.time() < deadline and not list((out / ".cache").glob("*/*/*")) and proc.poll() is None:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    bundle = out / "tiny-lm" / "cpu-x86-linux" / "fp32"
    assert not (bundle / "manifest.json").exists()
    p = subprocess.run(args, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["results"][0]["status"] == "published"
    assert mf.load(bundle)["parity"]["verdict"] == "pass"


def test_relative_output_path_as_in_the_readme(tmp_path, out_root, dev_keys):
    """The README runs with the default relative --out; signing and verifying must not depend on cwd."""
    exe = sys.executable.rsplit("/", 1)[0] + "/edge-export"
    args = [exe, "recipe", "tiny-lm", "--target", "cpu", "--precision", "int8", "--out", "rel", "--cache", str(out_root / ".cache")]
    p = subprocess.run(args, capture_output=True, text=True, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    p = subprocess.run([exe, "verify", "rel/tiny-lm/cpu-x86-linux/int8", "--json"], capture_output=True, text=True, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["signature"] == "valid"


def test_manifest_holds_estimated_and_measured_memory(built):
    for key in (("cpu", "int8"), ("qcs6490", "w8a16")):
        mem = mf.load(built[key].bundle)["memory"]
        assert mem["estimate"]["required_bytes"] <= mem["estimate"]["budget_bytes"]
        assert mem["measured"]["session_peak_bytes"] > 0 and mem["measured"]["run_peak_bytes"] >= mem["measured"]["session_peak_bytes"]
        c = mem["comparison"]
        assert c["available"] and c["difference_bytes"] == c["measured_peak_bytes"] - c["estimated_steady_bytes"]


def test_every_outcome_is_recorded(built, out_root):
    from manifests.records import read_records

    recs = {(r["target"], r["precision"]): r for _, r in read_records(out_root, "tiny-lm")}
    assert recs[("qcs6490", "w8a16")]["status"] == "verified"
    assert recs[("cpu-x86-linux", "int8")]["bundle"] == str(built[("cpu", "int8")].bundle)


def test_graph_bytes_do_not_depend_on_where_the_build_ran(built, out_root, tmp_path):
    """Two marks of the build place are kept out of a graph: absolute source paths in torch.onnx's stack traces, and
    the QNN EPContext name ONNX Runtime hashes from the source model's path (plus the QNN backend's per-process
    numbering): a graph compiled from two directories, and after another graph, has the same bytes."""
    import shutil

    import onnx

    from exporter.backends.qnn_stages import compile_one
    from exporter.child import ROOT

    for b in (built[("cpu", "fp32")].bundle, built[("qcs6490", "w8a16")].bundle):
        for g in b.glob("*.onnx"):
            m = onnx.load(str(g), load_external_data=False)
            traces = [p.value for n in m.graph.node for p in n.metadata_props if p.key.endswith("stack_trace")]
            assert all('File "/' not in t and str(ROOT) not in t for t in traces), g
    assert any("exporter/models/" in p.value for g in built[("cpu", "fp32")].bundle.glob("*.onnx")
               for n in onnx.load(str(g), load_external_data=False).graph.node for p in n.metadata_props)
    sources = sorted(out_root.glob(".cache/quantize/*/*/model.onnx"))
    qnn = [s for s in sources if json.loads((s.parent / "_done.json").read_text())["inputs"]["precision"] == "w8a16"][:2]
    assert len(qnn) == 2
    from exporter.targets import get_target

    target = get_target("qcs6490").to_json()
    outs = []
    for i, order in enumerate(([qnn[0]], [qnn[1], qnn[0]])):
        for src in order:
            d = tmp_path / f"copy{i}-{src.parent.name}"
            shutil.copytree(src.parent, d)
            (tmp_path / f"out{i}-{src.parent.name}").mkdir()
            compile_one(d / "model.onnx", tmp_path / f"out{i}-{src.parent.name}", "g", target)
        outs.append(tmp_path / f"out{i}-{qnn[0].parent.name}")
    for name in ("g.onnx", "g_qnn.bin"):
        assert (outs[0] / name).read_bytes() == (outs[1] / name).read_bytes(), name

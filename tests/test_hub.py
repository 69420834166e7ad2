"""AI Hub validation against the replay (jobs run on the local HTP simulator, labelled simulated):
success, compile failure, device-side numerical failure, timeout and resume; the signed record, the
audit and the matrix; the real client's fail-fast paths and its conformance to the qai_hub API."""

import inspect
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from exporter.hub.client import HubJobFailed, HubTimeout, HubUnavailable
from exporter.hub.records import RecordInvalid, load_record, record_path, state_path
from exporter.hub.replay import ReplayHub
from exporter.hub.validate import ValidateOptions, validate

pytestmark = pytest.mark.e2e
EXE = sys.executable.rsplit("/", 1)[0] + "/edge-export"


@pytest.fixture
def bundle(built, tmp_path):
    dst = tmp_path / "tiny-lm" / "qcs6490" / "w8a16"
    shutil.copytree(built[("qcs6490", "w8a16")].bundle, dst)
    return dst


def _opts(dev_keys, tmp_path, **kw):
    return ValidateOptions(public_key=dev_keys.public, private_key=dev_keys.private, samples=3, poll_s=0.05,
                           cache_root=tmp_path / "cache", **kw)


def test_replay_devices_carry_ai_hub_attributes():
    from exporter.hub.replay import registry_devices

    (rb3,) = [d for d in registry_devices() if d.chipset == "qualcomm-qcs6490"]
    assert rb3.name == "Dragonwing RB3 Gen 2 Vision Kit" and rb3.hexagon == "v68" and rb3.soc_model == "35"


def test_validation_on_the_replay_writes_a_signed_simulated_record(bundle, dev_keys, tmp_path):
    hub = ReplayHub(tmp_path / "hub")
    rec = validate(bundle, hub, _opts(dev_keys, tmp_path))
    assert rec["simulated"] is True and rec["source"].startswith("replay")  # never a device result
    assert rec["verdict"] == "pass" and rec["device"]["chipset"] == "qualcomm-qcs6490" and rec["device"]["hexagon"] == "v68"
    assert rec["qairt"]["bundle"] == "2.51.0" and rec["qairt"]["requested"] == "2.51"
    assert "--qairt_version 2.51" in rec["options"]["compile"] and "--compute_unit npu" in rec["options"]["inference"]
    for name in ("prefill", "decode"):
        c = rec["components"][name]
        assert c["samples"] == 3 and c["outputs"]["logits"]["calls"] == 3
        # a real comparison: quantized HTP outputs against torch, under the bundle's compiled-stage thresholds
        assert rec["thresholds"]["min_cosine"] <= c["outputs"]["logits"]["min_cosine"] < 1.0
        assert c["profile"]["compute_units"] == {"QNNExecutionProvider": 1} and "simulated" in c["profile"]["note"]
        assert set(rec["jobs"][name]) == {"model", "compile", "target_model", "inference"}
    assert load_record(bundle, dev_keys.public)["verdict"] == "pass"  # signed, bound to this manifest
    assert not state_path(bundle).exists()
    assert hub.submissions() == {"upload": 2, "compile": 2, "inference": 2}
    assert "api_token" not in record_path(bundle).read_text()


def test_a_record_altered_or_for_another_build_is_refused(bundle, dev_keys, tmp_path):
    validate(bundle, ReplayHub(tmp_path / "hub"), _opts(dev_keys, tmp_path))
    p = record_path(bundle)
    rec = json.loads(p.read_text())
    p.write_text(json.dumps({**rec, "simulated": False}))  # passing a replay off as a device run
    with pytest.raises(RecordInvalid, match="signature does not verify"):
        load_record(bundle, dev_keys.public)
    from exporter.hub.records import sign_record, write_json_atomic

    write_json_atomic(p, sign_record({**rec, "bundle": {**rec["bundle"], "manifest_sha256": "0" * 64}}, dev_keys.private))
    with pytest.raises(RecordInvalid, match="validates another build"):
        load_record(bundle, dev_keys.public)


def test_compile_failure_on_a_device_of_another_hexagon_version_is_recorded(bundle, dev_keys, tmp_path):
    with pytest.raises(HubJobFailed, match="compile job .* failed"):
        validate(bundle, ReplayHub(tmp_path / "hub"), _opts(dev_keys, tmp_path, device="Samsung Galaxy S24 (Family)"))
    rec = load_record(bundle, dev_keys.public)
    assert rec["verdict"] == "fail" and rec["failure"]["stage"] == "compile"
    assert "Hexagon v68" in rec["failure"]["message"] and "v75" in rec["failure"]["message"]


def test_device_side_numerical_failure_fails_the_thresholds(bundle, dev_keys, tmp_path):
    with pytest.raises(HubJobFailed, match="did not validate"):
        validate(bundle, ReplayHub(tmp_path / "hub", perturb=3.0), _opts(dev_keys, tmp_path))
    rec = load_record(bundle, dev_keys.public)
    assert rec["verdict"] == "fail" and rec["failure"] is None
    failed = {(f["output"], f["metric"]) for c in rec["components"].values() for f in c["failures"]}
    assert ("new_key_0", "cosine") in failed or ("new_key_0", "psnr_db") in failed


def test_timeout_keeps_the_job_ids_and_a_rerun_resumes_without_resubmitting(bundle, dev_keys, tmp_path):
    store = tmp_path / "hub"
    t0 = time.monotonic()
    with pytest.raises(HubTimeout, match="rerun the same command to resume"):
        validate(bundle, ReplayHub(store, hang=True), _opts(dev_keys, tmp_path, timeout_s=0.3))
    assert time.monotonic() - t0 < 60  # bounded (the reference run dominates)
    saved = json.loads(state_path(bundle).read_text())
    assert saved["jobs"]["prefill"].keys() == {"model", "compile"}
    before = ReplayHub(store).submissions()
    assert before == {"upload": 1, "compile": 1, "inference": 0}
    rec = validate(bundle, ReplayHub(store), _opts(dev_keys, tmp_path))
    assert rec["resumed"] and rec["verdict"] == "pass"
    assert rec["jobs"]["prefill"]["model"] == saved["jobs"]["prefill"]["model"]
    assert rec["jobs"]["prefill"]["compile"] == saved["jobs"]["prefill"]["compile"]
    assert ReplayHub(store).submissions() == {"upload": 2, "compile": 2, "inference": 2}  # only what was missing


def test_audit_and_matrix_call_a_replayed_record_simulator_only(bundle, dev_keys, tmp_path):
    from manifests.audit import Policy, audit_bundle
    from manifests.records import read_records, write_record
    from verify.matrix import _target_status

    validate(bundle, ReplayHub(tmp_path / "hub"), _opts(dev_keys, tmp_path))
    check = {c.id: c for c in audit_bundle(bundle, dev_keys.public, Policy()).checks}["device-validation"]
    assert check.ok and check.message.startswith("simulator-only: the record is a replay")
    strict = {c.id: c for c in audit_bundle(bundle, dev_keys.public, Policy(require_device_validation=True)).checks}["device-validation"]
    assert not strict.ok and "simulator-only" in strict.message
    root = tmp_path
    write_record(root, "tiny-lm", "qcs6490", "w8a16", "verified", bundle=str(bundle), reason="parity pass, signed")
    cell = _target_status("tiny-lm", "qcs6490", root, dev_keys.public, None, read_records(root))
    assert cell["status"] == "unqualified" and "replayed validation" in cell["validation"]
    assert "not a device run" in cell["detail"]


def test_the_real_client_fails_fast_without_a_token_or_a_network(tmp_path, monkeypatch):
    pytest.importorskip("qai_hub")
    from exporter.hub.qai_hub_client import QaiHubClient

    monkeypatch.delenv("QAI_HUB_API_TOKEN", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("QAIHUB_CLIENT_INI", str(tmp_path / "none.ini"))
    with pytest.raises(HubUnavailable, match="no AI Hub token") as e:
        QaiHubClient()
    assert "qai-hub configure" in e.value.hint
    monkeypatch.setenv("QAI_HUB_API_TOKEN", "not-a-real-token")
    monkeypatch.setenv("QAI_HUB_API_URL", "https://127.0.0.1:9")  # nothing listens there
    client = QaiHubClient()
    t0 = time.monotonic()
    with pytest.raises(HubUnavailable, match="cannot reach AI Hub") as e:
        client.check_reachable(timeout_s=2.0)
    assert time.monotonic() - t0 < 5 and "not-a-real-token" not in e.value.message


def test_the_real_client_uploads_a_graph_with_the_files_it_names(tmp_path, monkeypatch):
    """A graph of a weight-shared group names the group's one binary (named after another graph): that binary travels
    with it, and nothing else beside it does."""
    pytest.importorskip("qai_hub")
    import onnx
    from onnx import TensorProto, helper

    from exporter.hub.qai_hub_client import QaiHubClient

    monkeypatch.setenv("QAI_HUB_API_TOKEN", "not-a-real-token")
    node = helper.make_node("EPContext", ["x"], ["y"], domain="com.microsoft", embed_mode=0, ep_cache_context="prefill_ar8_cl32_qnn.bin")
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid("com.microsoft", 1)]),
              tmp_path / "decode_ar1_cl32.onnx")
    (tmp_path / "prefill_ar8_cl32_qnn.bin").write_bytes(b"shared")
    (tmp_path / "decode_ar1_cl32_old.bin").write_bytes(b"not named by the graph")
    sent = {}

    class Recorder:
        def upload_model(self, model, name):
            sent.update({p.name: p.read_bytes() for p in Path(model).iterdir()}, name=name)
            return type("M", (), {"model_id": "m1"})()

    client = QaiHubClient()
    client._client = Recorder()
    assert client.upload_model(tmp_path / "decode_ar1_cl32.onnx", "decode") == "m1"
    assert set(sent) == {"model.onnx", "prefill_ar8_cl32_qnn.bin", "name"} and sent["prefill_ar8_cl32_qnn.bin"] == b"shared"


def test_the_real_client_calls_qai_hub_as_its_api_defines():
    """The adapter's calls against the installed qai_hub's own signatures (not a patched module)."""
    hub = pytest.importorskip("qai_hub")
    uses = {
        hub.Client.get_devices: {"attributes"},
        hub.Client.upload_model: {"model", "name"},
        hub.Client.get_model: {"model_id"},
        hub.Client.submit_compile_job: {"model", "device", "name", "options"},
        hub.Client.submit_inference_job: {"model", "device", "inputs", "name", "options", "profile"},
        hub.Client.get_job: {"job_id"},
        hub.ClientConfig: {"api_token", "api_url"},
        hub.Device: {"name", "os"},
    }
    for fn, kwargs in uses.items():
        assert kwargs <= set(inspect.signature(fn).parameters), fn
    for cls, attrs in ((hub.InferenceJob, ("download_output_data", "download_profile", "get_status")),
                       (hub.CompileJob, ("get_target_model", "get_status")), (hub.JobStatus, ("success", "failure", "running"))):
        assert all(hasattr(cls, a) for a in attrs), cls


@pytest.mark.skipif(not (os.environ.get("QAI_HUB_API_TOKEN") or os.path.exists(os.path.expanduser("~/.qai_hub/client.ini"))),
                    reason="live AI Hub test: runs only where a token is configured")
def test_live_devices_list_the_rb3_chipset():
    from exporter.hub.qai_hub_client import QaiHubClient

    client = QaiHubClient()
    client.check_reachable(timeout_s=5.0)
    assert any(d.hexagon == "v68" for d in client.devices("qualcomm-qcs6490"))


def test_cli_validate_with_simulate_says_so(bundle, dev_keys):
    p = subprocess.run([EXE, "hub", "validate", str(bundle), "--simulate", "--samples", "2", "--poll", "0.05"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert "SIMULATED" in " ".join(p.stdout.split()) and record_path(bundle).is_file()
    p = subprocess.run([EXE, "hub", "devices", "--simulate", "--chipset", "qualcomm-qcs6490", "--json"], capture_output=True, text=True)
    out = json.loads(p.stdout)
    assert out["simulated"] and [d["hexagon"] for d in out["devices"]] == ["v68"]


def test_bad_validation_inputs_are_named_with_what_to_do(bundle, dev_keys, tmp_path):
    from exporter.errors import IntegrityError, UnknownNameError

    with pytest.raises(UnknownNameError) as e:  # a device name that drifted: the listed names are suggested
        validate(bundle, ReplayHub(tmp_path / "hub"), _opts(dev_keys, tmp_path, device="Dragonwing RB3 Gen 2"))
    assert "Dragonwing RB3 Gen 2 Vision Kit" in str(e.value.message) + str(e.value.hint)
    other = tmp_path / "other"
    from recipes.tiny_lm import RECIPE

    RECIPE.synthesize(other)
    (other / "config.json").write_text((other / "config.json").read_text() + "\n")  # not the checkpoint the bundle names
    with pytest.raises(IntegrityError, match="config.json: SHA-256 .* does not match the pin") as e:  # the bundle's pin holds
        validate(bundle, ReplayHub(tmp_path / "hub2"), _opts(dev_keys, tmp_path, checkpoint=other))
    assert "pinned snapshot" in e.value.hint
    assert not record_path(bundle).exists()  # nothing recorded for a reference that cannot be trusted

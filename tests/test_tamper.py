"""The gate refuses every altered bundle, and says which check failed."""

import json
import shutil

import pytest

from manifests.signing import sign_bundle
from verify import gate

pytestmark = pytest.mark.e2e


@pytest.fixture
def bundle(built, tmp_path):
    dst = tmp_path / "w8a16"
    shutil.copytree(built[("qcs6490", "w8a16")].bundle, dst)
    return dst


def _flip(path, offset=None):
    data = bytearray(path.read_bytes())
    i = len(data) // 2 if offset is None else offset
    data[i] ^= 0x01
    path.write_bytes(bytes(data))


def test_untouched_copy_opens(bundle, dev_keys):
    assert gate.check_bundle(bundle, dev_keys.public, "qcs6490").manifest["parity"]["verdict"] == "pass"


@pytest.mark.parametrize("pattern", ["prefill_ar32_cl256.onnx", "decode_ar1_cl256_qnn.bin", "parity.json", "parity.md", "manifest.json", "model.sig"])
def test_a_flipped_byte_in_any_file_is_refused(bundle, dev_keys, pattern):
    _flip(bundle / pattern)
    with pytest.raises((gate.SignatureError, gate.BundleInvalid)) as e:
        gate.check_bundle(bundle, dev_keys.public, "qcs6490")
    assert str(bundle) in str(e.value)


def test_edited_manifest_is_refused(bundle, dev_keys):
    m = json.loads((bundle / "manifest.json").read_text())
    m["parity"]["thresholds"]["compiled"]["min_cosine"] = 0.5  # loosen a threshold, keep valid JSON
    (bundle / "manifest.json").write_text(json.dumps(m, indent=2, sort_keys=True) + "\n")
    with pytest.raises(gate.SignatureError, match="signature verification failed"):
        gate.check_bundle(bundle, dev_keys.public, "qcs6490")


def test_added_file_is_refused(bundle, dev_keys):
    (bundle / "extra.onnx").write_bytes(b"\x08\x07")
    with pytest.raises(gate.SignatureError, match="extra.onnx"):
        gate.check_bundle(bundle, dev_keys.public, "qcs6490")


def test_removed_file_is_refused(bundle, dev_keys):
    (bundle / "decode_ar1_cl256_qnn.bin").unlink()
    with pytest.raises(gate.SignatureError):
        gate.check_bundle(bundle, dev_keys.public, "qcs6490")


def test_missing_signature_is_refused(bundle, dev_keys):
    (bundle / "model.sig").unlink()
    with pytest.raises(gate.SignatureError, match="unsigned"):
        gate.check_bundle(bundle, dev_keys.public, "qcs6490")


def test_signature_by_another_key_is_refused(bundle, dev_keys, tmp_path, monkeypatch):
    from manifests.signing import dev_key

    monkeypatch.setenv("EDGE_EXPORT_KEY_DIR", str(tmp_path / "other"))
    other = dev_key(notice=lambda m: None)
    sign_bundle(bundle, other.private)  # a valid signature, but not by the trusted key
    gate.check_bundle(bundle, other.public, "qcs6490")  # consistent with its own key...
    with pytest.raises(gate.SignatureError, match="signature verification failed"):
        gate.check_bundle(bundle, dev_keys.public, "qcs6490")  # ...refused under ours


def test_resigned_manifest_that_lies_about_files_is_refused(bundle, dev_keys):
    """Even a holder of the key cannot make the gate load a file the manifest does not describe."""
    m = json.loads((bundle / "manifest.json").read_text())
    m["files"]["parity.md"]["sha256"] = "0" * 64
    (bundle / "manifest.json").write_text(json.dumps(m))
    sign_bundle(bundle, dev_keys.private)
    with pytest.raises(gate.DigestMismatch, match="parity.md"):
        gate.check_bundle(bundle, dev_keys.public, "qcs6490")


def test_resigned_manifest_with_escaping_path_is_refused(bundle, dev_keys):
    m = json.loads((bundle / "manifest.json").read_text())
    m["components"][0]["entry"] = "../../etc/passwd"
    (bundle / "manifest.json").write_text(json.dumps(m))
    sign_bundle(bundle, dev_keys.private)
    with pytest.raises(gate.BundleInvalid):
        gate.check_bundle(bundle, dev_keys.public, "qcs6490")


def test_unverified_bundle_is_refused(bundle, dev_keys):
    m = json.loads((bundle / "manifest.json").read_text())
    m["parity"]["verdict"] = "fail"
    m["bundle"]["published"] = False
    (bundle / "manifest.json").write_text(json.dumps(m))
    sign_bundle(bundle, dev_keys.private)
    with pytest.raises(gate.NotVerified, match="has not passed verification"):
        gate.open_session(bundle, dev_keys.public, "qcs6490", "decode")


def test_gate_compares_the_file_table_with_the_signed_digests(bundle, dev_keys, monkeypatch):
    """The signature check already hashed every file: the table check reuses those digests (one read per byte),
    and still hashes a file itself when the signature's payload names no digest for it."""
    import exporter.hashing

    calls = []
    real = exporter.hashing.sha256_file
    monkeypatch.setattr(exporter.hashing, "sha256_file", lambda p, *a, **k: calls.append(p.name) or real(p, *a, **k))
    gate.check_bundle(bundle, dev_keys.public, "qcs6490")
    assert calls == []
    monkeypatch.setattr(gate, "verify_bundle", lambda b, k: {})  # as if another serialization: no digests
    gate.check_bundle(bundle, dev_keys.public, "qcs6490")
    assert set(calls) == set(json.loads((bundle / "manifest.json").read_text())["files"])

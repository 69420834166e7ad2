"""`edge-export audit`: each injected defect is caught by its own check with a precise message; the
comparison of two builds; the policy file; the core install (no torch, no numpy) is enough."""

import json
import shutil
import subprocess
import sys

import pytest

from manifests.audit import Policy, audit_bundle, declared_pins, load_policy
from manifests.signing import sign_bundle

pytestmark = pytest.mark.e2e
EXE = sys.executable.rsplit("/", 1)[0] + "/edge-export"


@pytest.fixture
def qnn(built, tmp_path):
    dst = tmp_path / "w8a16"
    shutil.copytree(built[("qcs6490", "w8a16")].bundle, dst)
    return dst


def _edit(bundle, keys, manifest=None, parity=None):
    """Rewrite the manifest (and parity.json) as a builder would, keep the file table true, re-sign:
    what is left for the audit is policy, not integrity."""
    from exporter.hashing import sha256_file

    m = json.loads((bundle / "manifest.json").read_text())
    if parity:
        p = json.loads((bundle / "parity.json").read_text())
        parity(p, m)
        (bundle / "parity.json").write_text(json.dumps(p))
        m["files"]["parity.json"] = {"sha256": sha256_file(bundle / "parity.json"), "size": (bundle / "parity.json").stat().st_size}
    if manifest:
        manifest(m)
    (bundle / "manifest.json").write_text(json.dumps(m))
    sign_bundle(bundle, keys.private)


def _failing(audit) -> dict:
    return {c.id: c for c in audit.checks if not c.ok}


def test_fresh_bundles_pass_every_check(built, dev_keys):
    for r in built.values():
        a = audit_bundle(r.bundle, dev_keys.public, Policy())
        assert a.ok, [c.to_json() for c in a.failing()]
        assert [c.id for c in a.checks] == ["manifest", "signature", "files", "references", "pins", "plan", "placement", "parity", "checkpoint",
                                           "device-validation", "host-isa"]


def test_tampered_file_fails_signature_and_files_naming_the_file(qnn, dev_keys):
    binfile = next(qnn.glob("*_qnn.bin"))
    data = bytearray(binfile.read_bytes())
    data[len(data) // 2] ^= 1
    binfile.write_bytes(bytes(data))
    bad = _failing(audit_bundle(qnn, dev_keys.public, Policy()))
    # the signature is checked before the manifest is even parsed (issue #28): nothing else of the bundle is trusted
    assert set(bad) == {"signature", "manifest"} and "not read" in bad["manifest"].message
    assert f"{binfile.name}: content differs" in bad["signature"].message


def test_loosened_threshold_fails_parity_though_signed(qnn, dev_keys):
    def loosen(p, m):
        for s in p["stages"]:
            if s["stage"] == "compiled":
                s["thresholds"]["min_cosine"] = 0.5
        m["parity"]["thresholds"]["compiled"]["min_cosine"] = 0.5

    _edit(qnn, dev_keys, parity=loosen)
    bad = _failing(audit_bundle(qnn, dev_keys.public, Policy()))
    assert set(bad) == {"parity"}, {k: v.message for k, v in bad.items()}
    assert "stage compiled: min_cosine threshold 0.5 is looser than the required 0.99" in bad["parity"].message


def test_verdict_that_its_own_figures_contradict_fails(qnn, dev_keys):
    def worse(p, m):
        p["stages"][-1]["outputs"]["decode"]["logits"]["min_cosine"] = 0.42

    _edit(qnn, dev_keys, parity=worse)
    bad = _failing(audit_bundle(qnn, dev_keys.public, Policy()))
    assert set(bad) == {"parity"} and "stage compiled: decode/logits cosine = 0.42 misses 0.99" in bad["parity"].message


def test_incomplete_placement_fails_naming_the_component(qnn, dev_keys):
    def spill(m):
        m["components"][1]["placement"]["by_provider"] = {"QNNExecutionProvider": 1, "CPUExecutionProvider": 3}

    _edit(qnn, dev_keys, manifest=spill)
    bad = _failing(audit_bundle(qnn, dev_keys.public, Policy()))
    assert set(bad) == {"placement"}
    assert "decode: nodes off QNNExecutionProvider: 3 on CPUExecutionProvider" in bad["placement"].message


def test_version_drift_fails_pins(qnn, dev_keys):
    _edit(qnn, dev_keys, manifest=lambda m: m["tools"].update({"onnxruntime-qnn": "2.6.0"}))
    bad = _failing(audit_bundle(qnn, dev_keys.public, Policy()))
    assert set(bad) == {"pins"}
    assert "onnxruntime-qnn 2.6.0 (pinned 2.7.0)" in bad["pins"].message
    assert declared_pins()["onnxruntime-qnn"] == "2.7.0"  # read from the installed distribution's metadata


def test_plan_mismatch_fails_plan(qnn, dev_keys):
    _edit(qnn, dev_keys, manifest=lambda m: m["bundle"].update({"precision": "w8a8"}))
    bad = _failing(audit_bundle(qnn, dev_keys.public, Policy()))
    # a field stated twice that disagrees is refused when the manifest is read (issue #28), before the plan check
    assert "manifest" in bad and "bundle.precision is 'w8a8' but plan.precision is 'w8a16'" in bad["manifest"].message


def test_unpinned_checkpoint_fails_a_release_audit(tmp_path, dev_keys):
    """A real build from a checkpoint that differs from the pin, allowed with --allow-unpinned."""
    from exporter.pipeline import build
    from recipes.tiny_lm import RECIPE

    ckpt = tmp_path / "ckpt"
    RECIPE.synthesize(ckpt)
    cfg = ckpt / "config.json"
    cfg.write_text(cfg.read_text() + "\n")  # same model, different bytes: the pin no longer matches
    (r,) = build("tiny-lm", "cpu", "fp32", out_root=tmp_path / "out", checkpoint=ckpt, allow_unpinned=True)
    assert r.status == "published"
    bad = _failing(audit_bundle(r.bundle, dev_keys.public, Policy()))
    assert set(bad) == {"checkpoint"} and "did not match its pin (built with --allow-unpinned)" in bad["checkpoint"].message
    assert audit_bundle(r.bundle, dev_keys.public, Policy(require_pinned_checkpoint=False)).ok


def test_policy_file_tightens_and_never_loosens(built, dev_keys, tmp_path):
    b = built[("qcs6490", "w8a16")].bundle
    tight = tmp_path / "tight.toml"
    tight.write_text('name = "strict"\nallow_synthetic_checkpoint = false\n[thresholds.w8a16]\nmin_cosine = 0.9999\n')
    bad = _failing(audit_bundle(b, dev_keys.public, load_policy(tight)))
    assert set(bad) == {"parity", "checkpoint"}
    assert "min_cosine threshold 0.99 is looser than the required 0.9999" in bad["parity"].message
    assert "is synthetic" in bad["checkpoint"].message
    loose = tmp_path / "loose.json"
    loose.write_text(json.dumps({"thresholds": {"w8a16": {"min_cosine": 0.1}}}))
    assert audit_bundle(b, dev_keys.public, load_policy(loose)).ok  # the recipe's 0.99 still applies
    typo = tmp_path / "typo.toml"
    typo.write_text("require_pinned = true\n")
    p = subprocess.run([EXE, "audit", str(b), "--policy", str(typo)], capture_output=True, text=True)
    assert p.returncode == 2 and "unknown keys ['require_pinned']" in " ".join(p.stderr.split())


def test_cli_exit_codes_and_json_name_each_failing_bundle_and_check(built, qnn, dev_keys):
    good = built[("cpu", "fp32")].bundle
    _edit(qnn, dev_keys, manifest=lambda m: m["tools"].update({"onnx": "1.21.0"}))
    p = subprocess.run([EXE, "audit", str(good), "--public-key", str(dev_keys.public)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    p = subprocess.run([EXE, "audit", str(good), str(qnn), "--public-key", str(dev_keys.public), "--json"], capture_output=True, text=True)
    assert p.returncode == 7
    out = json.loads(p.stdout)
    assert out["failing"] == [str(qnn)]
    (bad,) = [b for b in out["bundles"] if not b["ok"]]
    assert [c["id"] for c in bad["checks"] if not c["ok"]] == ["pins"]
    p = subprocess.run([EXE, "audit", str(qnn.parent / "nope")], capture_output=True, text=True)
    assert p.returncode == 2 and "does not exist" in " ".join(p.stderr.split())


def test_against_shows_what_changed_between_two_builds(qnn, built, dev_keys):
    old = built[("qcs6490", "w8a16")].bundle

    def regress(p, m):
        p["stages"][-1]["outputs"]["decode"]["logits"]["min_psnr_db"] -= 1.5
        p["stages"][-1]["decode"]["token_agreement"] = 0.91

    _edit(qnn, dev_keys, parity=regress, manifest=lambda m: m["tools"].update({"transformers": "5.25.0"}))
    p = subprocess.run([EXE, "audit", str(qnn), "--against", str(old), "--json"], capture_output=True, text=True)
    d = json.loads(p.stdout)["compare"]
    assert d["same_cell"]
    assert {"key": "transformers", "old": "5.24.0", "new": "5.25.0"} in d["tools"]
    assert [f["file"] for f in d["files"]] == ["parity.json"]
    worse = {(r["stage"], r["component"], r["output"], r["metric"]): r for r in d["regressions"]}
    assert worse[("compiled", "decode", "logits", "min_psnr_db")]["delta"] == pytest.approx(-1.5)
    assert ("compiled", "decode", "tokens", "token_agreement") in worse
    text = subprocess.run([EXE, "audit", str(qnn), "--against", str(old)], capture_output=True, text=True).stdout
    assert "transformers: 5.24.0 -> 5.25.0" in text and "compiled/decode/logits min_psnr_db" in text and "worse" in text


def test_audit_runs_with_the_core_install_only(built, dev_keys):
    """No torch, numpy or onnxruntime: an auditor's machine."""
    code = (
        "import sys\n"
        "for m in ('torch', 'numpy', 'onnxruntime', 'onnx', 'transformers'): sys.modules[m] = None\n"
        "sys.argv = ['edge-export', 'audit', *sys.argv[1:]]\n"
        "from exporter.cli import main\n"
        "main()\n"
    )
    bundles = [str(r.bundle) for r in built.values()]
    p = subprocess.run([sys.executable, "-c", code, *bundles, "--public-key", str(dev_keys.public)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert f"{len(bundles)} bundle(s) audited" in " ".join(p.stdout.split())

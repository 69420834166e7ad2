"""The 60-cell matrix is rendered from records and bundles on disk, honestly."""

import json
import shutil
import subprocess
import sys

from exporter.pipeline import host_abi
from manifests import manifest
from manifests.records import read_records, write_record
from manifests.signing import sign_bundle
from verify.matrix import _target_status, build_matrix, render_html, render_markdown


def test_sixty_cells_and_a_recorded_rejection(tmp_path):
    m = build_matrix(tmp_path, None)
    assert len(m["cells"]) == 60 and sum(m["counts"].values()) == 60
    # no family has an export path yet: every cell says so, none claims anything else
    assert m["counts"]["missing-prerequisite"] == 60
    assert all(c["performance"] == "not measured" for c in m["cells"])

    p = subprocess.run([sys.executable, "-m", "exporter", "recipe", "qwen3.8-27b", "--target", "galaxy-s25", "--out", str(tmp_path)],
                       capture_output=True, text=True)
    assert p.returncode == 4
    m = build_matrix(tmp_path, None)
    cell = next(c for c in m["cells"] if (c["family"], c["route"]) == ("qwen3.8-27b", "galaxy-s25"))
    assert cell["status"] == "rejected" and cell["records"] == [str(tmp_path / "qwen3.8-27b" / "sm8750" / "w4a16.record.json")]
    assert cell["deployments"][0]["targets"][0]["code"] == "capacity"
    md = render_markdown(m)
    assert "rejected (capacity)" in md and md.count("\n| ") == 6  # header + five family rows
    assert "<table>" in render_html(m)
    p = subprocess.run([sys.executable, "-m", "exporter", "matrix", "--out", str(tmp_path), "--format", "json"], capture_output=True, text=True)
    assert p.returncode == 0 and json.loads(p.stdout)["counts"]["rejected"] == 1


def test_joint_route_is_as_far_as_its_least_advanced_deployment(tmp_path):
    write_record(tmp_path, "spark", "radeon-890m", "fp16", "failed", stage="compile", reason="DmlExecutionProvider rejected node X", fix="rewrite X")
    m = build_matrix(tmp_path, None)
    joint = next(c for c in m["cells"] if (c["family"], c["route"]) == ("spark", "igpu-npu"))
    by_target = {t["target"]: t["status"] for d in joint["deployments"] for t in d["targets"]}
    assert by_target["radeon-890m"] == "attempted-failed" and by_target["ryzen-ai-npu"] == "missing-prerequisite"
    assert joint["status"] == "missing-prerequisite"
    alone = next(c for c in m["cells"] if (c["family"], c["route"]) == ("spark", "radeon-890m"))
    assert alone["status"] == "attempted-failed"
    t = alone["deployments"][0]["targets"][0]
    assert t["stage"] == "compile" and t["next_repair"] == "rewrite X"


def test_bundle_status_is_rechecked_through_the_gate(built, out_root, dev_keys, tmp_path):
    records = read_records(out_root)
    cpu = _target_status("tiny-lm", "cpu-x86-linux", out_root, dev_keys.public, None, records)
    # a verified bundle built from a generated tiny checkpoint does not qualify the family
    assert cpu["status"] == "unqualified" and "synthetic" in cpu["detail"]
    # the same bundle, re-signed as if it held the family's real weights, does (on its own host)
    real = tmp_path / "real" / "bundle"
    shutil.copytree(built[("cpu", "fp32")].bundle, real)
    data = manifest.load(real)
    data["checkpoint"]["synthetic"] = False
    manifest.write(real, data)
    sign_bundle(real, dev_keys.private)
    write_record(tmp_path / "real", "tiny-lm", "cpu-x86-linux", "fp32", "verified", reason="pass", bundle=str(real))
    st = _target_status("tiny-lm", "cpu-x86-linux", tmp_path / "real", dev_keys.public, None, read_records(tmp_path / "real"))
    on_target = host_abi() == ("linux", "linux-x86_64")
    assert st["status"] == ("functionally-qualified" if on_target else "unqualified")
    htp = _target_status("tiny-lm", "qcs6490", out_root, dev_keys.public, None, records)
    assert htp["status"] == "unqualified" and "simulator" in htp["detail"]
    # a bundle altered after signing fails the gate; the matrix says so instead of trusting its record
    bad = tmp_path / "bundle"
    shutil.copytree(built[("cpu", "fp32")].bundle, bad)
    (bad / "parity.md").write_text("edited\n")
    write_record(tmp_path, "tiny-lm", "cpu-x86-linux", "fp32", "verified", reason="pass", bundle=str(bad))
    st = _target_status("tiny-lm", "cpu-x86-linux", tmp_path, dev_keys.public, None, read_records(tmp_path))
    assert st["status"] == "attempted-failed" and st["stage"] == "gate"


def test_unreadable_record_is_reported_not_skipped(tmp_path):
    p = tmp_path / "spark" / "sm8750" / "w8a16.record.json"
    p.parent.mkdir(parents=True)
    p.write_text("{not json")
    st = _target_status("spark", "sm8750", tmp_path, None, "blocked", read_records(tmp_path))
    assert st["status"] == "attempted-failed" and "unreadable record" in st["detail"]

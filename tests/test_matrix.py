"""The 60-cell matrix is rendered from records and bundles on disk, honestly."""

import json
import shutil
import subprocess
import sys

from exporter.hostinfo import host_abi
from manifests import manifest
from manifests.records import read_records, write_record
from manifests.signing import sign_bundle
from verify.matrix import _target_status, build_matrix, render_html, render_markdown


def _cell(m, fam, route):
    return next(c for c in m["cells"] if (c["family"], c["route"]) == (fam, route))


def test_sixty_cells_show_what_the_real_size_plans_know_before_any_record(tmp_path):
    m = build_matrix(tmp_path, None)
    assert len(m["cells"]) == 60 and sum(m["counts"].values()) == 60
    assert all(c["performance"] == "not measured" for c in m["cells"])
    assert all({"plan", "toolchain", "checkpoint", "device"} <= set(c) for c in m["cells"])
    # capacity rejections the plans compute appear with no record on disk, with their figures
    for route in ("qcs6490", "galaxy-s25", "galaxy-s24"):
        c = _cell(m, "qwen3.8-27b", route)
        t = c["deployments"][0]["targets"][0]
        assert c["status"] == "rejected" and t["code"] == "capacity" and t["plan"]["required_bytes"] > t["plan"]["budget_bytes"], route
        assert c["checkpoint"] == "missing" and c["device"] == "none" and c["toolchain"] == "not built"
    mo = _cell(m, "minicpm-o", "qcs6490")["deployments"][0]["targets"][0]
    lang = next(g for g in mo["plan"]["groups"] if g["group"] == "language")
    assert mo["status"] == "rejected" and lang["verdict"] == "rejected" and lang["code"] == "capacity"
    assert {g["group"]: g["verdict"] for g in mo["plan"]["groups"]}["vision"] == "admitted"
    # an admitted cell without a real checkpoint is a missing prerequisite that says which one
    spark = _cell(m, "spark", "galaxy-s25")["deployments"][0]["targets"][0]
    assert spark["status"] == "missing-prerequisite" and spark["plan"]["verdict"] == "admitted" and "no real checkpoint" in spark["detail"]
    assert _cell(m, "internvla-a1", "qcs6490")["deployments"][0]["targets"][0]["detail"].startswith("no export path")
    assert m["counts"]["rejected"] >= 4 and m["counts"]["functionally-qualified"] == 0

    p = subprocess.run([sys.executable, "-m", "exporter", "recipe", "qwen3.8-27b", "--target", "galaxy-s25", "--out", str(tmp_path)],
                       capture_output=True, text=True)
    assert p.returncode == 4
    m = build_matrix(tmp_path, None)
    cell = _cell(m, "qwen3.8-27b", "galaxy-s25")
    assert cell["status"] == "rejected" and str(tmp_path / "qwen3.8-27b" / "sm8750" / "w4a16.record.json") in cell["records"]
    md = render_markdown(m)
    assert "rejected (capacity)" in md and md.count("\n| ") == 6  # header + five family rows
    assert "plan (real size): rejected [capacity]" in md
    page = render_html(m)
    assert "<table>" in page and "#f4c7c3" in page and 'href="#qwen3.8-27b--galaxy-s25"' in page
    assert (tmp_path / "qwen3.8-27b" / "sm8750" / "w4a16.record.json").resolve().as_uri() in page
    p = subprocess.run([sys.executable, "-m", "exporter", "matrix", "--out", str(tmp_path), "--as", "json"], capture_output=True, text=True)
    assert p.returncode == 0 and json.loads(p.stdout)["counts"]["rejected"] == m["counts"]["rejected"]


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

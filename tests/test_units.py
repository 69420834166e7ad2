"""Unit tests: metrics, mask and state semantics of the driver, cache, atomic writes, manifest paths."""

import json
import math

import numpy as np
import pytest

from exporter.atomic import staging_dir
from exporter.cache import StageCache
from manifests import manifest as mf
from recipes.tiny_lm import RECIPE
from verify import lm_driver
from verify.metrics import Accumulator, cosine, max_abs, psnr_db


def test_metrics():
    a = np.array([1.0, 2.0, 3.0])
    assert cosine(a, a) == pytest.approx(1.0)
    assert cosine(a, -a) == pytest.approx(-1.0)
    assert math.isinf(psnr_db(a, a))
    assert psnr_db(a, a + 0.1) == pytest.approx(10 * math.log10(4.0 / 0.01))
    assert max_abs(a, a + np.array([0, 0.5, -2])) == 2.0
    acc = Accumulator()
    acc.add(a, a)
    acc.add(a, a + 1)
    assert acc.to_json()["calls"] == 2 and acc.to_json()["max_abs"] == 1.0


def _graphs():
    return {c["name"]: lm_driver.GraphSpec.from_manifest_component(c) for c in RECIPE.to_json()["components"]}


def test_mask_rows_see_past_and_causal_new_columns():
    g = _graphs()["prefill"]
    m = lm_driver.build_mask(g, n_past=3, hidden=-100.0, visible=0.0)
    base = g.context - g.ar
    assert m.shape == (1, 1, 32, 256)
    assert (m[0, 0, :, :3] == 0).all() and (m[0, 0, :, 3:base] == -100).all()
    assert m[0, 0, 0, base] == 0 and m[0, 0, 0, base + 1] == -100
    assert (m[0, 0, 31, base:] == 0).all()


def test_state_writes_only_valid_rows_and_refuses_overflow():
    g = _graphs()
    st = lm_driver.KVState(RECIPE.state_layout)
    new = {f"new_{r}_{i}": np.ones((1, 2, 32, 16), np.float32) for i in range(2) for r in ("key", "value")}
    st.write(new, 5)
    assert st.n_past == 5
    buf = st.buffers["key_0"]
    assert buf[:, :, :5].sum() == 2 * 5 * 16 and buf[:, :, 5:].sum() == 0
    st.n_past = 250
    with pytest.raises(ValueError, match="context full"):
        lm_driver.step_feeds(g["prefill"], st, [1, 2])
    feeds = lm_driver.step_feeds(g["decode"], st, [7])
    assert feeds["position_ids"].tolist() == [[250]] and feeds["past_key_0"].shape == (1, 2, 255, 16)


def test_padded_prefill_positions_repeat_last_real_position():
    g = _graphs()["prefill"]
    st = lm_driver.KVState(RECIPE.state_layout)
    feeds = lm_driver.step_feeds(g, st, [4, 5, 6])
    assert feeds["position_ids"][0, :4].tolist() == [0, 1, 2, 2]
    assert feeds["input_ids"][0, :4].tolist() == [4, 5, 6, 0]


def test_cache_hit_miss_and_corrupted_entry_is_rebuilt(tmp_path):
    cache = StageCache(tmp_path)
    calls = []

    def build(d):
        calls.append(1)
        (d / "x.bin").write_bytes(b"abc")
        return {"n": len(calls)}

    r1 = cache.run("s", {"a": 1}, build)
    r2 = cache.run("s", {"a": 1}, build)
    assert (r1.hit, r2.hit, len(calls)) == (False, True, 1)
    (r2.path / "x.bin").write_bytes(b"abd")  # corrupt the entry
    r3 = cache.run("s", {"a": 1}, build)
    assert not r3.hit and len(calls) == 2 and (r3.path / "x.bin").read_bytes() == b"abc"
    assert cache.run("s", {"a": 2}, build).hit is False


def test_interrupted_build_leaves_no_entry(tmp_path):
    cache = StageCache(tmp_path)

    def build(d):
        (d / "half.bin").write_bytes(b"x")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        cache.run("s", {"a": 1}, build)
    assert [p for p in (tmp_path / "s").rglob("*") if p.is_file()] == []
    with pytest.raises(RuntimeError):
        with staging_dir(tmp_path / "bundle") as t:
            (t / "f").write_text("x")
            raise RuntimeError("killed")
    assert not (tmp_path / "bundle").exists()
    assert not list(tmp_path.glob(".tmp-bundle-*"))


@pytest.mark.parametrize("bad", ["/etc/passwd", "../x.onnx", "a/../../x", "a\\b"])
def test_manifest_paths_must_stay_inside_the_bundle(tmp_path, bad):
    with pytest.raises(mf.ManifestInvalid, match="leaves the bundle|resolves outside"):
        mf.safe_relpath(tmp_path, bad)


def test_schema_rejects_traversal_in_file_list():
    with pytest.raises(mf.ManifestInvalid):
        mf.validate({"schema_version": mf.SCHEMA_VERSION, "files": {"../evil": {"sha256": "0" * 64, "size": 1}}})
    schema = mf.schema()
    assert schema["properties"]["schema_version"]["const"] == mf.SCHEMA_VERSION
    json.dumps(schema)


def test_every_recipe_threshold_is_a_row_of_the_metric_table():
    from recipes import get_recipe, recipe_names
    from verify.thresholds import METRICS, TABLE

    for name in recipe_names():
        r = get_recipe(name)
        units = [r] + [g for g in (r.group_recipes() if r.group_recipes else {}).values() if g is not None]
        for u in units:
            for precision, th in u.thresholds.items():
                assert set(th.to_json()) <= set(METRICS), (u.name, precision)
    assert all(m.op in (">=", "<=") and m.scope in ("output", "decode") for m in TABLE.values())


def test_a_new_metric_is_one_row_and_is_judged_everywhere(monkeypatch):
    """A metric added to the table (here an output's mean absolute error) is judged by the build's and the audit's
    shared functions without touching them."""
    from verify import thresholds as t

    from manifests.compare import _metrics
    from verify.report import _cases_for_stage, _worst_per_component, render_markdown

    monkeypatch.setitem(t.TABLE, "max_mean_abs", t.Metric("max_mean_abs", "output", "<=", "mean_abs", "mean_abs", "mean abs error",
                                                         lambda m: m.get("mean_abs")))
    monkeypatch.setattr(t, "METRICS", tuple(t.TABLE))
    m = {"calls": 3, "min_cosine": 0.999, "min_psnr_db": 40.0, "max_abs": 0.1, "mean_abs": 0.05}
    assert [c["metric"] for c in t.output_checks(m, {"min_cosine": 0.99, "max_mean_abs": 0.01}) if not c["ok"]] == ["mean_abs"]
    assert t.looser_than({"max_mean_abs": 0.1}, {"max_mean_abs": 0.01}) == [{"metric": "max_mean_abs", "recorded": 0.1, "required": 0.01}]
    # the build's stage judgement, the report's cases, columns and worst-per-component rows, and compare's figures
    th = {"min_cosine": 0.99, "max_mean_abs": 0.01}
    stage = {"stage": "quantized", "provider": "CPUExecutionProvider", "precision": "int8", "verdict": "fail", "thresholds": th,
             "outputs": {"g": {"logits": m, "hidden": {**m, "mean_abs": 0.002}}}, "decode": {"applicable": False, "prompts": 2}}
    assert [(f["output"], f["metric"]) for f in t.stage_failures(stage, th)] == [("logits", "mean_abs")]
    assert {c["name"]: c["ok"] for c in _cases_for_stage(stage, th)} == {
        "g.hidden.min_cosine": True, "g.hidden.mean_abs": True, "g.logits.min_cosine": True, "g.logits.mean_abs": False}
    (row,) = _worst_per_component(stage)
    assert row["mean_abs"] == 0.05 and row["worst_output"]["mean_abs"] == "logits"
    md = render_markdown({"summary": {"bundles": 1, "failing": []}, "policy": {"name": "release", "source": "built-in"}, "bundles": [
        {"cell": None, "bundle": "b", "verdict": "fail", "audit_ok": False, "checks": [], "placement": [],
         "stages": [{**stage, "components": [row], "cases": []}]}]})
    assert "mean abs error (≤ 0.01)" in md and "| 0.050000 ❌ |" in md
    old = {**stage, "outputs": {"g": {"logits": {**m, "mean_abs": 0.04}}}}
    changed = {r["metric"]: r["worse"] for r in _metrics([old], [stage]) if r["output"] == "logits" and r["delta"]}
    assert changed == {"mean_abs": True}

"""spark (Gemma-3-style, ring + full KV, shape buckets) end to end on the tiny twin.

Builds once per session: `tiny-spark` on cpu (fp32, int8) and qcs6490 (w8a16, HTP v68 on the
simulator), and `spark --checkpoint <tiny twin>` on sm8750 (w8a16, HTP v79, weight-shared contexts). Buckets of the
twin: prefill AR-8, decode AR-1, contexts 32/64/128/256 (window 32).
"""

import json
import re
import subprocess
import sys
from dataclasses import replace

import numpy as np
import pytest

from manifests import manifest as mf

pytestmark = pytest.mark.e2e

GRAPH_NAME = re.compile(r"^(embed_ar\d+|head_ar1|(prefill|decode)_ar\d+_cl\d+(_part\d+of\d+)?)$")


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "exporter", *args], capture_output=True, text=True)


@pytest.fixture(scope="session")
def spark_ckpt(tmp_path_factory):
    d = tmp_path_factory.mktemp("ckpt") / "tiny-spark"
    p = _cli("synthesize", "tiny-spark", str(d))
    assert p.returncode == 0, p.stderr
    return d


@pytest.fixture(scope="session")
def spark_root(tmp_path_factory):
    return tmp_path_factory.mktemp("spark-artifacts")


@pytest.fixture(scope="session")
def spark_built(spark_root, spark_ckpt, dev_keys):
    from exporter.pipeline import build

    out = {}
    for target in ("cpu", "qcs6490"):
        for r in build("tiny-spark", target, out_root=spark_root):
            out[(target, r.precision)] = r
    for r in build("spark", "sm8750", out_root=spark_root, checkpoint=spark_ckpt):
        out[("sm8750", r.precision)] = r
    return out


def test_bundles_are_signed_verified_and_named_by_bucket(spark_built):
    assert set(spark_built) == {("cpu", "fp32"), ("cpu", "int8"), ("qcs6490", "w8a16"), ("sm8750", "w8a16"), ("sm8750", "w4a16")}
    for key, r in spark_built.items():
        assert r.status in ("published", "up-to-date") and r.parity["verdict"] == "pass", (key, r.to_json())
        data = mf.load(r.bundle)
        names = [c["name"] for c in data["components"]]
        assert all(GRAPH_NAME.match(n) for n in names), names
        assert {"embed_ar8", "embed_ar1", "head_ar1"} <= set(names)
        for c in (32, 64, 128, 256):
            assert {f"prefill_ar8_cl{c}", f"decode_ar1_cl{c}"} <= set(names), (key, names)
        assert data["state_layout"]["kind"] == "kv-ring+full"
    sm = mf.load(spark_built[("sm8750", "w8a16")].bundle)
    assert sm["bundle"]["recipe"] == "spark" and sm["checkpoint"]["pinned"] and sm["checkpoint"]["synthetic"]
    assert sm["target"]["accelerator"]["htp_arch"] == 79


def test_fp32_greedy_128_tokens_cross_buckets_token_for_token(spark_built):
    d = spark_built[("cpu", "fp32")].parity["stages"][0]["decode"]
    assert d["steps"] >= 128 and d["all_greedy_exact"] and d["token_agreement"] == 1.0
    crossing = [p for p in d["per_prompt"] if p["steps"] >= 128 and len(p["contexts"]) >= 2]
    assert crossing, d["per_prompt"]
    # 128 steps from a short prompt run from the 32-slot bucket through 64 and 128 into 256
    assert any(p["contexts"] == [32, 64, 128, 256] for p in crossing)
    # a prompt longer than the smaller buckets moves up while it is prefilled, in AR-8 chunks
    long = [p for p in d["per_prompt"] if p["prompt_tokens"] > 128]
    assert long and all(p["contexts"] == [32, 64, 128, 256] and p["greedy_exact"] for p in long)


@pytest.mark.parametrize("target", ["qcs6490", "sm8750"])
def test_htp_simulator_decode_crosses_buckets_with_recorded_agreement(spark_built, target):
    r = spark_built[(target, "w8a16")]
    compiled = r.parity["stages"][-1]
    assert compiled["stage"] == "compiled" and compiled["provider"] == "QNNExecutionProvider"
    d = compiled["decode"]
    assert d["steps"] >= 128 and any(len(p["contexts"]) >= 2 for p in d["per_prompt"])
    data = mf.load(r.bundle)
    th = data["parity"]["thresholds"]["compiled"]
    assert d["token_agreement"] >= th["min_token_agreement"]
    stage = next(s for s in data["parity"]["stages"] if s["stage"] == "compiled")
    assert stage["decode"]["token_agreement"] == d["token_agreement"]  # the figure is in the signed manifest
    for c in data["components"]:
        assert set(c["placement"]["by_provider"]) == {"QNNExecutionProvider"}, c["name"]


def test_v79_bundle_ships_weight_shared_contexts_verified_graph_by_graph(spark_built, dev_keys, tmp_path):
    """sm8750 (HTP v79) shares weights: each weight set's graphs ship in one context binary compiled from the same QDQ
    graphs whose per-graph contexts parity was measured on; the gate refuses to open one on the x86 simulator."""
    import shutil

    from manifests.onnx_refs import references
    from verify import gate

    r = spark_built[("sm8750", "w8a16")]
    data = mf.load(r.bundle)
    ws = data["weight_sharing"]
    assert ws["load_verified"] == "device-only" and "simulator" in ws["reason"]
    groups = {tuple(sorted(g["graphs"])): g for g in ws["groups"]}
    stack = tuple(sorted(f"{k}_cl{c}" for k in ("prefill_ar8", "decode_ar1") for c in (32, 64, 128, 256)))
    assert set(groups) == {stack, ("embed_ar1", "embed_ar8", "head_ar1")}
    # one binary per group and no per-graph binary in the bundle
    assert sorted(f for f in data["files"] if f.endswith(".bin")) == sorted(g["binary"] for g in ws["groups"])
    for g in ws["groups"]:
        assert data["files"][g["binary"]]["sha256"] == g["sha256"]
        assert g["size"] < g["per_graph_bytes"]  # identical weights stored once
        for name in g["graphs"]:
            comp = next(c for c in data["components"] if c["graph_name"] == name)
            assert {x.location for x in references((r.bundle / comp["entry"]).read_bytes())} == {g["binary"]}, name
            assert set(g["verified_per_graph"][name]) == {"source_sha256", "context_sha256"}
    compiled = next(s for s in data["parity"]["stages"] if s["stage"] == "compiled")
    assert compiled["verdict"] == "pass" and compiled["provider"] == "QNNExecutionProvider"
    assert "one context per graph" in data["memory"]["measured_on"]

    gate.check_bundle(r.bundle, dev_keys.public, "sm8750")  # intact, signed, verified
    with pytest.raises(gate.SharedContextOnSimulator) as e:
        gate.open_session(r.bundle, dev_keys.public, "sm8750", "decode_ar1_cl32")
    assert "x86 HTP simulator" in e.value.message and "--no-weight-sharing" in e.value.hint
    p = _cli("verify", str(r.bundle), "--open")
    assert p.returncode == 5 and "weight-shared context" in p.stderr, p.stderr

    # a manifest whose shared binary is not the file the list signs is refused before anything opens
    bad = tmp_path / "w8a16"
    shutil.copytree(r.bundle, bad)
    d = json.loads((bad / mf.MANIFEST).read_text())
    d["weight_sharing"]["groups"][0]["sha256"] = "0" * 64
    (bad / mf.MANIFEST).write_text(json.dumps(d))
    with pytest.raises(mf.ManifestInvalid, match="weight-shared context"):
        mf.load(bad)


def test_w4a16_lpbq_on_v79_is_verified_at_every_stage_and_ships_shared(spark_built):
    """spark's language stack at w4a16 (int4 LPBQ MatMul weights, uint16 activations) on sm8750: float export,
    fake-quant and compiled stages pass the recipe's measured thresholds, the HTP runs it as the CPU runs the QDQ graph,
    and the bundle ships weight-shared contexts (v68 keeps refusing w4a16: tests/test_w4a16.py)."""
    r = spark_built[("sm8750", "w4a16")]
    data = mf.load(r.bundle)
    assert data["quantization"]["int4"]["form"] == "lpbq" and data["quantization"]["int4"]["block_size"] == 32
    assert [s["stage"] for s in r.parity["stages"]] == ["float-export", "fake-quant", "compiled"]
    assert all(s["verdict"] == "pass" for s in r.parity["stages"])
    fake, compiled = r.parity["stages"][1]["decode"], r.parity["stages"][2]["decode"]
    assert abs(compiled["logits_vs_hf"]["min_cosine"] - fake["logits_vs_hf"]["min_cosine"]) < 5e-3
    assert len(data["weight_sharing"]["groups"]) == 2
    assert all(g["size"] < g["per_graph_bytes"] for g in data["weight_sharing"]["groups"])


def test_state_layout_is_complete_for_a_runtime(spark_built):
    layout = mf.load(spark_built[("cpu", "fp32")].bundle)["state_layout"]
    assert layout["layer_types"] == ["sliding_attention"] * 5 + ["full_attention"]
    ring = [b for b in layout["buffers"] if b["kind"] == "ring"]
    full = [b for b in layout["buffers"] if b["kind"] == "full"]
    assert len(ring) == 10 and all(b["shape"] == [1, 1, 32, 16] for b in ring)
    assert len(full) == 2 and all(b["shape_by_context"]["64"] == [1, 1, 64, 16] for b in full)
    assert all(b["transposed"] is False and b["time_axis"] == 2 for b in layout["buffers"])
    for key in ("bucket_selection", "transition", "write", "ring_slot_position", "positions", "padding", "mask", "reset",
                "cancellation", "capacity", "call"):
        assert layout[key], key
    s = layout["sampler"]
    assert set(s["inputs"]) == {"temperature", "top_k", "top_p", "seed"} and set(s["outputs"]) == {"token", "probability"}


def test_manifest_only_driver_matches_transformers_generate(spark_built, spark_ckpt, dev_keys):
    """A runtime's view: gate-opened sessions and the manifest, against transformers' own generate."""
    import torch
    from transformers import Gemma3ForCausalLM

    from verify import gate, split_lm_driver

    bundle = spark_built[("cpu", "fp32")].bundle
    data = mf.load(bundle)
    runners = {c["name"]: gate.open_session(bundle, dev_keys.public, "cpu", c["name"]) for c in data["components"]}
    graphs = {c["name"]: split_lm_driver.GraphSpec.from_manifest_component(c) for c in data["components"]}
    prompt = [int(x) for x in np.random.default_rng(7).integers(1, 512, 20)]
    tokens, _ = split_lm_driver.generate(runners, graphs, data["state_layout"], prompt, 130)

    model = Gemma3ForCausalLM.from_pretrained(spark_ckpt, dtype=torch.float32, attn_implementation="eager", use_safetensors=True).eval()
    ids = torch.tensor([prompt])
    with torch.no_grad():
        ref = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=130, min_new_tokens=130, do_sample=False, pad_token_id=0)
    assert tokens == ref[0, len(prompt):].tolist()


def test_driver_ring_wrap_masks_and_transition():
    from recipes.spark import TINY_CONFIG, state_layout
    from verify.split_lm_driver import RingFullState, masks

    layout = state_layout(TINY_CONFIG)
    st = RingFullState(layout)
    assert st.context == 32
    st.n_past = 37  # 37 tokens written: slots hold positions 32..36 in slots 0..4, 5..31 in slots 5..31
    pos = st.slot_positions()
    assert pos[0] == 32 and pos[4] == 36 and pos[5] == 5 and pos[31] == 31
    st.context = 64
    for b in layout["buffers"]:
        if b["kind"] == "full":
            st.full[b["name"]] = np.arange(64 * 16, dtype=np.float32).reshape(1, 1, 64, 16)
    st.select(1, 1)
    assert st.context == 64  # 37 + 1 <= 64: no move
    m = masks(st, 1, 64, 1)
    visible = m["mask_sliding"][0, 0, 0, :32] == 0.0
    # position 37 sees the 31 previous positions 6..36 in the ring (window 32 counts itself), and itself
    assert sorted(pos[visible].tolist()) == list(range(6, 37)) and m["mask_sliding"][0, 0, 0, 32] == 0.0
    assert (m["mask_global"][0, 0, 0, :37] == 0).all() and (m["mask_global"][0, 0, 0, 37:63] < 0).all() and m["mask_global"][0, 0, 0, 63] == 0
    st.n_past = 60
    st.select(8, 8)  # 60 + 8 > 64: moves to 128 and keeps rows [0, 60)
    assert st.context == 128
    g = next(b["name"] for b in layout["buffers"] if b["kind"] == "full")
    assert st.full[g].shape == (1, 1, 128, 16) and st.full[g][0, 0, 59, 0] == 59 * 16 and not st.full[g][0, 0, 60:].any()
    st.n_past = 255
    with pytest.raises(ValueError, match="largest bucket 256"):
        st.select(8, 8)


def test_sampler_contract():
    from verify.sampler import greedy, sample

    logits = np.array([0.1, 3.0, 2.9, -1.0, 3.0], np.float32)
    assert greedy(logits) == 1  # lowest index on ties
    assert sample(logits, top_k=1, seed=5)[0] == 1
    assert sample(logits, top_p=1e-6, seed=5) == (1, 1.0)
    draws = {sample(logits, top_k=3, seed=s)[0] for s in range(200)}
    assert draws == {1, 2, 4}  # never outside the top 3
    assert sample(logits, temperature=0.7, top_k=4, top_p=0.9, seed=11) == sample(logits, temperature=0.7, top_k=4, top_p=0.9, seed=11)
    tok, p = sample(logits, top_k=2, seed=3)
    assert tok in (1, 4) and abs(p - 0.5) < 1e-9
    with pytest.raises(ValueError):
        sample(logits, temperature=0)


def test_parts_chain_is_verified_through_every_part(tmp_path, dev_keys):
    """A per-graph limit below one stack's weights cuts it into layer ranges; verify runs the whole chain."""
    from exporter.pipeline import build_one
    from exporter.targets import get_target
    from recipes import get_recipe

    cpu = get_target("cpu")
    small = replace(cpu, accelerator=replace(cpu.accelerator, per_graph_limit_bytes=300_000))
    r = build_one(get_recipe("tiny-spark"), small, "fp32", out_root=tmp_path)
    assert r.parity["verdict"] == "pass"
    data = mf.load(r.bundle)
    parts = [c for c in data["components"] if c["name"].startswith("decode_ar1_cl64_part")]
    assert [c["name"] for c in parts] == [f"decode_ar1_cl64_part{k}of3" for k in (1, 2, 3)]
    assert [tuple(c["layers"]) for c in parts] == [(0, 2), (2, 4), (4, 6)]
    d = r.parity["stages"][0]["decode"]
    assert d["all_greedy_exact"] and d["steps"] >= 128
    assert all(v["hidden_out"]["calls"] > 0 for k, v in r.parity["stages"][0]["outputs"].items() if "_part" in k)


def test_checkpoint_is_required_and_checked_against_the_family(tmp_path, spark_ckpt):
    p = _cli("recipe", "spark", "--target", "sm8750", "--out", str(tmp_path))
    err = " ".join(p.stderr.split())
    assert p.returncode == 6 and "pass --checkpoint DIR" in err and "edge-export synthesize tiny-spark" in err
    bad = tmp_path / "bad"
    bad.mkdir()
    cfg = json.loads((spark_ckpt / "config.json").read_text())
    (bad / "config.json").write_text(json.dumps({**cfg, "num_key_value_heads": 2}))
    p = _cli("recipe", "spark", "--target", "sm8750", "--checkpoint", str(bad), "--out", str(tmp_path))
    assert p.returncode == 2 and "num_key_value_heads is 2" in " ".join(p.stderr.split())
    # the synthesised twin is byte-identical to the pin (a second synthesis reproduces it)
    again = tmp_path / "again"
    assert _cli("synthesize", "tiny-spark", str(again)).returncode == 0
    assert (again / "model.safetensors").read_bytes() == (spark_ckpt / "model.safetensors").read_bytes()


def test_matrix_counts_twin_builds_as_toolchain_readiness_not_qualification(spark_built, spark_root, dev_keys):
    """`spark --checkpoint <twin>` (sm8750) and `tiny-spark` (qcs6490) show the toolchain ready for those cells; the cells stay
    missing a real checkpoint: a twin never qualifies a family (issue #27, item 4)."""
    from verify.matrix import build_matrix

    m = build_matrix(spark_root, dev_keys.public)
    for route, target in (("galaxy-s25", "sm8750"), ("qcs6490", "qcs6490")):
        c = next(c for c in m["cells"] if (c["family"], c["route"]) == ("spark", route))
        t = c["deployments"][0]["targets"][0]
        assert t["target"] == target and t["toolchain"]["status"] == "verified"
        assert t["toolchain"]["precision"] in {"sm8750": ("w8a16", "w4a16"), "qcs6490": ("w8a16",)}[target]  # both built on v79
        assert t["checkpoint"] == "missing" and t["device"]["status"] == "none" and t["plan"]["verdict"] == "admitted"
        assert c["status"] == "missing-prerequisite" and "toolchain verified on the tiny twin" in t["detail"]
        assert t["toolchain"]["record"] in c["records"]

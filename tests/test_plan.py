"""Plans: explicit artifacts and memory, or a precise rejection; never a substitution."""

import json
import subprocess
import sys
from dataclasses import replace

import pytest

from exporter.errors import UnknownNameError
from exporter.plan import make_plan
from exporter.targets import GiB, all_targets, get_target
from recipes import FAMILIES, get_recipe, recipe_names
from recipes.base import Bucket
from recipes.cost import GraphCost


@pytest.mark.parametrize("recipe", recipe_names())
def test_every_recipe_on_every_target_plans_or_rejects_precisely(recipe):
    r = get_recipe(recipe)
    for t in all_targets():
        p = make_plan(r, t)
        if p.admitted:
            assert p.artifacts and p.memory["required_bytes"] <= p.memory["budget_bytes"], (recipe, t.name)
            limit = t.accelerator.per_graph_limit_bytes
            assert all(limit is None or a.weight_bytes <= limit for a in p.artifacts), (recipe, t.name)
            assert all(a.precision == p.precision and a.format == p.format for a in p.artifacts)
        else:
            assert p.rejection.code in {"capacity", "precision-unsupported", "precision-undefined", "format-unsupported",
                                        "context-unsupported", "graph-too-large"}
            assert p.rejection.reason and p.rejection.fix


def test_w4a16_on_qcs6490_is_rejected_never_w8a8():
    p = make_plan(get_recipe("tiny-lm"), get_target("qcs6490"), "w4a16")
    assert not p.admitted and p.rejection.code == "precision-unsupported"
    assert p.precision == "w4a16" and not p.artifacts
    assert "no 4-bit weight path" in p.rejection.reason and "no other precision is substituted" in p.rejection.fix


def test_fp16_on_v68_names_the_missing_float_path():
    p = make_plan(get_recipe("spark"), get_target("rb3-gen2"), "fp16")
    assert p.rejection.code == "precision-unsupported" and "no float path" in p.rejection.reason


def test_unknown_precision_is_a_usage_error_with_suggestion():
    with pytest.raises(UnknownNameError) as e:
        make_plan(get_recipe("tiny-lm"), get_target("cpu"), "w8a61")
    assert "w8a16" in e.value.suggestions


def test_context_is_never_shortened():
    spark = get_recipe("spark")
    p = make_plan(spark, get_target("sm8750"), context=8192)
    assert p.rejection.code == "context-unsupported" and "[512, 1024, 2048, 4096]" in p.rejection.reason
    p = make_plan(spark, get_target("sm8750"), context=1024)
    assert p.admitted and {a.context for a in p.artifacts if a.role in ("prefill", "decode")} == {512, 1024}


def test_qwen27b_arithmetic_matches_the_roadmap():
    r = get_recipe("qwen3.8-27b")
    p = make_plan(r, get_target("x-elite"))  # the 32 GiB CRD
    lang = p.memory["nominal_language_weight_bytes"] / GiB
    assert 12.4 < lang < 12.7, lang  # roadmap: "about 12.6 GiB" of nominal four-bit language weights
    assert p.admitted and p.precision == "w4a16" and p.memory["weights_shared_between_graphs"]
    assert p.memory["headroom_bytes"] > 0 and p.memory["safety_margin_bytes"] > 0
    for small in ("galaxy-s25", "galaxy-s24"):
        q = make_plan(r, get_target(small))
        assert q.rejection.code == "capacity" and q.precision == "w4a16", small
    assert make_plan(r, get_target("galaxy-s24").with_ram(12)).rejection.code == "capacity"
    assert make_plan(r, get_target("x-elite").with_ram(16)).rejection.code == "capacity"
    assert make_plan(r, get_target("qcs6490")).rejection.code == "capacity"


def test_sharing_is_counted_once_and_its_load_is_stated_as_verified_on_a_device_only():
    """A v73+ plan ships each weight set's graphs in one shared context: weights counted once, and the plan says where
    its numbers and its shared load are verified (the x86 simulator cannot load a shared context)."""
    p = make_plan(get_recipe("qwen3.8-27b"), get_target("x-elite"))
    m = p.memory
    assert m["weight_sharing"]["used"] and m["weights_shared_between_graphs"]
    assert m["weight_sharing"]["load_verified"] == "device-only" and "simulator" in m["weight_sharing"]["note"]
    assert m["weights_all_graphs_bytes"] > 2 * m["weights_bytes"] and m["required_bytes_if_weights_shared"] is None
    # minicpm-o's language group on sm8750: w8a16 does not fit even shared, w4a16 shared does (issue #31)
    lang = get_recipe("minicpm-o.language")
    w8 = make_plan(lang, get_target("sm8750"), "w8a16")
    assert w8.rejection.code == "capacity" and w8.memory["weights_shared_between_graphs"]
    w4 = make_plan(lang, get_target("sm8750"), "w4a16")
    assert w4.admitted and w4.memory["weights_shared_between_graphs"]
    assert w4.memory["required_bytes"] <= w4.memory["budget_bytes"] < w8.memory["required_bytes"]


def test_a_single_layer_over_the_limit_is_graph_too_large():
    r = get_recipe("tiny-lm")
    huge = GraphCost("decode", "decode", Bucket(1, 256), "w", 0, (3 * 2**30, 10), 0, 64)
    r = replace(r, cost=replace(r.cost, graphs=(huge,)))
    p = make_plan(r, get_target("qcs6490"))
    assert p.rejection.code == "graph-too-large" and "layer 0" in p.rejection.reason


def test_memory_budget_separates_vram_from_shared_ram():
    r = get_recipe("spark")
    gpu = make_plan(r, get_target("nvidia-rtx-wsl"))
    assert gpu.memory["budget_kind"] == "vram" and gpu.memory["budget_bytes"] == 24 * GiB
    assert "host_required_bytes" in gpu.memory
    npu = make_plan(r, get_target("sm8750"))
    assert npu.memory["budget_kind"] == "shared-ram" and npu.memory["budget_bytes"] == (12 - 4) * GiB
    # ring KV of the sliding layers stops growing at the window; full KV grows with context
    s = {int(k): v for k, v in npu.memory["state_bytes_by_context"].items()}
    # the KV crosses the graph boundary as float32 (the QDQ graphs take and return float state)
    per_token_global = 4 * (2 * 1 * 256) * 4  # 4 global layers, K+V of 1 head x 256
    ring = 22 * (2 * 1 * 256) * 512 * 4  # 22 sliding layers hold a 512-slot window whatever the context
    for c in (512, 1024, 2048, 4096):
        assert s[c] == ring + per_token_global * c, c


def test_weight_sharing_is_used_only_where_accelerator_and_recipe_have_it():
    r = get_recipe("spark")
    v68 = make_plan(r, get_target("qcs6490"), context=1024)
    v79 = make_plan(r, get_target("sm8750"), context=1024)
    assert not v68.memory["weight_sharing"]["accelerator"] and "no weight sharing" in v68.memory["weight_sharing"]["note"]
    assert v79.memory["weights_shared_between_graphs"] and not v68.memory["weights_shared_between_graphs"]
    assert v68.memory["weights_bytes"] > 2 * v79.memory["weights_bytes"]
    # a recipe that builds no shared graphs counts weights per graph on v79 too
    lm = make_plan(get_recipe("tiny-lm"), get_target("sm8750"))
    assert not lm.memory["weights_shared_between_graphs"] and "builds no weight-shared graphs" in lm.memory["weight_sharing"]["note"]
    # CPU and GPU sessions hold their own initializers: not shared, and the plan says why
    gpu = make_plan(r, get_target("nvidia-rtx-wsl"))
    assert not gpu.memory["weights_shared_between_graphs"] and "not implemented" in gpu.memory["weight_sharing"]["note"]


def test_no_weight_sharing_is_an_explicit_request_counted_per_graph():
    p = _cli("plan", "spark", "--target", "sm8750", "--no-weight-sharing", "--json")
    plan = json.loads(p.stdout)
    assert plan["requested"]["weight_sharing"] is False and not plan["memory"]["weights_shared_between_graphs"]
    assert "not requested" in plan["memory"]["weight_sharing"]["note"]
    shared = json.loads(_cli("plan", "spark", "--target", "sm8750", "--json").stdout)
    assert "weight_sharing" not in shared["requested"] and shared["memory"]["weights_shared_between_graphs"]
    assert plan["memory"]["weights_bytes"] > 2 * shared["memory"]["weights_bytes"]


def test_families_without_export_path_list_it_as_missing():
    for fam in FAMILIES:
        p = make_plan(get_recipe(fam), get_target("x-elite"))
        if p.admitted:
            assert any(m.name == "recipe export path" for m in p.missing), fam


def _cli(*args, cwd=None):
    p = subprocess.run([sys.executable, "-m", "exporter", *args], capture_output=True, text=True, cwd=cwd)
    p.stderr = " ".join(p.stderr.split())  # rich wraps long lines
    p.stdout = " ".join(p.stdout.split())
    return p


def test_recipe_refuses_before_heavy_work_and_records_the_rejection(tmp_path):
    out = tmp_path / "a"
    p = _cli("recipe", "qwen3.8-27b", "--target", "galaxy-s25", "--out", str(out))
    assert p.returncode == 4 and "capacity" in p.stderr
    rec = json.loads((out / "qwen3.8-27b" / "sm8750" / "w4a16.record.json").read_text())
    assert rec["status"] == "rejected" and rec["code"] == "capacity" and rec["plan"]["memory"]["required_bytes"] > 0
    assert rec["command"].startswith("edge-export recipe qwen3.8-27b")
    assert not (out / ".cache").exists(), "nothing heavy may run before the plan admits"
    # admitted by capacity on the 32 GiB X Elite, a family without an export path is a missing prerequisite
    p = _cli("recipe", "qwen3-tts", "--target", "x-elite", "--out", str(out))
    assert p.returncode == 6 and "recipe export path" in p.stderr
    (path,) = (out / "qwen3-tts" / "x-elite").glob("*.record.json")
    rec = json.loads(path.read_text())
    assert rec["status"] == "missing-prerequisite"
    # a multi-component family records every group: without a snapshot each is a missing prerequisite, and nothing
    # heavy runs
    p = _cli("recipe", "minicpm-o", "--target", "x-elite", "--out", str(out))
    assert p.returncode == 6 and "needs a local snapshot" in p.stdout  # one result line per group: the command's result
    recs = {str(q.relative_to(out)): json.loads(q.read_text()) for q in out.glob("minicpm-o.*/x-elite/*.record.json")}
    assert sorted(recs) == sorted(f"minicpm-o.{g}/x-elite/{p}.record.json" for g, p in (
        ("vision", "w8a16"), ("audio", "w8a16"), ("language", "w4a16"), ("language", "w8a16"), ("speech-decoder", "w8a16"),
        ("flow-vocoder", "w4a16")))
    assert all(r["status"] == "missing-prerequisite" for r in recs.values())
    assert "quantizer" not in recs["minicpm-o.language/x-elite/w4a16.record.json"]["reason"]  # w4a16 has one on HTP v73+
    assert "Token2wav" in recs["minicpm-o.flow-vocoder/x-elite/w4a16.record.json"]["reason"]
    assert not (out / ".cache").exists()


def test_plan_cli_exit_codes_and_json(tmp_path):
    p = _cli("plan", "tiny-lm", "--target", "qcs6490", "--json")
    assert p.returncode == 0, p.stderr
    plan = json.loads(p.stdout)
    assert plan["admitted"] and plan["buildable"] and plan["memory"]["budget_bytes"] == int(4.5 * GiB)
    p = _cli("plan", "tiny-lm", "--target", "qcs6490", "--precision", "w4a16", "--json")
    assert p.returncode == 4 and json.loads(p.stdout)["rejection"]["code"] == "precision-unsupported"
    p = _cli("plan", "spark", "--target", "sm8750")
    assert p.returncode == 6 and "recipe export path" in p.stdout  # the plan (and what it misses) is the result
    p = _cli("plan", "spark", "--target", "sm8750", "--ram", "13")
    assert p.returncode == 2 and "12, 16" in p.stderr


def test_without_sharing_only_the_active_bucket_is_resident():
    """v68 cannot share weights: the plan keeps one bucket's stack graphs loaded and says what a transition loads."""
    p = make_plan(get_recipe("spark"), get_target("qcs6490"))
    assert p.admitted and not p.memory["weights_shared_between_graphs"]
    res = p.memory["residency"]
    assert res["policy"] == "active-bucket" and "release the old bucket's sessions" in res["rule"]
    stack = {}
    for a in p.artifacts:
        if a.role in ("prefill", "decode"):
            stack[a.context] = stack.get(a.context, 0) + a.weight_bytes
    assert sorted(stack) == [512, 1024, 2048, 4096]
    rest = sum(a.weight_bytes for a in p.artifacts if a.role not in ("prefill", "decode"))
    assert p.memory["weights_bytes"] == rest + max(stack.values())
    assert res["transition_load_bytes"] == max(stack.values())
    assert p.memory["weights_all_graphs_bytes"] == rest + sum(stack.values()) > p.memory["weights_bytes"]


def test_minicpm_o_on_qcs6490_admits_the_towers_and_rejects_the_language_model_for_capacity():
    """Component groups are planned alone at the asked precision: never a smaller model, never 4-bit on v68."""
    from exporter.plan import make_group_plans

    r = get_recipe("minicpm-o")
    assert make_plan(r, get_target("qcs6490"), "w4a16").rejection.code == "precision-unsupported"  # no 4-bit weights on v68
    d = make_group_plans(r, get_target("qcs6490"), "w8a16")
    by = {g["group"]: g for g in d["groups"]}
    assert {g for g, x in by.items() if x["admitted"]} == {"vision", "audio", "speech-decoder", "flow-vocoder"}
    lang = by["language"]
    assert lang["rejection"]["code"] == "capacity" and lang["precision"] == "w8a16"
    assert lang["required_bytes"] > lang["budget_bytes"] == 4.5 * GiB
    assert lang["weights_bytes"] > 7 * GiB  # 8B parameters at one byte, before any per-graph copies
    assert "minicpm-o/language w8a16 needs" in lang["rejection"]["reason"]
    tog = d["admitted_together"]
    assert tog["fits"] and tog["required_bytes"] < tog["budget_bytes"]
    assert "language" not in tog["groups"]


def test_minicpm_o_language_at_four_bits_fits_x_elite_and_sm8750_with_weight_sharing():
    from exporter.plan import make_group_plans

    r = get_recipe("minicpm-o")
    for t in ("x-elite", "sm8750"):
        lang = {g["group"]: g for g in make_group_plans(r, get_target(t), "w4a16")["groups"]}["language"]
        assert lang["admitted"], (t, lang["rejection"])
        assert lang["weights_shared_between_graphs"], t


def test_plan_cli_shows_the_groups_with_their_arithmetic():
    exe = sys.executable.rsplit("/", 1)[0] + "/edge-export"
    p = subprocess.run([exe, "plan", "minicpm-o", "-t", "qcs6490", "-p", "w8a16", "--json"], capture_output=True, text=True)
    out = json.loads(p.stdout)
    assert p.returncode == 4 and out["rejection"]["code"] == "capacity"  # the whole recipe does not fit
    assert [g["group"] for g in out["groups"]] == ["vision", "audio", "language", "speech-decoder", "flow-vocoder"]
    p = subprocess.run([exe, "plan", "minicpm-o", "-t", "qcs6490", "-p", "w8a16"], capture_output=True, text=True)
    text = " ".join(p.stdout.split())  # the plan is the command's result: stdout
    assert "rejected [capacity]" in text and "admitted groups together (vision, audio, speech-decoder, flow-vocoder)" in text

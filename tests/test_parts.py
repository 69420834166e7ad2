"""Loading by parts (issue #30): a model whose tensors stay in the checkpoint until a part asks for them. The streamed
model computes exactly what `from_pretrained` computes, holds one block at a time, refuses a damaged checkpoint by
tensor name, and an export by parts holds one graph's tensors at a time and writes the same graphs."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from exporter.errors import IntegrityError

ARCH = {"tiny-lm": "Qwen3ForCausalLM", "tiny-spark": "Gemma3ForCausalLM"}


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory):
    import subprocess
    import sys

    out = {}
    for name in ARCH:
        d = tmp_path_factory.mktemp(name)
        subprocess.run([sys.executable, "-m", "exporter", "synthesize", name, str(d / "ckpt")], check=True, capture_output=True)
        out[name] = d / "ckpt"
    return out


@pytest.mark.parametrize("name", sorted(ARCH))
def test_streamed_model_computes_what_from_pretrained_computes_one_block_at_a_time(ckpts, name):
    from exporter.backends.onnx_export import load_hf_model
    from exporter.models.streamed import StreamedModel

    whole = load_hf_model(ckpts[name], ARCH[name])
    s = StreamedModel(ckpts[name], ARCH[name])
    assert s.stats.tensors == 0 and all(p.is_meta for p in s.model.parameters())
    ids = torch.tensor([[1, 5, 9, 200, 17, 3, 8, 11]])
    kw = dict(max_new_tokens=10, min_new_tokens=10, do_sample=False, pad_token_id=0, attention_mask=torch.ones_like(ids))
    with torch.no_grad():
        want_logits, want_tokens = whole(ids).logits, whole.generate(ids, **kw)
        with s.stream() as m:
            logits = m(ids).logits
            tokens = m.generate(ids, **kw)
    assert torch.equal(logits, want_logits) and torch.equal(tokens, want_tokens)  # bit-identical
    biggest = max(s.part_bytes(names) for _, names in s.blocks())
    total = s.part_bytes(list(s._key_of))
    assert s.stats.peak_bytes == biggest < total / 2  # one block at a time: never two, never the whole model
    assert s.stats.tensors == 0 and s.stats.bytes == 0  # everything dropped again
    m = s.hold_all()
    with torch.no_grad():
        assert torch.equal(m(ids).logits, want_logits)
    assert s.stats.bytes == total


def _rewrite(src: Path, dst: Path, edit) -> None:
    from safetensors.torch import load_file, save_file

    dst.mkdir()
    (dst / "config.json").write_text((src / "config.json").read_text())
    tensors = load_file(str(src / "model.safetensors"))
    edit(tensors)
    save_file(tensors, str(dst / "model.safetensors"))


def test_a_damaged_checkpoint_is_refused_by_tensor_name(ckpts, tmp_path):
    from exporter.models.streamed import StreamedModel

    src = ckpts["tiny-lm"]
    layer = "model.layers.1.mlp.down_proj.weight"

    def nan(t):
        t[layer] = t[layer].clone()
        t[layer][0, 0] = float("nan")

    cases = {
        "missing": (lambda t: t.pop(layer), ["missing", layer]),
        "unexpected": (lambda t: t.update({"model.layers.1.extra.weight": torch.zeros(2)}), ["unexpected", "model.layers.1.extra.weight"]),
        "reshaped": (lambda t: t.update({layer: t[layer][:, :-1].contiguous()}), ["mismatched", layer]),
    }
    for label, (edit, words) in cases.items():
        _rewrite(src, tmp_path / label, edit)
        with pytest.raises(IntegrityError) as e:
            StreamedModel(tmp_path / label, ARCH["tiny-lm"])
        assert all(w in e.value.message for w in words), (label, e.value.message)
    _rewrite(src, tmp_path / "nan", nan)
    s = StreamedModel(tmp_path / "nan", ARCH["tiny-lm"])  # the layout is right: the value is refused when it is read
    with s.holding(s.names_under("model.layers.0.")):
        pass
    with pytest.raises(IntegrityError) as e:
        s.acquire(s.names_under("model.layers.1."))
    assert "non-finite" in e.value.message and layer in e.value.message


def test_an_export_by_parts_holds_one_graph_at_a_time_and_writes_the_same_graphs(tmp_path, monkeypatch):
    """tiny-spark cut into layer-range parts (a per-graph limit below one stack): exporting every graph holds at most
    the largest graph's tensors, never reads the whole model, and writes the graphs an export over the whole loaded
    model writes, byte for byte."""
    from exporter import forked
    from exporter.backends import onnx_stages
    from exporter.pipeline import prepare
    from exporter.plan import make_plan
    from exporter.targets import get_target
    from recipes import get_recipe

    monkeypatch.setenv(forked.WORKERS_ENV, "1")  # in this process, where the counts are
    recipe, cpu = get_recipe("tiny-spark"), get_target("cpu")
    small = replace(cpu, accelerator=replace(cpu.accelerator, per_graph_limit_bytes=300_000))
    plan = make_plan(recipe, small, "fp32", 32, None, None)
    build = prepare(recipe, small, plan, tmp_path / "parts" / ".cache")
    assert any(c.layers and c.layers != (0, recipe.model_config["num_hidden_layers"]) for c in build.components)
    paths = onnx_stages.export(build.backend, build)
    s = build.adapter.streamed()
    assert build.adapter._model is None  # the whole model was never loaded
    from exporter.models import step_module

    per_graph = {c.name: build.adapter.graph_bytes(c) for c in build.components}
    total = s.part_bytes(list(s._key_of))
    assert s.stats.peak_bytes == max(per_graph.values()) < total
    assert s.stats.tensors == 0
    reads = s.stats.reads

    whole = prepare(recipe, small, plan, tmp_path / "whole" / ".cache")
    whole.adapter.model()  # the whole model first: every graph is exported over it
    want = onnx_stages.export(whole.backend, whole)
    for name, path in paths.items():
        for f in sorted(path.parent.iterdir()):
            if f.name != "_done.json":
                assert f.read_bytes() == (want[name].parent / f.name).read_bytes(), (name, f.name)
    assert reads == sum(len({s._key_of[n] for n in s.names_used_by(step_module(s.model, recipe.architecture, c))}) for c in build.components)
    assert json.loads((paths[build.components[0].name].parent / "_done.json").read_text())


def _cli(*args, env=None):
    import os
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "exporter", *map(str, args)], capture_output=True, text=True, env={**os.environ, **(env or {})})


def test_a_build_by_parts_resumes_where_it_was_killed_and_verifies_as_the_whole_build(tmp_path):
    """tiny-spark on the CPU with a --max-memory that admits two layers per part: the plan cuts the stack into parts
    (the CPU target sets no per-graph limit), a build killed after its first graphs resumes from the stage cache at the
    graph where it stopped, and the finished bundle has the whole build's verdict and numbers (within float32 rounding:
    the parts are the same layers in separate graphs), with the reference never holding more than one part's budget."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from exporter import build_memory as bm
    from exporter import forked

    part = 350_000  # float32 bytes per part: two of tiny-spark's decoder layers, or its embedding, or its head
    gib = (bm.WORKING_SET_BYTES + bm.PART_FACTOR * part + 1) / bm.GiB
    common = ["recipe", "tiny-spark", "--target", "cpu", "-p", "fp32", "--context", "32"]
    env = {forked.WORKERS_ENV: "1", "EDGE_EXPORT_KEY_DIR": str(tmp_path / "keys")}  # one process: a kill leaves no orphan

    parts_out = tmp_path / "parts"
    args = [sys.executable, "-m", "exporter", *common, "--max-memory", f"{gib:.9f}", "--out", str(parts_out)]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, **env})
    done = parts_out / ".cache" / "export"
    deadline = time.time() + 300
    while time.time() < deadline and len(list(done.glob("*/*/_done.json"))) < 3 and proc.poll() is None:
        time.sleep(0.1)
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    before = {p.parent.name: p.stat().st_mtime_ns for p in done.glob("*/*/_done.json")}
    assert 3 <= len(before), "the build was killed before it exported three graphs"

    p = _cli(*common, "--max-memory", f"{gib:.9f}", "--out", parts_out, "--json", env=env)
    assert p.returncode == 0, p.stderr[-3000:]
    after = {q.parent.name: q.stat().st_mtime_ns for q in done.glob("*/*/_done.json")}
    assert all(after[k] == v for k, v in before.items())  # the graphs exported before the kill were not exported again
    bundle = parts_out / "tiny-spark" / "cpu-x86-linux" / "fp32"
    m = json.loads((bundle / "manifest.json").read_text())
    names = [c["graph_name"] for c in m["components"]]
    assert len(after) == len(names) > len(before)  # ... and every other graph was, once
    bmem = m["plan"]["build_memory"]
    assert bmem["parts_cut_by"] == "the build budget's part size" and any("_part" in n for n in names)
    assert max(a["weight_bytes"] for a in m["plan"]["artifacts"]) <= part
    held = m["build_memory"]["checkpoint_tensors_held"]
    assert 0 < held["peak_bytes"] <= bmem["budget"]["part_limit_bytes"]  # the torch reference stayed within its budget
    # the budget cannot hold every graph's session at once: the memory probe opened and ran them one at a time, and sums
    probe = m["memory"]["measured"]
    assert probe["method"].startswith("one graph at a time") and set(probe["per_graph"]) == {c["name"] for c in m["components"]}
    assert probe["session_peak_bytes"] == sum(g["session_peak_bytes"] for g in probe["per_graph"].values()) > 0
    assert m["memory"]["comparison"]["available"]

    whole_out = tmp_path / "whole"
    p = _cli(*common, "--out", whole_out, "--json", env=env)
    assert p.returncode == 0, p.stderr[-3000:]
    whole = json.loads((whole_out / "tiny-spark" / "cpu-x86-linux" / "fp32" / "parity.json").read_text())
    whole_probe = json.loads((whole_out / "tiny-spark" / "cpu-x86-linux" / "fp32" / "manifest.json").read_text())["memory"]["measured"]
    assert whole_probe["method"].startswith("VmHWM") and "per_graph" not in whole_probe  # a roomy budget: every graph open at once
    parts = json.loads((bundle / "parity.json").read_text())
    assert whole["verdict"] == parts["verdict"] == "pass"
    for w, q in zip(whole["stages"], parts["stages"]):
        for k in ("token_agreement", "all_greedy_exact", "min_greedy_prefix"):
            assert w["decode"][k] == q["decode"][k], k
        assert abs(w["decode"]["logits_vs_hf"]["min_cosine"] - q["decode"]["logits_vs_hf"]["min_cosine"]) < 1e-6
        assert w["decode"]["logits_vs_hf"]["max_abs"] < 1e-3 and q["decode"]["logits_vs_hf"]["max_abs"] < 1e-3
    p = _cli("verify", bundle, "--open", env=env)  # the gate opens every part
    assert p.returncode == 0, p.stderr[-2000:]


@pytest.fixture(scope="module")
def tiny_spark_parts(tmp_path_factory):
    """tiny-spark fp32 planned with a budget that cuts its stack into parts, exported once in this process:
    (recipe, build, graph paths, manifest components)."""
    with pytest.MonkeyPatch.context() as mp:
        yield _tiny_spark_parts_exported(tmp_path_factory.mktemp("spark-parts"), mp)


def _tiny_spark_parts_exported(tmp_path, monkeypatch):
    from exporter import build_memory as bm
    from exporter import forked
    from exporter.backends import onnx_stages
    from exporter.pipeline import prepare
    from exporter.plan import make_plan
    from exporter.targets import get_target
    from recipes import get_recipe

    monkeypatch.setenv(forked.WORKERS_ENV, "1")
    recipe, cpu = get_recipe("tiny-spark"), get_target("cpu")
    plan = make_plan(recipe, cpu, "fp32", None, None, None, budget=bm.BuildBudget(bm.WORKING_SET_BYTES + int(bm.PART_FACTOR * 350_000) + 1, "t"))
    build = prepare(recipe, cpu, plan, tmp_path / ".cache")
    paths = onnx_stages.export(build.backend, build)
    comps = build.manifest_components()
    return recipe, build, paths, comps


def test_bounded_sessions_compute_what_open_sessions_compute_within_their_budget(tiny_spark_parts):
    """Verify and calibration open a stage's graphs through `open_graphs(budget_bytes=...)`: below the graphs' total,
    sessions open on first use and the least recently used close; a generation through them gives the same tokens and
    logits as one through sessions all open at once, and never holds more graph bytes than the budget. Teacher-forced
    runs one graph level at a time (what verify does with bounded sessions) give exactly what token-by-token runs give,
    call for call, across parts and context buckets, opening each session once per level."""
    import numpy as np

    from exporter.loaders import BoundedRunners, graph_bytes_on_disk, open_graphs
    from verify import split_lm_driver as drv

    recipe, build, paths, comps = tiny_spark_parts
    sizes = sorted(graph_bytes_on_disk(p) for p in paths.values())
    budget = sizes[-1] + sizes[-2]  # two of the largest graphs at a time: far below the stage's total
    assert budget < sum(sizes)
    eager, pl_eager = open_graphs(paths, comps, build.cpu_target())
    bounded, pl_bounded = open_graphs(paths, comps, build.cpu_target(), budget_bytes=budget)
    assert isinstance(bounded, BoundedRunners) and pl_bounded == pl_eager
    graphs = {c["name"]: drv.GraphSpec.from_manifest_component(c) for c in comps}
    assert len({g.context for g in graphs.values() if g.role == "decode"}) >= 3 and max(g.part[1] for g in graphs.values()) == 3
    prompt = [5, 9, 200, 17, 3, 8, 11, 4, 2, 7, 99]
    want = drv.generate(eager, graphs, recipe.state_layout, prompt, 6)
    got = drv.generate(bounded, graphs, recipe.state_layout, prompt, 6)
    assert want[0] == got[0] and all(np.array_equal(a, b) for a, b in zip(want[1], got[1]))
    assert bounded.peak_open_bytes <= budget and bounded.opens > len(paths)  # sessions were closed and opened again

    rng = np.random.default_rng(3)
    prompts = [[int(t) for t in rng.integers(0, 512, n)] for n in (5, 8, 45)]  # 45 + 30 steps moves from bucket 32 to 128
    forced = [[int(t) for t in rng.integers(0, 512, 30)] for _ in prompts]
    seen_want, seen_got = [], []

    def keep(seen, run):
        return lambda step: seen.append(((run, step.component, step.n_past), {k: v.copy() for k, v in step.outputs.items()}))

    want = [drv.generate(eager, graphs, recipe.state_layout, p, 30, forced=f, on_step=keep(seen_want, i))
            for i, (p, f) in enumerate(zip(prompts, forced))]
    opens = bounded.opens
    got = drv.teacher_forced_by_parts(bounded, graphs, recipe.state_layout,
                                      [drv.ForcedRun(p, f, 30, on_step=keep(seen_got, i)) for i, (p, f) in enumerate(zip(prompts, forced))])
    for (wt, wl), (gt, gl) in zip(want, got):
        assert wt == gt and len(wl) == len(gl) == 30 and all(np.array_equal(a, b) for a, b in zip(wl, gl))
    assert sorted(k for k, _ in seen_want) == sorted(k for k, _ in seen_got)  # the same calls ...
    by = dict(seen_want)
    assert all(all(np.array_equal(by[k][n], v) for n, v in out.items()) for k, out in seen_got)  # ... with the same outputs
    by_parts = bounded.opens - opens
    # one session at a time: every graph the runs use opens exactly once (a level's prefill and decode graphs and its
    # buckets do not alternate per run), with the same results
    one = BoundedRunners(paths, {c["name"]: c for c in comps}, build.cpu_target(), (), budget_bytes=1)
    again = drv.teacher_forced_by_parts(one, graphs, recipe.state_layout, [drv.ForcedRun(p, f, 30) for p, f in zip(prompts, forced)])
    assert all(wt == gt and all(np.array_equal(a, b) for a, b in zip(wl, gl)) for (wt, wl), (gt, gl) in zip(want, again))
    assert one.opens == len({k[1] for k, _ in seen_got}) and one.peak_open_bytes <= sizes[-1]
    for p, f in zip(prompts, forced):
        drv.generate(bounded, graphs, recipe.state_layout, p, 30, forced=f)
    by_token = bounded.opens - opens - by_parts
    assert by_parts * 10 < by_token, (by_parts, by_token)  # a session per level and run, not per token


def test_verify_checks_a_level_of_bounded_sessions_after_closing_them_and_measures_the_same(tiny_spark_parts, tmp_path):
    """With bounded sessions, verify stores each level's calls (here all spilled to disk) and checks them against the
    reference once the level's sessions are closed: no reference call ever runs with a session open, so a part's
    session and its reference tensors are never in memory together, and every figure equals the one measured with
    all sessions open and each call checked as it ran."""
    from exporter.feed_store import FeedRecorder
    from exporter.loaders import graph_bytes_on_disk, open_graphs
    from verify.parity import measure_stage

    recipe, build, paths, comps = tiny_spark_parts
    eager, _ = open_graphs(paths, comps, build.cpu_target())
    bounded, _ = open_graphs(paths, comps, build.cpu_target(), budget_bytes=max(graph_bytes_on_disk(p) for p in paths.values()))
    assert bounded.opens == len(paths) and not bounded._open  # every graph opened once for its placement, none left open
    reference = build.adapter.reference()

    class Watched:
        def __init__(self):
            self.open_at_call = []

        def __getattr__(self, name):
            return getattr(reference, name)

        def call(self, *a):
            self.open_at_call.append(len(bounded._open))
            return reference.call(*a)

    prompts = [list(s) for s in build.adapter.evaluation().sequences][:3]
    th = recipe.thresholds["fp32"]
    want = measure_stage("float-export", "CPUExecutionProvider", "fp32", eager, comps, recipe.state_layout, prompts, reference, th, 12)
    watched = Watched()
    spill = tmp_path / "calls"
    stores = []

    def store(names):
        stores.append(FeedRecorder(names, 0, spill))  # nothing in memory: every call goes through disk
        return stores[-1]

    got = measure_stage("float-export", "CPUExecutionProvider", "fp32", bounded, comps, recipe.state_layout, prompts, watched, th, 12,
                        store=store)
    assert watched.open_at_call and set(watched.open_at_call) == {0}
    assert sum(s.stats()["spilled"] for s in stores) == len(watched.open_at_call)
    assert got.outputs == want.outputs and got.decode == want.decode and got.failures == want.failures
    assert not list(spill.glob(".tmp-*")), "a level's spilled calls outlived its check"


def test_the_budget_cuts_parts_or_names_the_missing_memory():
    """--max-memory: below the working set a usage error; a stack that can be cut is cut to fit it; a graph that cannot
    be cut (tiny-lm's one-graph layout) or a single tensor over the part size leaves the target's plan as it is and
    names `build-memory` as what this host lacks (exit 6, recorded), never a smaller model or part."""
    from exporter import build_memory as bm
    from exporter.errors import UsageError
    from exporter.plan import make_plan
    from exporter.targets import get_target
    from recipes import get_recipe

    cpu = get_target("cpu")
    for bad in (0, -1, float("nan"), 1.0):
        with pytest.raises(UsageError):
            bm.budget_for(bad)
    tight = bm.BuildBudget(bm.WORKING_SET_BYTES + int(bm.PART_FACTOR * 10_000), "test")
    for name, words in (("tiny-lm", "cannot cut"), ("tiny-spark", "alone holds")):
        p = make_plan(get_recipe(name), cpu, "fp32", budget=tight)
        assert p.admitted and not p.buildable, name
        (m,) = [x for x in p.missing if x.name == "build-memory"]
        assert words in m.reason and "--max-memory" in m.fix, m
        assert all(a.parts == 1 for a in p.artifacts)  # the target's plan, uncut
    roomy = bm.budget_for(None)
    for name in ("tiny-lm", "tiny-spark"):
        p = make_plan(get_recipe(name), cpu, "fp32", budget=roomy)
        assert p.admitted and p.build_memory["parts_cut_by"] == "none" and all(a.parts == 1 for a in p.artifacts)
        assert p.build_memory["estimated_peak_bytes"] == bm.estimated_peak(p.build_memory["largest_part_fp32_bytes"])
    out = _cli("plan", "tiny-spark", "--target", "cpu", "-p", "fp32", "--max-memory", "1.6", "--json")
    assert out.returncode == 0 and json.loads(out.stdout)["build_memory"]["budget"]["source"] == "--max-memory 1.6 GiB"
    out = _cli("plan", "tiny-spark", "--target", "cpu", "--max-memory", "0.5")
    assert out.returncode == 2 and "working set" in out.stderr
    out = _cli("plan", "tiny-lm", "--target", "cpu", "-p", "fp32", "--max-memory", f"{tight.bytes / bm.GiB:.9f}", "--json")
    assert out.returncode == 6 and [m["name"] for m in json.loads(out.stdout)["missing_prerequisites"]] == ["build-memory"]


def test_calibration_flows_part_to_part_from_quantized_upstream_graphs(tmp_path, monkeypatch):
    """tiny-spark w8a16 for HTP cut into parts: with `calibration_upstream="quantized"` each graph is calibrated on what
    the quantized graphs before it produce (the embedding, level 0, on nothing upstream: the same graph as with float
    upstream; every later part and the head on different inputs: different scales), the manifest's scheme says which,
    and the quantize cache key names the upstream graphs it was calibrated through (a rerun hits)."""
    from dataclasses import replace as dc_replace

    from exporter import build_memory as bm
    from exporter import forked
    from exporter.backends import onnx_stages
    from exporter.pipeline import prepare
    from exporter.plan import make_plan
    from exporter.targets import get_target
    from recipes import get_recipe

    monkeypatch.setenv(forked.WORKERS_ENV, "1")
    base, htp = get_recipe("tiny-spark"), get_target("qcs6490")
    budget = bm.BuildBudget(bm.WORKING_SET_BYTES + int(bm.PART_FACTOR * 350_000) + 1, "test")
    plan = make_plan(base, htp, "w8a16", 32, budget=budget)
    assert plan.admitted and plan.build_memory["parts_cut_by"] == "the build budget's part size"
    made = {}
    for mode in ("float", "quantized"):
        recipe = dc_replace(base, calibration_upstream=mode)
        build = prepare(recipe, htp, plan, tmp_path / ".cache")
        fp32 = onnx_stages.export(build.backend, build)
        q, scheme, _ = onnx_stages.quantize(build.backend, build, fp32)
        assert scheme["calibration"]["upstream"].startswith(mode)
        made[mode] = (build, q)
    build, fq = made["float"]
    _, qq = made["quantized"]
    levels = onnx_stages._chain_levels(build.components)
    assert max(levels.values()) >= 3  # embedding, at least two parts, head
    for c in build.components:
        same = fq[c.name].read_bytes() == qq[c.name].read_bytes()
        assert same == (levels[c.name] == 0), (c.name, levels[c.name])
    build2 = prepare(dc_replace(base, calibration_upstream="quantized"), htp, plan, tmp_path / ".cache")
    again, _, _ = onnx_stages.quantize(build2.backend, build2, onnx_stages.export(build2.backend, build2))
    assert again == qq and all(v for k, v in build2.log.hits.items() if k.startswith("quantize/"))


def test_calibration_feeds_are_copied_spilled_past_the_budget_and_quantize_the_same(tmp_path, monkeypatch):
    """The split driver updates its KV ring in place after a call: a recorded feed is a copy. Past the budget's share
    the feeds go to disk in the stage cache and are read back one at a time; the quantized graphs are byte-identical to
    those calibrated on feeds held in memory."""
    from dataclasses import replace as dc_replace

    import numpy as np

    from exporter import build_memory as bm
    from exporter import forked
    from exporter.backends import onnx_stages
    from exporter.feed_store import FeedRecorder
    from exporter.pipeline import prepare
    from exporter.plan import make_plan
    from exporter.targets import get_target
    from recipes import get_recipe

    ring = np.zeros((1, 1, 4, 2), np.float32)
    rec = FeedRecorder(["g"], memory_bytes=ring.nbytes, spill_parent=tmp_path / "spill")
    for i in range(3):
        ring[0, 0, i] = i + 1  # the driver's in-place write after each call
        rec.add("g", {"past": ring})
    got = rec.lists["g"]
    assert rec.stats()["spilled"] == 2 and [float(f["past"].sum()) for f in got] == [2.0, 6.0, 12.0]
    spill = rec.spill_dir
    rec.lists.cleanup()
    assert not spill.exists()

    monkeypatch.setenv(forked.WORKERS_ENV, "1")
    recipe, htp = get_recipe("tiny-spark"), get_target("qcs6490")
    tight = bm.BuildBudget(bm.WORKING_SET_BYTES + int(bm.PART_FACTOR * 350_000) + 1, "test")
    plan = make_plan(recipe, htp, "w8a16", 32, budget=tight)
    spilled = prepare(recipe, htp, plan, tmp_path / "a" / ".cache")
    seen = {}
    real = spilled.adapter.calibration_feeds

    def spy(graphs):
        feeds = real(graphs)
        seen["spilled"] = feeds.recorder.stats()["spilled"]
        seen["dir"] = feeds.recorder.spill_dir
        return feeds

    monkeypatch.setattr(spilled.adapter, "calibration_feeds", spy)
    a, _, _ = onnx_stages.quantize(spilled.backend, spilled, onnx_stages.export(spilled.backend, spilled))
    assert seen["spilled"] > 0 and not seen["dir"].exists()  # spilled, then removed once quantized
    roomy = dc_replace(plan, build_memory={**plan.build_memory, "budget": bm.BuildBudget(1 << 50, "test").to_json()})
    held = prepare(recipe, htp, roomy, tmp_path / "b" / ".cache")
    b, _, _ = onnx_stages.quantize(held.backend, held, onnx_stages.export(held.backend, held))
    assert a.keys() == b.keys() and all(a[n].read_bytes() == b[n].read_bytes() for n in a)


def test_an_unknown_calibration_upstream_is_a_usage_error_naming_the_recipe(tmp_path):
    """`Recipe.calibration_upstream` is "float" or "quantized"; anything else stops the quantize stage before any work,
    naming the recipe and the values it may take (never a silent fall back to float)."""
    from dataclasses import replace as dc_replace

    from exporter.backends import onnx_stages
    from exporter.errors import UsageError
    from exporter.pipeline import prepare
    from exporter.plan import make_plan
    from exporter.targets import get_target
    from recipes import get_recipe

    recipe, htp = dc_replace(get_recipe("tiny-spark"), calibration_upstream="upstream"), get_target("qcs6490")
    build = prepare(recipe, htp, make_plan(recipe, htp, "w8a16", 32), tmp_path / ".cache")
    with pytest.raises(UsageError) as e:
        onnx_stages.quantize(build.backend, build, {})
    assert "tiny-spark" in e.value.message and "'upstream'" in e.value.message and "'quantized'" in e.value.hint


def test_a_qwen3_checkpoint_builds_as_parts_and_matches_the_whole_graph_build(tmp_path):
    """tiny-lm's own checkpoint (same pin) through `tiny-lm-split`: a --max-memory of one decoder layer per part cuts its
    stack into layer-range parts that tiny-lm's one-graph-per-bucket layout cannot make; the build passes the same fp32
    parity (every greedy token, logits within 1e-3 of transformers) as the whole-graph tiny-lm build, across two context
    buckets, and the gate opens it."""
    from exporter import build_memory as bm
    from exporter import forked

    part = 210_000  # float32 bytes: one of tiny-lm's decoder layers (~197 KB), its embedding or its head (~131 KB)
    gib = (bm.WORKING_SET_BYTES + bm.PART_FACTOR * part + 1) / bm.GiB
    env = {forked.WORKERS_ENV: "1", "EDGE_EXPORT_KEY_DIR": str(tmp_path / "keys")}
    runs = {}
    for name, extra in (("tiny-lm-split", ["--max-memory", f"{gib:.9f}"]), ("tiny-lm", [])):
        p = _cli("recipe", name, "--target", "cpu", "-p", "fp32", *extra, "--out", tmp_path / name, "--json", env=env)
        assert p.returncode == 0, (name, p.stderr[-3000:])
        bundle = tmp_path / name / name / "cpu-x86-linux" / "fp32"
        runs[name] = (bundle, json.loads((bundle / "manifest.json").read_text()), json.loads((bundle / "parity.json").read_text()))
    bundle, m, parity = runs["tiny-lm-split"]
    names = [c["graph_name"] for c in m["components"]]
    assert m["plan"]["build_memory"]["parts_cut_by"] == "the build budget's part size"
    assert {"embed_ar32", "head_ar1"} <= set(names) and sum("_part1of2" in n for n in names) == sum("_part2of2" in n for n in names) >= 4
    assert max(a["weight_bytes"] for a in m["plan"]["artifacts"]) <= part
    assert m["state_layout"]["kind"] == "kv-ring+full"
    whole = runs["tiny-lm"][2]
    assert parity["verdict"] == whole["verdict"] == "pass"
    for q, w in zip(parity["stages"], whole["stages"]):
        assert q["decode"]["token_agreement"] == w["decode"]["token_agreement"] == 1.0
        assert q["decode"]["all_greedy_exact"] and w["decode"]["all_greedy_exact"]
        assert q["decode"]["logits_vs_hf"]["max_abs"] < 1e-3
    p = _cli("verify", bundle, "--open", env=env)
    assert p.returncode == 0, p.stderr[-2000:]


def test_a_budget_of_one_copy_still_exports_each_graph_in_a_child_of_its_own(tmp_path, monkeypatch):
    """Where the build budget admits one export copy at a time (bench/README.md: at 0.5b the build process kept 1.6-2.2 GB
    of export's heap to the end), a by-parts export still forks, one graph per child: the build process reads no
    checkpoint tensor during export, and the graphs are those it exports itself (byte for byte)."""
    from exporter import build_memory as bm
    from exporter import forked
    from exporter.backends import onnx_stages
    from exporter.pipeline import prepare
    from exporter.plan import make_plan
    from exporter.targets import get_target
    from recipes import get_recipe

    recipe, cpu = get_recipe("tiny-spark"), get_target("cpu")
    budget = bm.BuildBudget(bm.WORKING_SET_BYTES + int(bm.PART_FACTOR * 350_000) + 1, "test")
    plan = make_plan(recipe, cpu, "fp32", 32, budget=budget)
    monkeypatch.delenv(forked.WORKERS_ENV, raising=False)
    build = prepare(recipe, cpu, plan, tmp_path / "forked" / ".cache")
    per_job = max(build.adapter.graph_bytes(c) for c in build.components)
    assert forked.workers_for(len(build.components), 2 * per_job, budget.bytes - bm.WORKING_SET_BYTES) == 1
    paths = onnx_stages.export(build.backend, build)
    assert build.adapter.streamed().stats.reads == 0  # every graph was exported in a child
    monkeypatch.setenv(forked.WORKERS_ENV, "1")  # in this process, as before
    here = prepare(recipe, cpu, plan, tmp_path / "here" / ".cache")
    want = onnx_stages.export(here.backend, here)
    assert here.adapter.streamed().stats.reads > 0
    for name, p in paths.items():
        assert p.read_bytes() == want[name].read_bytes(), name

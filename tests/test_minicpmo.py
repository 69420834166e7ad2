"""minicpm-o (MiniCPM-o 4.5) end to end on its tiny twin: upstream tensor names, per-group bundles, the chains.

One session build: ``edge-export recipe minicpm-o --checkpoint <tiny>`` on cpu (fp32, int8) and qcs6490
(w8a16, HTP v68 simulator); the audio group alone on sm8750 (v79) and x-elite (v73); the language group at w4a16 on
sm8750 (int4 LPBQ weights, weight-shared contexts).
"""

import json
import subprocess
import sys

import numpy as np
import pytest

from exporter.errors import IntegrityError

pytestmark = pytest.mark.e2e

GROUPS = ("vision", "audio", "language", "speech-decoder")


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "exporter", *args], capture_output=True, text=True)


@pytest.fixture(scope="session")
def mo_root(tmp_path_factory, tiny_ckpt, key_dir):
    root = tmp_path_factory.mktemp("minicpmo-artifacts")
    for target in ("cpu", "qcs6490"):
        p = _cli("recipe", "minicpm-o", "--target", target, "--checkpoint", str(tiny_ckpt), "--out", str(root), "--json")
        assert p.returncode == 0, p.stderr[-3000:]
    for target in ("sm8750", "x-elite"):
        p = _cli("recipe", "minicpm-o.audio", "--target", target, "--checkpoint", str(tiny_ckpt), "--out", str(root), "--json")
        assert p.returncode == 0, p.stderr[-3000:]
    p = _cli("recipe", "minicpm-o.language", "--target", "sm8750", "-p", "w4a16", "--checkpoint", str(tiny_ckpt), "--out", str(root), "--json")
    assert p.returncode == 0, p.stderr[-3000:]
    return root


def test_tiny_checkpoint_has_the_upstream_names_and_loads_into_transformers_classes(tiny_ckpt):
    from safetensors import safe_open
    from transformers import LlamaForCausalLM, Qwen3ForCausalLM, SiglipVisionModel
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    from exporter.models.minicpmo import UNUSED, load_part

    with safe_open(str(tiny_ckpt / "model.safetensors"), "np") as f:
        names = set(f.keys())
    for name in ("llm.model.layers.0.self_attn.q_norm.weight", "llm.lm_head.weight", "vpm.embeddings.position_embedding.weight",
                 "vpm.encoder.layers.1.mlp.fc2.bias", "resampler.query", "resampler.attn.in_proj_weight", "resampler.kv_proj.weight",
                 "apm.conv2.weight", "apm.layers.0.self_attn.k_proj.weight", "audio_projection_layer.linear1.weight",
                 "tts.model.layers.1.self_attn.o_proj.weight", "tts.emb_code.0.weight", "tts.head_code.0.parametrizations.weight.original1",
                 "tts.projector_semantic.linear2.bias", "tts.emb_text.weight"):
        assert name in names, name
    assert "apm.layers.0.self_attn.k_proj.bias" not in names  # Whisper's key projection has no bias
    # every tensor lands in a module, and every module parameter comes from a tensor (strict both ways)
    parts = {"vision": SiglipVisionModel, "audio": WhisperEncoder, "language": Qwen3ForCausalLM, "speech": LlamaForCausalLM}
    loaded = {p: load_part(tiny_ckpt, p) for p in parts}
    assert isinstance(loaded["vision"].vpm, parts["vision"]) and isinstance(loaded["audio"].apm, parts["audio"])
    assert isinstance(loaded["language"], parts["language"]) and isinstance(loaded["speech"].decoder, parts["speech"])
    with safe_open(str(tiny_ckpt / "model.safetensors"), "np") as f:
        total = sum(int(np.prod(f.get_slice(k).get_shape())) for k in names if not k.startswith(UNUSED))
    n_params = sum(p.numel() for m in loaded.values() for p in m.parameters())
    g = 256  # the weight-norm gains fold into the head: one tensor of shape [num_audio_tokens, 1] has no parameter of its own
    assert n_params == total - g


def _rewrite(src, dst, edit):
    from safetensors.numpy import load_file, save_file

    dst.mkdir()
    tensors = load_file(str(src / "model.safetensors"))
    edit(tensors)
    save_file(tensors, str(dst / "model.safetensors"))
    (dst / "config.json").write_text((src / "config.json").read_text())


def test_a_checkpoint_of_another_layout_is_refused_by_name(tiny_ckpt, tmp_path):
    from exporter.models.minicpmo import check_layout
    from recipes.minicpm_o import TINY_CONFIG

    def drop(t):
        del t["resampler.proj"]

    def rename(t):
        t["resampler.projection"] = t.pop("resampler.proj")

    def reshape(t):
        t["apm.conv1.weight"] = t["apm.conv1.weight"][:, :40]

    for label, edit, words in (("missing", drop, ["1 missing tensors", "resampler.proj"]),
                               ("renamed", rename, ["tensors of no MiniCPM-o part", "resampler.projection"]),
                               ("reshaped", reshape, ["shape mismatches", "apm.conv1.weight", "[32, 40, 3]"])):
        d = tmp_path / label
        _rewrite(tiny_ckpt, d, edit)
        with pytest.raises(IntegrityError) as e:
            check_layout(d, TINY_CONFIG)
        assert all(w in e.value.message for w in words), e.value.message
    # through the CLI: the pin stops it first; with --allow-unpinned the layout check names the tensor (exit 5)
    p = _cli("recipe", "minicpm-o.vision", "--target", "cpu", "--checkpoint", str(tmp_path / "missing"), "--out", str(tmp_path / "o"))
    assert p.returncode == 5 and "does not match the pin" in " ".join(p.stderr.split())
    p = _cli("recipe", "minicpm-o.vision", "--target", "cpu", "-p", "fp32", "--checkpoint", str(tmp_path / "missing"),
             "--out", str(tmp_path / "o"), "--allow-unpinned")
    assert p.returncode == 5 and "resampler.proj" in " ".join(p.stderr.split()), p.stderr[-2000:]
    rec = json.loads((tmp_path / "o" / "minicpm-o.vision" / "cpu-x86-linux" / "fp32.record.json").read_text())
    assert rec["status"] == "failed" and rec["stage"] == "load"  # the loader named the missing tensor


def _manifest(root, group, target, precision):
    return json.loads((root / f"minicpm-o.{group}" / target / precision / "manifest.json").read_text())


def test_every_admissible_group_is_a_signed_verified_bundle_and_the_rest_are_recorded(mo_root, dev_keys):
    from verify import gate

    for target, precisions in (("cpu-x86-linux", ("fp32", "int8")), ("qcs6490", ("w8a16",))):
        for group in GROUPS:
            for p in precisions:
                bundle = mo_root / f"minicpm-o.{group}" / target / p
                opened = gate.check_bundle(bundle, dev_keys.public, target)
                m = opened.manifest
                assert m["parity"]["verdict"] == "pass" and m["checkpoint"]["pinned"] and m["checkpoint"]["synthetic"]
                assert m["recipe"]["family"] == "minicpm-o"
                for c in m["components"]:
                    gate.open_session(bundle, dev_keys.public, target, c["name"])
                    if target == "qcs6490":
                        assert c["placement"]["by_provider"] == {"QNNExecutionProvider": c["placement"]["nodes_total"]}, c["name"]
        rec = json.loads((mo_root / "minicpm-o.flow-vocoder" / target / f"{precisions[0]}.record.json").read_text())
        assert rec["status"] == "missing-prerequisite" and "Token2wav" in rec["reason"]
    for target in ("sm8750", "x-elite"):
        m = gate.check_bundle(mo_root / "minicpm-o.audio" / target / "w8a16", dev_keys.public, target).manifest
        assert m["target"]["accelerator"]["htp_arch"] == {"sm8750": 79, "x-elite": 73}[target]
        assert m["parity"]["stages"][-1]["provider"] == "QNNExecutionProvider"


def test_the_language_group_builds_at_w4a16_on_v79_with_shared_contexts(mo_root, dev_keys):
    """The MiniCPM-o 4.5 language model on sm8750 fits only at w4a16 with weight-shared contexts (the real-size plan);
    on the twin that bundle is verified at every stage on the simulator, signed, and refused by the gate there."""
    from exporter.plan import make_group_plans
    from exporter.targets import get_target
    from recipes import get_recipe
    from verify import gate

    bundle = mo_root / "minicpm-o.language" / "sm8750" / "w4a16"
    m = gate.check_bundle(bundle, dev_keys.public, "sm8750").manifest
    assert m["quantization"]["int4"]["form"] == "lpbq" and m["quantization"]["int4"]["block_size"] == 64
    assert m["quantization"]["int4"]["lpbq"]["weights"] > 1  # every graph's MatMul weights, not the last graph's
    assert [s["stage"] for s in m["parity"]["stages"]] == ["float-export", "fake-quant", "compiled"]
    assert all(s["verdict"] == "pass" for s in m["parity"]["stages"])
    stack = next(g for g in m["weight_sharing"]["groups"] if any(n.startswith("decode_") for n in g["graphs"]))
    assert {n.split("_")[0] for n in stack["graphs"]} == {"prefill", "decode"} and stack["size"] < stack["per_graph_bytes"]
    with pytest.raises(gate.SharedContextOnSimulator):
        gate.open_session(bundle, dev_keys.public, "sm8750", stack["graphs"][0])
    real = {g["group"]: g for g in make_group_plans(get_recipe("minicpm-o"), get_target("sm8750"), "w4a16")["groups"]}["language"]
    assert real["admitted"] and real["weights_shared_between_graphs"]


def test_each_group_has_its_own_specs_state_and_thresholds(mo_root):
    v = _manifest(mo_root, "vision", "qcs6490", "w8a16")
    (c,) = v["components"]
    assert c["graph_name"] == "vision_slice448" and c["inputs"][0]["shape"] == [1, 3, 448, 448] and c["outputs"][0]["shape"] == [1, 64, 128]
    assert v["state_layout"]["kind"] == "stateless" and "(x - 0.5) / 0.5" in v["state_layout"]["preprocessing"]
    a = _manifest(mo_root, "audio", "qcs6490", "w8a16")
    assert a["components"][0]["inputs"][0]["shape"] == [1, 80, 100] and a["components"][0]["outputs"][0]["shape"] == [1, 10, 128]
    assert a["quantization"]["calibration"]["name"].startswith("audio-1s")
    lang = _manifest(mo_root, "language", "qcs6490", "w8a16")
    assert [c["graph_name"] for c in lang["components"]] == ["embed_ar32", "embed_ar1", "prefill_ar32_cl128", "decode_ar1_cl128",
                                                              "prefill_ar32_cl256", "decode_ar1_cl256", "head_ar1"]
    assert lang["state_layout"]["kind"] == "kv-ring+full" and lang["state_layout"]["window"] == 0 and "placeholder" in lang["state_layout"]["inject"]
    sp = _manifest(mo_root, "speech-decoder", "qcs6490", "w8a16")
    assert sp["components"][0]["graph_name"] == "speech_condition_ar16" and "audio_bos" in sp["state_layout"]["condition"]
    assert v["parity"]["thresholds"]["compiled"]["min_token_agreement"] == 0.0  # an encoder has no tokens to judge
    assert lang["parity"]["thresholds"]["compiled"]["min_token_agreement"] == 0.85


def test_language_parity_covers_image_and_audio_prompts_and_is_exact_in_float(mo_root):
    d = json.loads((mo_root / "minicpm-o.language" / "cpu-x86-linux" / "fp32" / "parity.json").read_text())
    (stage,) = d["stages"]
    labels = [p.get("label", "") for p in stage["decode"]["per_prompt"]]
    assert sum(x.startswith("image+text") for x in labels) == 3 and sum(x.startswith("audio+text") for x in labels) == 3
    assert stage["decode"]["all_greedy_exact"] and stage["decode"]["token_agreement"] == 1.0
    contexts = {c for p in stage["decode"]["per_prompt"] for c in p["contexts"]}
    assert contexts == {128, 256}  # the long prompt crosses the bucket transition
    sp = json.loads((mo_root / "minicpm-o.speech-decoder" / "cpu-x86-linux" / "fp32" / "parity.json").read_text())["stages"][0]
    assert sp["outputs"]["speech_condition_ar16"]["condition"]["calls"] == 3 and sp["decode"]["all_greedy_exact"]


def _reference(ckpt, kind, feeds, prefix, suffix, steps):
    """The torch chain: encoder rows, then HF greedy tokens and teacher-forced logits of the language model."""
    import torch

    from exporter.models.minicpmo import load_part
    from verify.reference import LMReference

    enc = load_part(ckpt, kind)
    with torch.no_grad():
        rows = enc(torch.from_numpy(next(iter(feeds.values()))))[0].numpy()
    tokens = prefix + [0] * len(rows) + suffix
    inject = {len(prefix) + i: r for i, r in enumerate(rows)}
    ref = LMReference(load_part(ckpt, "language"), {})
    want = ref.generate(tokens, steps, inject=inject)
    return want, ref.teacher_logits(tokens, want, inject=inject)


@pytest.mark.parametrize("kind", ["vision", "audio"])
def test_image_and_audio_prompts_through_the_exported_chain(mo_root, tiny_ckpt, dev_keys, kind):
    """Exported encoder -> exported language graphs, opened through the gate, against the torch chain."""
    from calibration.media import audio_set, image_set
    from verify.chain import Chain
    from verify.metrics import cosine

    feeds = (image_set("evaluation", 448, 1) if kind == "vision" else audio_set("evaluation", 80, 100, 1)).items[0]
    prefix, suffix, steps = [11, 22, 33, 44, 55], [66, 77, 88], 32
    want, want_logits = _reference(tiny_ckpt, kind, feeds, prefix, suffix, steps)
    for target, precision in (("cpu-x86-linux", "fp32"), ("cpu-x86-linux", "int8"), ("qcs6490", "w8a16")):
        chain = Chain(dev_keys.public, target)
        rows = chain.encode(mo_root / f"minicpm-o.{kind}" / target / precision, feeds)
        lang = mo_root / "minicpm-o.language" / target / precision
        got = chain.generate(lang, prefix, rows, suffix, steps)
        if precision == "fp32":
            assert got == want, (target, kind)  # the same greedy tokens, all of them
            continue
        # quantized: random tiny weights leave thin argmax margins, so free-running greedy parts ways early
        # (recipes/minicpm_o.py THRESHOLDS_LM); teacher-forced, every step's logits stay close to the torch chain's
        forced, logits = chain.generate(lang, prefix, rows, suffix, steps, forced=want, with_logits=True)
        worst = min(cosine(a, b) for a, b in zip(want_logits, logits))
        agreement = float(np.mean([a == b for a, b in zip(forced, want)]))
        assert got[0] == want[0] and worst >= 0.99 and agreement >= 0.75, (target, precision, kind, worst, agreement, got, want)


def test_matrix_and_audit_read_the_groups(mo_root, dev_keys):
    p = _cli("matrix", "--out", str(mo_root), "--as", "json", "--public-key", str(dev_keys.public))
    cells = [c for c in json.loads(p.stdout)["cells"] if c["family"] == "minicpm-o" and c["route"] == "qcs6490"]
    (t,) = [t for d in cells[0]["deployments"] for t in d["targets"]]
    by = {g["group"]: g["status"] for g in t["toolchain"]["groups"]}  # the twin's groups: what the toolchain built
    assert by == {"vision": "unqualified", "audio": "unqualified", "language": "unqualified", "speech-decoder": "unqualified",
                  "flow-vocoder": "missing-prerequisite"}
    assert t["toolchain"]["status"] == "missing-prerequisite"  # a deployment needs every group
    assert t["device"]["status"] == "none" and t["checkpoint"] == "missing"  # every record is the twin's, the missing group's too
    assert t["status"] == "rejected" and t["plan"]["code"] == "capacity"  # the real-size language model does not fit qcs6490
    p = _cli("audit", *[str(mo_root / f"minicpm-o.{g}" / "qcs6490" / "w8a16") for g in GROUPS], "--public-key", str(dev_keys.public))
    assert p.returncode == 0, p.stderr[-2000:]
    for fmt in ("md", "junit", "html"):  # stateless stages report their per-output figures and no token cases
        out = mo_root / f"report.{fmt}"
        p = _cli("report", *[str(mo_root / f"minicpm-o.{g}" / "qcs6490" / "w8a16") for g in ("vision", "language")], "--as", fmt,
                 "--output", str(out), "--public-key", str(dev_keys.public))
        assert p.returncode == 0, p.stderr[-2000:]
    md = (mo_root / "report.md").read_text()
    assert "Stateless graph measured on 5 held-out inputs" in md and "Token agreement" in md
    junit = (mo_root / "report.junit").read_text()
    assert "vision_slice448.image_embeds.min_cosine" in junit and junit.count("decode.token_agreement") == 3  # language stages only


def test_ai_hub_validation_refuses_a_multimodal_group_clearly(mo_root, tiny_ckpt, dev_keys):
    p = _cli("hub", "validate", str(mo_root / "minicpm-o.vision" / "qcs6490" / "w8a16"), "--simulate", "--checkpoint", str(tiny_ckpt),
             "--public-key", str(dev_keys.public))
    text = " ".join(p.stderr.split())
    assert p.returncode == 2 and "not implemented" in text and "Traceback" not in p.stderr, p.stderr[-2000:]


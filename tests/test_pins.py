"""A team pins its own checkpoint (issue #27, item 3): `edge-export pin`, `recipe --pin`, audit of a pinned build.

The checkpoint is written by transformers' own `save_pretrained` (sharded, with its index), not by our synthesiser.
"""

import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

EXE = str(Path(sys.executable).with_name("edge-export"))


def _cli(*args, cwd=None):
    return subprocess.run([EXE, *map(str, args)], capture_output=True, text=True, cwd=cwd)


@pytest.fixture(scope="module")
def sharded(tmp_path_factory):
    """A Gemma3ForCausalLM of the spark family written by transformers (seeded, sharded into several files)."""
    d = tmp_path_factory.mktemp("hf") / "spark-sharded"
    code = (
        "import sys, torch\n"
        "from transformers import Gemma3TextConfig, Gemma3ForCausalLM\n"
        "from recipes.spark import TINY_CONFIG\n"
        "cfg = Gemma3TextConfig(**{k: v for k, v in TINY_CONFIG.items() if k not in ('architectures', 'model_type')})\n"
        "torch.manual_seed(7)\n"
        "Gemma3ForCausalLM(cfg).save_pretrained(sys.argv[1], max_shard_size='200KB')\n"
    )
    p = subprocess.run([sys.executable, "-c", code, str(d)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr[-2000:]
    assert (d / "model.safetensors.index.json").is_file() and len(list(d.glob("model-*.safetensors"))) > 2
    return d


def test_pin_build_and_audit_a_sharded_transformers_checkpoint(sharded, tmp_path, dev_keys):
    pin = tmp_path / "spark.pin.json"
    p = _cli("pin", "spark", "--checkpoint", sharded, "--output", pin, "--revision", "0123abc")
    assert p.returncode == 0, p.stderr
    data = json.loads(pin.read_text())
    assert data["schema"] == "edge-export.pin/v1" and data["recipe"] == "spark" and data["revision"] == "0123abc"
    assert set(data["files"]) == {"config.json", "model.safetensors.index.json", *(f.name for f in sharded.glob("model-*.safetensors"))}
    for name, meta in data["files"].items():
        assert meta["sha256"] == hashlib.sha256((sharded / name).read_bytes()).hexdigest() and meta["size"] == (sharded / name).stat().st_size
    assert data["layout"]["ok"] and data["layout"]["tensors"] == data["layout"]["loaded"]
    assert [e["file"] for e in data["excluded"]] == ["generation_config.json"]
    assert "wrote" in p.stdout and "spark" in p.stdout
    # refusing to overwrite a reviewed pin
    assert _cli("pin", "spark", "--checkpoint", sharded, "--output", pin).returncode == 2

    out = tmp_path / "out"
    p = _cli("recipe", "spark", "--target", "cpu", "-p", "fp32", "--context", "32", "--checkpoint", sharded, "--pin", pin, "--out", out)
    assert p.returncode == 0, p.stderr[-3000:]
    bundle = out / "spark" / "cpu-x86-linux" / "fp32"
    ck = json.loads((bundle / "manifest.json").read_text())["checkpoint"]
    assert ck["pinned"] and ck["revision"] == "0123abc" and ck["source"] == data["source"]
    assert ck["pin_file"]["sha256"] == hashlib.sha256(pin.read_bytes()).hexdigest()
    p = _cli("audit", bundle, "--public-key", dev_keys.public, "--json")
    assert p.returncode == 0, p.stdout
    checks = {c["id"]: c for c in json.loads(p.stdout)["bundles"][0]["checks"]}
    assert checks["checkpoint"]["ok"] and "spark.pin.json" in checks["checkpoint"]["message"]

    # a policy may list the pin files it trusts: this one passes, a policy trusting another pin fails the checkpoint check
    policy = tmp_path / "policy.toml"
    policy.write_text('trusted_pins = ["spark.pin.json"]\n')
    assert _cli("audit", bundle, "--public-key", dev_keys.public, "--policy", policy).returncode == 0
    policy.write_text(f'trusted_pins = ["{"0" * 64}"]\n')
    p = _cli("audit", bundle, "--public-key", dev_keys.public, "--policy", policy, "--json")
    assert p.returncode == 7
    failing = [c for c in json.loads(p.stdout)["bundles"][0]["checks"] if not c["ok"]]
    assert [c["id"] for c in failing] == ["checkpoint"] and "trusted pins" in failing[0]["message"]

    # a checkpoint file that is not the pinned one is refused by name, and nothing is built
    bad = tmp_path / "changed"
    shutil.copytree(sharded, bad)
    shard = sorted(bad.glob("model-*.safetensors"))[1]
    raw = bytearray(shard.read_bytes())
    raw[-1] ^= 1
    shard.write_bytes(bytes(raw))
    p = _cli("recipe", "spark", "--target", "cpu", "-p", "fp32", "--context", "32", "--checkpoint", bad, "--pin", pin, "--out", tmp_path / "o2")
    assert p.returncode == 5 and shard.name in p.stderr and "spark.pin.json" in " ".join(p.stderr.split())
    # a pin for another recipe, or a pin without a checkpoint: usage errors
    p = _cli("recipe", "minicpm-o", "--target", "cpu", "--checkpoint", sharded, "--pin", pin, "--out", tmp_path / "o3")
    assert p.returncode == 2 and "pins a checkpoint for recipe spark" in " ".join(p.stderr.split())
    p = _cli("recipe", "spark", "--target", "cpu", "--pin", pin, "--out", tmp_path / "o3")
    assert p.returncode == 2 and "--pin needs --checkpoint" in p.stderr


def _blob_snapshot(src: Path, root: Path, org="acme", name="spark-tiny", rev="4f1c3a9d0e2b7c6a5f8e9d0c1b2a3f4e5d6c7b8a") -> Path:
    """The Hugging Face cache layout: snapshots/REV/FILE -> ../../blobs/BLOB (LFS blobs are named by their SHA-256)."""
    repo = root / f"models--{org}--{name}"
    (repo / "blobs").mkdir(parents=True)
    snap = repo / "snapshots" / rev
    snap.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(rev)
    for f in sorted(src.iterdir()):
        data = f.read_bytes()
        blob = hashlib.sha256(data).hexdigest() if f.suffix == ".safetensors" else hashlib.sha1(data).hexdigest()
        (repo / "blobs" / blob).write_bytes(data)
        os.symlink(f"../../blobs/{blob}", snap / f.name)
    return snap


def test_a_hugging_face_cache_snapshot_is_pinned_offline_with_its_revision(sharded, tmp_path):
    snap = _blob_snapshot(sharded, tmp_path / "hub")
    pin = tmp_path / "p.json"
    p = _cli("pin", "spark", "--checkpoint", snap, "--output", pin, "--json")
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["source"] == "hf:acme/spark-tiny" and out["revision"] == snap.name
    assert _cli("pin", "spark", "--checkpoint", snap, "--output", tmp_path / "q.json", "--revision", "other").returncode == 2

    # a blob whose content is not its name (a corrupt download) is refused by name
    shard = sorted(snap.glob("model-*.safetensors"))[0]
    blob = Path(os.path.realpath(shard))
    raw = bytearray(blob.read_bytes())
    raw[-1] ^= 1
    blob.write_bytes(bytes(raw))
    p = _cli("pin", "spark", "--checkpoint", snap, "--output", tmp_path / "r.json")
    assert p.returncode == 5 and blob.name in p.stderr and "corrupt" in p.stderr
    raw[-1] ^= 1
    blob.write_bytes(bytes(raw))

    # a link that leaves the repository is refused
    outside = tmp_path / "elsewhere.safetensors"
    shutil.copy(blob, outside)
    shard.unlink()
    os.symlink(outside, shard)
    p = _cli("pin", "spark", "--checkpoint", snap, "--output", tmp_path / "s.json")
    assert p.returncode == 5 and "resolves outside the checkpoint" in " ".join(p.stderr.split())


def test_pin_refuses_what_the_loader_must_never_read(sharded, tmp_path):
    # pickle only: refused (and never opened)
    pk = tmp_path / "pickle-only"
    pk.mkdir()
    shutil.copy(sharded / "config.json", pk)
    (pk / "pytorch_model.bin").write_bytes(b"\x80\x04not read")
    p = _cli("pin", "spark", "--checkpoint", pk, "--output", tmp_path / "a.json")
    assert p.returncode == 5 and "pickle" in p.stderr and "pytorch_model.bin" in p.stderr
    # pickle and code beside safetensors: pinned, and listed as never read / never executed
    mixed = tmp_path / "mixed"
    shutil.copytree(sharded, mixed)
    (mixed / "pytorch_model.bin").write_bytes(b"\x80\x04not read")
    (mixed / "modeling_evil.py").write_text("raise SystemExit('executed')\n")
    cfg = json.loads((mixed / "config.json").read_text())
    (mixed / "config.json").write_text(json.dumps({**cfg, "auto_map": {"AutoModelForCausalLM": "modeling_evil.Evil"}}))
    p = _cli("pin", "spark", "--checkpoint", mixed, "--output", tmp_path / "b.json", "--json")
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    reasons = {e["file"]: e["reason"] for e in out["excluded"]}
    assert reasons["pytorch_model.bin"].startswith("pickle") and reasons["modeling_evil.py"].startswith("code: never executed")
    assert "pytorch_model.bin" not in out["files"] and any("auto_map" in n for n in out["notes"])
    # a shard the index names is missing
    gone = tmp_path / "gone"
    shutil.copytree(sharded, gone)
    sorted(gone.glob("model-*.safetensors"))[-1].unlink()
    p = _cli("pin", "spark", "--checkpoint", gone, "--output", tmp_path / "c.json")
    assert p.returncode == 5 and "shards named but absent" in " ".join(p.stderr.split())
    # a config of another family, and a tensor of the wrong shape
    p = _cli("pin", "minicpm-o", "--checkpoint", sharded, "--output", tmp_path / "d.json")
    assert p.returncode == 2 and "not a checkpoint for recipe minicpm-o" in " ".join(p.stderr.split())
    wide = tmp_path / "wide"
    shutil.copytree(sharded, wide)
    (wide / "config.json").write_text(json.dumps({**cfg, "intermediate_size": cfg["intermediate_size"] * 2}))
    p = _cli("pin", "spark", "--checkpoint", wide, "--output", tmp_path / "e.json")
    err = " ".join(p.stderr.split())
    assert p.returncode == 5 and "shape mismatches" in err and "mlp.down_proj.weight" in err
    # a plan-only family has no loader to check a layout against
    p = _cli("pin", "qwen3-tts", "--checkpoint", sharded, "--output", tmp_path / "f.json")
    assert p.returncode in (2, 5) and "Traceback" not in p.stderr


def _safetensors(tensors: dict[str, tuple[str, list[int], bytes]]) -> bytes:
    header, data, at = {}, b"", 0
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [at, at + len(raw)]}
        data += raw
        at += len(raw)
    h = json.dumps(header).encode()
    return struct.pack("<Q", len(h)) + h + data


@pytest.mark.parametrize("mutate,fault", [
    (lambda b: b[:5], "shorter than the 8-byte header length"),
    (lambda b: struct.pack("<Q", 10**6) + b[8:], "runs past the end"),
    (lambda b: b[:-4], "end past the file"),
    (lambda b: struct.pack("<Q", 2) + b"[]", "not a JSON object"),
    (lambda b: b + b"\0" * 8, "trailing bytes"),
])
def test_a_corrupt_safetensors_header_is_named_not_loaded(tmp_path, mutate, fault):
    from exporter.errors import IntegrityError
    from exporter.safetensors_header import read_header

    good = _safetensors({"a": ("F32", [2, 2], b"\0" * 16), "b": ("F16", [3], b"\0" * 6)})
    f = tmp_path / "m.safetensors"
    f.write_bytes(good)
    assert set(read_header(f).tensors) == {"a", "b"}
    f.write_bytes(mutate(good))
    with pytest.raises(IntegrityError) as e:
        read_header(f)
    assert fault in e.value.message and str(f) in e.value.message and e.value.exit_code == 5


def test_a_crafted_pin_file_is_refused(tmp_path, sharded):
    from exporter.errors import EdgeExportError
    from exporter.pins import load_pin

    good = json.loads(_cli("pin", "spark", "--checkpoint", sharded, "--output", tmp_path / "p.json", "--json").stdout)
    cases = {
        "escape": {**good, "files": {"../outside/config.json": good["files"]["config.json"]}},
        "pickle": {**good, "files": {**good["files"], "pytorch_model.bin": good["files"]["config.json"]}},
        "schema": {**good, "schema": "something-else"},
        "digest": {**good, "files": {**good["files"], "config.json": {"sha256": "xyz", "size": 1}}},
    }
    for name, body in cases.items():
        f = tmp_path / f"{name}.json"
        f.write_text(json.dumps(body))
        with pytest.raises(EdgeExportError):
            load_pin(f)
    dup = tmp_path / "dup.json"
    dup.write_text('{"schema": "edge-export.pin/v1", "recipe": "spark", "recipe": "tiny-lm"}')
    with pytest.raises(EdgeExportError) as e:
        load_pin(dup)
    assert "duplicate key" in e.value.message


def test_a_qwen3_5_snapshot_is_pinned_with_its_vision_tower_and_mtp_accounted_for(tmp_path):
    """qwen3.8-27b has no exporter yet, but its snapshot can be pinned: transformers' own Qwen3_5ForConditionalGeneration
    layout (text and vision checked by shape) plus the MTP tensors transformers silently drops (accounted for by name)."""
    d = tmp_path / "qwen3_5"
    code = (
        "import sys, torch\n"
        "from pathlib import Path\n"
        "from safetensors.torch import load_file, save_file\n"
        "from transformers import Qwen3_5Config, Qwen3_5ForConditionalGeneration\n"
        "text = dict(vocab_size=300, hidden_size=64, intermediate_size=96, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=1,"
        " head_dim=16, linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=8, linear_value_head_dim=8, tie_word_embeddings=False)\n"
        "vision = dict(depth=2, hidden_size=32, intermediate_size=48, num_heads=2, out_hidden_size=64, num_position_embeddings=64)\n"
        "torch.manual_seed(0)\n"
        "m = Qwen3_5ForConditionalGeneration(Qwen3_5Config(text_config=text, vision_config=vision))\n"
        "m.save_pretrained(sys.argv[1])\n"
        "f = Path(sys.argv[1]) / 'model.safetensors'\n"
        "t = load_file(str(f))\n"
        "t['mtp.fc.weight'] = torch.zeros(64, 128)\n"
        "t['mtp.layers.0.mlp.down_proj.weight'] = torch.zeros(64, 96)\n"
        "save_file(t, str(f), metadata={'format': 'pt'})\n"
    )
    p = subprocess.run([sys.executable, "-c", code, str(d)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr[-2000:]
    p = _cli("pin", "qwen3.8-27b", "--checkpoint", d, "--output", tmp_path / "q.json", "--json")
    assert p.returncode == 0, p.stderr
    lay = json.loads(p.stdout)["layout"]
    assert lay["unchecked"] == {"prefixes": ["mtp."], "tensors": 2} and lay["loaded"] == lay["tensors"] - 2
    # the recipe still cannot build: the plan says why (a recorded missing prerequisite, not a traceback)
    p = _cli("recipe", "qwen3.8-27b", "--target", "cpu-x86-linux", "--checkpoint", d, "--pin", tmp_path / "q.json", "--out", tmp_path / "o")
    assert p.returncode in (4, 6) and "Traceback" not in p.stderr
    # a vision tensor of the wrong shape is named
    code2 = ("import sys, torch\nfrom safetensors.torch import load_file, save_file\nf = sys.argv[1]\nt = load_file(f)\n"
             "t['model.visual.pos_embed.weight'] = torch.zeros(65, 32)\nsave_file(t, f, metadata={'format': 'pt'})\n")
    assert subprocess.run([sys.executable, "-c", code2, str(d / "model.safetensors")]).returncode == 0
    p = _cli("pin", "qwen3.8-27b", "--checkpoint", d, "--output", tmp_path / "r.json")
    assert p.returncode == 5 and "model.visual.pos_embed.weight" in p.stderr

"""The trust chain under a hostile run (issue #28): non-finite numbers, usage errors, killed and concurrent builds,
corrupt checkpoints, graphs that reach outside their bundle, crafted manifests, bad keys, operating-system errors.

Every case asserts a precise exit code and message, and that no traceback reaches the user."""

import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

EXE = str(Path(sys.executable).with_name("edge-export"))


def _cli(*args, env=None, timeout=900):
    p = subprocess.run([EXE, *map(str, args)], capture_output=True, text=True, env=env, timeout=timeout)
    p.err = " ".join(p.stderr.split())
    p.out = " ".join(p.stdout.split())
    return p


def _no_traceback(p):
    assert "Traceback" not in p.stderr and "Traceback" not in p.stdout, p.stderr[-3000:]


@pytest.fixture(scope="module")
def twin(tmp_path_factory):
    d = tmp_path_factory.mktemp("twin") / "tiny-spark"
    assert _cli("synthesize", "tiny-spark", d).returncode == 0
    return d


def _edit_tensors(src: Path, dst: Path, edit) -> Path:
    from safetensors.numpy import load_file, save_file

    shutil.copytree(src, dst)
    t = load_file(str(dst / "model.safetensors"))
    edit(t)
    save_file(t, str(dst / "model.safetensors"), metadata={"format": "pt"})
    return dst


# -- 1. non-finite numbers ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("tensor,value", [("model.layers.2.mlp.down_proj.weight", np.nan), ("model.layers.0.self_attn.q_proj.weight", np.inf)])
def test_a_non_finite_weight_is_refused_by_name_at_load(twin, tmp_path, tensor, value):
    def edit(t):
        t[tensor][0, 0] = value
    ckpt = _edit_tensors(twin, tmp_path / "bad", edit)
    out = tmp_path / "out"
    p = _cli("recipe", "spark", "--target", "cpu", "-p", "fp32", "--context", "32", "--checkpoint", ckpt, "--allow-unpinned", "--out", out)
    _no_traceback(p)
    assert p.returncode == 5 and tensor in p.err and "non-finite" in p.err
    rec = json.loads((out / "spark" / "cpu-x86-linux" / "fp32.record.json").read_text())
    assert rec["status"] == "failed" and rec["stage"] == "load" and tensor in rec["reason"]
    assert not (out / "spark" / "cpu-x86-linux" / "fp32").exists()


def test_non_finite_outputs_fail_parity_by_name_and_no_metric_hides_them():
    from verify.metrics import Accumulator
    from verify.parity import measure_encoder_stage
    from verify.thresholds import output_checks, stage_failures
    from recipes.base import Thresholds

    ref = np.linspace(-1, 1, 64).astype(np.float32)
    nan = np.full_like(ref, np.nan)
    acc = Accumulator()
    acc.add(ref, nan)  # all NaN: Python's min(1.0, nan) would have reported 1.0
    j = acc.to_json()
    assert j["nonfinite_calls"] == 1 and j["nonfinite_values"] == 64 and j["min_cosine"] is None and j["max_abs"] is None
    th = {"min_cosine": 0.99, "min_psnr_db": 30.0, "max_abs": 1.0}
    assert [c["metric"] for c in output_checks(j, th) if not c["ok"]] == ["cosine", "psnr_db", "max_abs", "nonfinite"]
    one_inf = ref.copy()
    one_inf[3] = np.inf
    acc = Accumulator()
    acc.add(ref, ref)
    acc.add(ref, one_inf)  # a single +Inf used to crash psnr_db
    j = acc.to_json()
    assert j["nonfinite_calls"] == 1 and j["min_cosine"] > 0.999999 and not all(c["ok"] for c in output_checks(j, th))
    json.dumps(j, allow_nan=False)  # nothing non-finite reaches a report
    ref_bad = Accumulator()
    ref_bad.add(nan, ref)  # a reference that is not finite proves nothing
    assert ref_bad.to_json()["reference_nonfinite_calls"] == 1 and not all(c["ok"] for c in output_checks(ref_bad.to_json(), th))

    class Runner:
        def run(self, outs, feeds):
            return [np.full((1, 4), np.nan, np.float32)]

    comps = [{"name": "enc", "inputs": [{"name": "x"}], "outputs": [{"name": "y"}]}]
    res = measure_encoder_stage("quantized", "CPUExecutionProvider", "int8", {"enc": Runner()}, comps, [{"x": np.ones((1, 4), np.float32)}],
                                lambda c, f: {"y": np.ones((1, 4), np.float32)}, Thresholds(min_cosine=0.99, min_psnr_db=30.0, max_abs=1.0))
    assert not res.passed and {"stage": "quantized", "component": "enc", "output": "y", "metric": "nonfinite", "value": 1,
                               "threshold": 0} in res.failures
    assert "nonfinite" in [f["metric"] for f in stage_failures(res.to_json(), res.thresholds)]  # the audit re-judges the same


# -- 2. usage errors --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("args,says", [
    (["recipe", "tiny-lm"], "Missing option '--target'"),
    (["recipe", "tiny-lm", "-t", "cpu", "--no-such-option"], "No such option"),
    (["plan", "tiny-lm", "-t", "cpu", "--context", "abc"], "Invalid value for '--context'"),
    (["plan", "tiny-lm", "-t", "cpu", "--context", "1e9"], "Invalid value for '--context'"),
    (["plan", "tiny-lm", "-t", "cpu", "--ram", "abc"], "Invalid value for '--ram'"),
    (["plan", "tiny-lm", "-t", "cpu", "--ram", "nan"], "--ram nan is not a positive, finite number"),
    (["plan", "tiny-lm", "-t", "cpu", "--ram", "inf"], "--ram inf is not a positive, finite number"),
    (["recipe", "tiny-lm", "-t", "cpu", "--format", "../../../../escaped"], "unknown format '../../../../escaped'"),
    ([], "Usage"),
])
def test_usage_errors_print_usage_and_exit_2(args, says, tmp_path):
    p = _cli(*args, *(["--out", tmp_path / "o"] if args[:1] == ["recipe"] and "-t" in args else []))
    _no_traceback(p)
    assert p.returncode == 2 and says in p.err + p.out, (p.returncode, p.err, p.out)
    assert not any(tmp_path.rglob("*.record.json"))  # a bad format never becomes a record path


# -- 3 and 15. killed builds ------------------------------------------------------------------------------------------


def _dead_owner() -> str:
    from exporter.atomic import _start_ticks

    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.2)"])
    ticks = _start_ticks(p.pid) or 0
    p.wait()
    return f"{p.pid}x{ticks}"


def test_staging_and_superseded_directories_are_never_bundles_and_are_swept(built, tmp_path, dev_keys):
    out = tmp_path / "out"
    # the tiny-lm bundles only: other tests write their own cells under the shared output root
    shutil.copytree(built[("cpu", "fp32")].bundle.parent.parent, out / "tiny-lm", ignore=shutil.ignore_patterns(".cache", ".locks"))
    cell = out / "tiny-lm" / "cpu-x86-linux"
    dead = _dead_owner()
    # what a build killed during sign (a complete, valid bundle in staging) and between the two renames leaves
    shutil.copytree(cell / "fp32", cell / f".tmp-fp32-{dead}-0123abcd")
    shutil.copytree(cell / "int8", cell / f".old-int8-{dead}-4567abcd")
    (out / ".cache" / "export").mkdir(parents=True)
    (out / ".cache" / "export" / f".tmp-x-{dead}-89abcdef").mkdir()
    from exporter.atomic import owner, sweep_tree

    live = cell / f".tmp-int8-{owner()}-aaaabbbb"
    live.mkdir()  # a live writer's staging is left alone
    p = _cli("audit", out, "--public-key", dev_keys.public, "--json")
    assert p.returncode == 0, p.stdout
    assert sorted(Path(b["bundle"]).name for b in json.loads(p.stdout)["bundles"]) == ["fp32", "int8", "w8a16"]

    removed = {x.name for x in sweep_tree(out)}
    assert removed == {f".tmp-fp32-{dead}-0123abcd", f".old-int8-{dead}-4567abcd", f".tmp-x-{dead}-89abcdef"}
    assert live.is_dir()


@pytest.mark.parametrize("sig,code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_an_interrupted_build_says_so_publishes_nothing_and_leaves_no_staging(tmp_path, sig, code):
    out = tmp_path / "out"
    proc = subprocess.Popen([EXE, "recipe", "tiny-lm", "--target", "cpu", "-p", "int8", "--out", str(out)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while time.time() < deadline and not list((out / ".cache").glob("export/*/*/_done.json")):
        time.sleep(0.2)  # wait until real work has started (the first graph exported)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == code, err[-2000:]
    assert f"interrupted by {signal.Signals(sig).name}" in " ".join(err.split()) and "Traceback" not in err
    assert not (out / "tiny-lm" / "cpu-x86-linux" / "int8").exists()
    hidden = [p for p in out.rglob(".tmp-*")] + [p for p in out.rglob(".old-*")]
    assert hidden == [], hidden


# -- 4. concurrent builds ---------------------------------------------------------------------------------------------


def test_two_builds_into_one_output_root_wait_instead_of_racing(tmp_path, dev_keys):
    out = tmp_path / "out"
    args = [EXE, "recipe", "tiny-lm", "--target", "cpu", "-p", "fp32", "--out", str(out), "--json"]
    a = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    b = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    (oa, ea), (ob, eb) = a.communicate(timeout=600), b.communicate(timeout=600)
    assert a.returncode == 0 and b.returncode == 0, (ea[-2000:], eb[-2000:])
    statuses = sorted(json.loads(o)["results"][0]["status"] for o in (oa, ob))
    assert statuses == ["published", "up-to-date"], statuses
    assert "waiting for" in ea + eb
    assert _cli("audit", out, "--public-key", dev_keys.public).returncode == 0


def _race(root, q):
    from exporter.cache import StageCache

    def build(tmp):
        time.sleep(0.5)
        (tmp / "x").write_text(str(os.getpid()))
        return {"pid": os.getpid()}

    r = StageCache(Path(root)).run("race", {"k": 1}, build)
    q.put((r.hit, r.info["pid"]))


def test_two_processes_racing_on_one_stage_cache_key_leave_one_valid_entry(tmp_path):
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    ps = [ctx.Process(target=_race, args=(tmp_path, q)) for _ in range(3)]
    for p in ps:
        p.start()
    for p in ps:
        p.join(60)
    got = [q.get(timeout=5) for _ in ps]
    assert sorted(h for h, _ in got) == [False, True, True] and len({pid for _, pid in got}) == 1
    entries = [p for p in (tmp_path / "race").rglob("_done.json")]
    assert len(entries) == 1 and not list((tmp_path / "race").rglob(".tmp-*"))


# -- 5. corrupt checkpoints -------------------------------------------------------------------------------------------


def _corrupt(src: Path, dst: Path, how: str) -> Path:
    shutil.copytree(src, dst)
    f = dst / "model.safetensors"
    raw = f.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    if how == "truncated":
        f.write_bytes(raw[: len(raw) // 2])
    elif how == "header-past-end":
        f.write_bytes(struct.pack("<Q", len(raw) * 4) + raw[8:])
    elif how == "offsets-past-end":
        header = json.loads(raw[8:8 + n])
        name = sorted(k for k in header if k != "__metadata__")[0]
        header[name]["data_offsets"][1] += 10**6
        h = json.dumps(header).encode()
        f.write_bytes(struct.pack("<Q", len(h)) + h + raw[8 + n:])
    return dst


@pytest.mark.parametrize("how,fault", [("truncated", "truncated"), ("header-past-end", "runs past the end"),
                                       ("offsets-past-end", "end past the file")])
def test_a_corrupt_safetensors_file_is_named_with_exit_5(twin, tmp_path, how, fault):
    ckpt = _corrupt(twin, tmp_path / how, how)
    out = tmp_path / "out"
    p = _cli("recipe", "spark", "--target", "cpu", "-p", "fp32", "--checkpoint", ckpt, "--allow-unpinned", "--out", out)
    _no_traceback(p)
    assert p.returncode == 5 and "model.safetensors" in p.err and fault in p.err
    rec = json.loads((out / "spark" / "cpu-x86-linux" / "fp32.record.json").read_text())
    assert rec["stage"] == "resolve" and "corrupt safetensors" in rec["reason"]


# -- 6. graphs that reach outside the bundle ---------------------------------------------------------------------------


def _resign(bundle: Path, dev_keys) -> None:
    from manifests import manifest as mf
    from manifests.signing import sign_bundle
    from exporter.hashing import sha256_file

    data = json.loads((bundle / "manifest.json").read_text())
    data["files"] = {str(p.relative_to(bundle)): {"sha256": sha256_file(p), "size": p.stat().st_size}
                     for p in sorted(bundle.rglob("*")) if p.is_file() and p.name not in ("manifest.json", "model.sig")}
    for c in data["components"]:
        c["files"] = [f for f in c["files"] if f in data["files"]]
    mf.write(bundle, data)
    (bundle / "model.sig").unlink(missing_ok=True)
    sign_bundle(bundle, dev_keys.private)


@pytest.mark.parametrize("where", ["../outside/evil.data", "ABSOLUTE"])
def test_a_signed_graph_whose_weights_live_outside_the_bundle_is_refused(built, tmp_path, dev_keys, where):
    import onnx

    from verify import gate

    bundle = tmp_path / "b" / "fp32"
    shutil.copytree(built[("cpu", "fp32")].bundle, bundle)
    outside = tmp_path / "b" / "outside"
    outside.mkdir()
    data_file = bundle / "prefill_ar32_cl256.onnx.data"
    shutil.move(data_file, outside / "evil.data")
    loc = str(outside / "evil.data") if where == "ABSOLUTE" else where
    m = onnx.load(str(bundle / "prefill_ar32_cl256.onnx"), load_external_data=False)
    for t in m.graph.initializer:
        for e in t.external_data:
            if e.key == "location":
                e.value = loc
    onnx.save(m, str(bundle / "prefill_ar32_cl256.onnx"))
    _resign(bundle, dev_keys)
    p = _cli("verify", bundle, "--public-key", dev_keys.public)
    _no_traceback(p)
    assert p.returncode == 5 and "outside the bundle" in p.err and "prefill_ar32_cl256.onnx" in p.err
    p = _cli("audit", bundle, "--public-key", dev_keys.public, "--json")
    checks = {c["id"]: c for c in json.loads(p.stdout)["bundles"][0]["checks"]}
    assert p.returncode == 7 and not checks["references"]["ok"] and "evil.data" in checks["references"]["message"]
    with pytest.raises(gate.BundleInvalid, match="outside"):
        gate.open_session(bundle, dev_keys.public, "cpu", "prefill")


# -- 7. crafted JSON ------------------------------------------------------------------------------------------------


def _crafted(built, tmp_path, dev_keys, name, write) -> Path:
    from manifests.signing import sign_bundle

    bundle = tmp_path / name / "fp32"
    shutil.copytree(built[("cpu", "fp32")].bundle, bundle)
    (bundle / "model.sig").unlink()
    write(bundle / "manifest.json")
    sign_bundle(bundle, dev_keys.private)  # re-signed by the key holder: the manifest itself is what is crafted
    return bundle


CRAFTED = {
    "deep": (lambda f: f.write_text("[" * 200_000 + "]" * 200_000), "nested 200000 levels"),
    "duplicate-key": (lambda f: f.write_text(f.read_text().replace('"target": {', '"target": "qcs6490", "target": {', 1)), "duplicate key 'target'"),
    "huge": (lambda f: f.write_bytes(b" " * (33 << 20) + b"{}"), "more than"),
    "wrong-types": (lambda f: f.write_text(json.dumps({**json.loads(f.read_text()), "components": "many"})), "schema violation"),
    "contradiction": (lambda f: f.write_text(json.dumps({**json.loads(f.read_text()), "bundle": {**json.loads(f.read_text())["bundle"],
                                                                                                "target": "qcs6490"}})), "contradicts itself"),
    "nan": (lambda f: f.write_text(f.read_text().replace('"created":', '"x": NaN, "created":', 1)), "NaN is not a JSON number"),
}


@pytest.mark.parametrize("case", sorted(CRAFTED))
def test_a_crafted_manifest_is_refused_precisely_everywhere(built, tmp_path, dev_keys, case):
    from verify import gate

    write, says = CRAFTED[case]
    bundle = _crafted(built, tmp_path, dev_keys, case, write)
    p = _cli("verify", bundle, "--public-key", dev_keys.public)
    _no_traceback(p)
    assert p.returncode == 5 and says in p.err, p.err
    # an audit of a directory holding it and a good bundle audits both: one crafted bundle does not abort the rest
    good = tmp_path / case / "good"
    shutil.copytree(built[("cpu", "int8")].bundle, good)
    p = _cli("audit", tmp_path / case, "--public-key", dev_keys.public, "--json")
    _no_traceback(p)
    res = {Path(b["bundle"]).name: b for b in json.loads(p.stdout)["bundles"]}
    assert p.returncode == 7 and res["good"]["ok"] and not res["fp32"]["ok"]
    assert says in json.dumps(res["fp32"]["checks"])
    p = _cli("report", tmp_path / case, "--public-key", dev_keys.public, "--as", "md")
    _no_traceback(p)
    assert p.returncode == 0
    from exporter.errors import IntegrityError

    with pytest.raises(IntegrityError):
        gate.open_session(bundle, dev_keys.public, "rb3-gen2" if case == "contradiction" else "cpu", "prefill")


# -- 8. signing keys ------------------------------------------------------------------------------------------------


def _keys(tmp_path):
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec, rsa

    d = tmp_path / "keys"
    d.mkdir()
    enc = serialization.BestAvailableEncryption(b"pw")
    none = serialization.NoEncryption()
    pk8 = serialization.PrivateFormat.PKCS8
    pem = serialization.Encoding.PEM
    (d / "rsa.pem").write_bytes(rsa.generate_private_key(65537, 2048).private_bytes(pem, pk8, none))
    ec_key = ec.generate_private_key(ec.SECP256R1())
    (d / "enc.pem").write_bytes(ec_key.private_bytes(pem, pk8, enc))
    (d / "pub.pem").write_bytes(ec_key.public_key().public_bytes(pem, serialization.PublicFormat.SubjectPublicKeyInfo))
    (d / "k1.pem").write_bytes(ec.generate_private_key(ec.SECP521R1()).private_bytes(pem, pk8, none))
    (d / "garbage.pem").write_bytes(b"not a key\n")
    good = ec.generate_private_key(ec.SECP256R1())
    (d / "good.pem").write_bytes(good.private_bytes(pem, pk8, none))
    # a stale public key beside the good one: another key's
    (d / "good.pub.pem").write_bytes(ec.generate_private_key(ec.SECP256R1()).public_key().public_bytes(pem, serialization.PublicFormat.SubjectPublicKeyInfo))
    return d, good


@pytest.mark.parametrize("key,says", [("rsa.pem", "not an elliptic-curve key"), ("enc.pem", "is encrypted"), ("pub.pem", "is a public key"),
                                      ("k1.pem", "not P-256 or P-384"), ("garbage.pem", "is not a PEM private key"), ("absent.pem", "does not exist")])
def test_a_bad_signing_key_is_refused_before_any_work(tmp_path, key, says):
    d, _ = _keys(tmp_path)
    out = tmp_path / "out"
    p = _cli("recipe", "tiny-lm", "--target", "cpu", "--key", d / key, "--out", out)
    _no_traceback(p)
    assert p.returncode == 2 and says in p.err and str(d / key) in p.err
    assert not out.exists()  # nothing planned, recorded or built
    assert sorted(x.name for x in d.iterdir()) == sorted(["rsa.pem", "enc.pem", "pub.pem", "k1.pem", "garbage.pem", "good.pem", "good.pub.pem"])


def test_the_signer_is_the_key_given_not_a_stale_public_key_beside_it(tmp_path):
    from cryptography.hazmat.primitives import serialization

    from manifests.signing import public_key_fingerprint

    d, good = _keys(tmp_path)
    pub = tmp_path / "true.pub.pem"
    pub.write_bytes(good.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    stale = (d / "good.pub.pem").read_bytes()
    out = tmp_path / "out"
    p = _cli("recipe", "tiny-lm", "--target", "cpu", "-p", "fp32", "--key", d / "good.pem", "--out", out)
    assert p.returncode == 0, p.err
    bundle = out / "tiny-lm" / "cpu-x86-linux" / "fp32"
    assert json.loads((bundle / "manifest.json").read_text())["signing"]["public_key_sha256"] == public_key_fingerprint(pub)
    assert _cli("audit", bundle, "--public-key", pub).returncode == 0
    assert (d / "good.pub.pem").read_bytes() == stale  # never read, never rewritten


# -- 9-14. operating system, paths, key material, permissions ----------------------------------------------------------


def test_os_errors_name_the_path_and_exit_9(tmp_path, built, dev_keys):
    f = tmp_path / "a-file"
    f.write_text("x")
    p = _cli("recipe", "tiny-lm", "--target", "cpu", "-p", "fp32", "--out", f)
    _no_traceback(p)
    assert p.returncode == 9 and str(f) in p.err and "fix:" in p.err
    p = _cli("report", built[("cpu", "fp32")].bundle, "--public-key", dev_keys.public, "--as", "md", "--output", f / "report.md")
    _no_traceback(p)
    assert p.returncode == 9 and str(f) in p.err


def _unshare_ok() -> bool:
    return shutil.which("unshare") is not None and subprocess.run(["unshare", "--mount", "true"], capture_output=True).returncode == 0


@pytest.mark.skipif(not _unshare_ok(), reason="needs a private mount namespace (root) to mount a read-only and a full file system")
@pytest.mark.parametrize("opts,says", [("ro", "Read-only file system"), ("size=64k", "No space left on device")])
def test_a_read_only_or_full_file_system_is_a_clear_error(tmp_path, opts, says):
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    script = f"mount -t tmpfs -o {opts} tmpfs {mnt} && exec {EXE} recipe tiny-lm --target cpu -p fp32 --out {mnt}/out"
    p = subprocess.run(["unshare", "--mount", "sh", "-c", script], capture_output=True, text=True, timeout=600)
    assert "Traceback" not in p.stderr, p.stderr[-3000:]
    assert p.returncode == 9 and says in " ".join(p.stderr.split()) and str(mnt) in p.stderr


def test_verify_never_creates_key_material(built, tmp_path):
    keys = tmp_path / "empty-keys"
    keys.mkdir()
    env = {**os.environ, "EDGE_EXPORT_KEY_DIR": str(keys)}
    p = _cli("verify", built[("cpu", "fp32")].bundle, env=env)
    _no_traceback(p)
    assert p.returncode == 2 and "no public key" in p.err and list(keys.iterdir()) == []


def test_published_bundles_and_records_are_readable_by_other_accounts(built):
    b = built[("cpu", "fp32")].bundle
    mask = os.umask(0)
    os.umask(mask)
    assert (b.stat().st_mode & 0o777) == 0o777 & ~mask
    assert all((p.stat().st_mode & 0o666) == 0o666 & ~mask for p in b.iterdir())
    rec = b.parent / "fp32.record.json"
    assert (rec.stat().st_mode & 0o666) == 0o666 & ~mask


def test_out_inside_a_bundle_is_refused(built, tmp_path):
    bundle = tmp_path / "b"
    shutil.copytree(built[("cpu", "fp32")].bundle, bundle)
    before = sorted(p.name for p in bundle.iterdir())
    p = _cli("recipe", "tiny-lm", "--target", "cpu", "-p", "fp32", "--out", bundle / "nested")
    _no_traceback(p)
    assert p.returncode == 2 and "inside the signed bundle" in p.err and sorted(p.name for p in bundle.iterdir()) == before


# -- fuzz: crafted checkpoints through the real CLI ---------------------------------------------------------------------


def test_fuzz_crafted_checkpoints_give_exit_5_and_a_message_never_a_traceback(twin, tmp_path):
    rng = np.random.default_rng(7)
    raw = (twin / "model.safetensors").read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    cases = {
        "empty": b"",
        "seven-bytes": raw[:7],
        "header-is-a-list": struct.pack("<Q", 2) + b"[]",
        "header-not-utf8": struct.pack("<Q", 4) + b"\xff\xfe\xfd\xfc",
        "huge-header-length": struct.pack("<Q", 2**63) + raw[8:],
        "bad-dtype": raw.replace(b'"F32"', b'"Q99"', 1),
        "random-tail": raw[: 8 + n] + rng.integers(0, 256, 100, dtype=np.uint8).tobytes(),
    }
    for name, data in cases.items():
        d = tmp_path / name
        shutil.copytree(twin, d)
        (d / "model.safetensors").write_bytes(data)
        p = _cli("recipe", "spark", "--target", "cpu", "-p", "fp32", "--checkpoint", d, "--allow-unpinned", "--out", tmp_path / "o")
        _no_traceback(p)
        assert p.returncode == 5 and "model.safetensors" in p.err and "corrupt safetensors" in p.err, (name, p.returncode, p.err)

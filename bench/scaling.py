"""Scaling: wall time and peak RSS of every pipeline stage against checkpoint size.

    python bench/scaling.py WORK [--sizes 0.1b,0.5b] [--precision fp32] [--json OUT.json]

For each size, a seeded Qwen3ForCausalLM checkpoint (tiny-lm's architecture, real tensor names; tiny-lm's buckets:
prefill AR-32 and decode AR-1 over 256 KV slots) is written under WORK/ckpt-SIZE (kept out of git; reused when
present), pinned by its digests, and built for the cpu target in a fresh WORK/out-SIZE with the real pipeline
(`exporter.pipeline.build_one`). A sampler thread reads the Pss (and Rss) of this process and of its live children
(the forked exporters, the quantization worker, the memory probe) every 20 ms and charges the sums to the stage
running (the Reporter's stage events); a child that still runs in its parent's memory (vfork, before exec) is not
counted twice (`_same_memory`). At each stage's peak sample it also keeps who held it: the Pss of every
process in that sample, named by its command line (`peak_by_process` in the JSON).

After the build: the gate's full check of the bundle (signature + file table, as `verify.gate.check_bundle` does
it now, and as it did before the table reused the signature's digests: a second read of every byte), a release
audit, and a cache-hit rerun (bundle removed, WORK/out-SIZE/.cache kept) against the first run.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SIZES = {
    # name -> (hidden, layers, intermediate, heads, kv heads, vocab); parameters printed by the run
    "0.1b": (768, 12, 2048, 12, 4, 32000),
    "0.5b": (1280, 24, 3456, 16, 4, 32000),
    "1.5b": (2048, 28, 5632, 16, 8, 32000),
    "3b": (2048, 36, 11008, 16, 2, 32000),  # Qwen2.5-3B's stack (its 151936 vocabulary cut to the others' 32000)
}


def _mem_of(pid: str) -> tuple[int, int]:
    """(Rss, Pss) of one process, bytes. Pss charges a page shared by n processes 1/n to each: the sum over the
    build and its forked exporters counts the weights they all map once, where the sum of Rss counts them n times."""
    rss = pss = 0
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Rss:"):
                rss = int(line.split()[1]) * 1024
            elif line.startswith("Pss:"):
                pss = int(line.split()[1]) * 1024
    except OSError:  # the process ended between listing and reading
        pass
    return rss, pss


def _descendants(pid: str) -> list[tuple[str, str]]:
    """(child, its parent) for every live descendant of pid."""
    out = []
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return out
    for t in tasks:
        try:
            kids = (t / "children").read_text().split()
        except OSError:
            continue
        for k in kids:
            out += [(k, pid), *_descendants(k)]
    return out


_KCMP = {"x86_64": 312, "aarch64": 272}  # syscall numbers of kcmp(2)


def _same_memory(a: str, b: str) -> bool:
    """Whether two processes share one address space: a child started by vfork (what `subprocess` and posix_spawn
    use when there is no preexec_fn) runs in its parent's memory until it execs, and its smaps_rollup then reports
    the parent's whole Pss a second time (seen: a memory probe peak of 11.6 GiB at 0.5b, double the real one). kcmp(2)
    with KCMP_VM answers 0 for one address space; where it is unavailable the child is counted (False)."""
    nr = _KCMP.get(os.uname().machine)
    if nr is None:
        return False
    import ctypes

    return ctypes.CDLL(None, use_errno=True).syscall(nr, int(a), int(b), 1, 0, 0) == 0


def _rss() -> int:
    """Pss of this process plus its live descendants' (forked exporters, the quantization worker, the memory
    probe); their Rss sum is kept too (`Sampler.peak_rss`)."""
    return _mem()[1]


def _mem() -> tuple[int, int]:
    rss, pss, _ = _mem_by_process()
    return rss, pss


def _mem_by_process() -> tuple[int, int, list[tuple[str, int]]]:
    """(Rss sum, Pss sum, [(pid, Pss)]) over this process and its live descendants."""
    me = str(os.getpid())
    # a vforked child is checked before its memory is read: once kcmp says it has its own, it keeps it
    pids = [me, *(k for k, parent in _descendants(me) if not _same_memory(parent, k))]
    pairs = [(pid, *_mem_of(pid)) for pid in pids]
    return sum(r for _, r, _ in pairs), sum(p for _, _, p in pairs), [(pid, p) for pid, _, p in pairs]


def _role(pid: str) -> str:
    """What a process of the build is, from its command line: the build itself, a forked copy of it (same command
    line: the forked exporters), or the child's own command (the quantization worker, the memory probe)."""
    if pid == str(os.getpid()):
        return "build"
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        mine = Path("/proc/self/cmdline").read_bytes().split(b"\0")
    except OSError:
        return "ended"
    if argv == mine:
        return "forked copy of the build"
    return " ".join(a.decode(errors="replace") for a in argv if a)[:120]


class Sampler:
    """Per-stage peak RSS and wall time, from the pipeline's Reporter stage events."""

    def __init__(self):
        self.stack: list[str] = []
        self.peak: dict[str, int] = {}  # Pss sum
        self.peak_rss: dict[str, int] = {}  # Rss sum (counts shared pages once per process)
        self.wall: dict[str, float] = {}
        self.by_process: dict[str, list[dict]] = {}  # who held each stage's peak Pss sample
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.wait(0.02):
            self._charge()

    def _charge(self):
        rss, pss, procs = _mem_by_process()
        name = self.stack[-1] if self.stack else "outside"
        if pss > self.peak.get(name, 0):
            self.by_process[name] = [{"pid": int(pid), "role": _role(pid), "pss_bytes": p} for pid, p in procs]
        self.peak[name] = max(self.peak.get(name, 0), pss)
        self.peak_rss[name] = max(self.peak_rss.get(name, 0), rss)

    def start(self):
        self._t.start()

    def stop(self):
        self._stop.set()
        self._t.join()

    def reporter(self):
        from exporter.build import Reporter

        sampler = self

        class R(Reporter):
            @contextlib.contextmanager
            def stage(self, name: str, detail: str = ""):
                # verify opens one "verify" stage per parity stage inside the pipeline's own "verify": time the
                # outermost only (summing both counted verify's wall about twice, in the runs before 2026-12-05)
                outermost = name not in sampler.stack
                sampler.stack.append(name)
                sampler._charge()
                t = time.perf_counter()
                try:
                    yield
                finally:
                    sampler._charge()
                    if outermost:
                        sampler.wall[name] = sampler.wall.get(name, 0.0) + time.perf_counter() - t
                    sampler.stack.pop()

        return R()


def sampled(out: Path, run):
    """`run(reporter)` into a fresh output root `out` under a Sampler: (its result, the sampler, the baseline Pss before
    it, its wall seconds)."""
    import shutil

    shutil.rmtree(out, ignore_errors=True)
    s = Sampler()
    base = _rss()
    s.start()
    t = time.perf_counter()
    try:
        r = run(s.reporter())
    finally:
        s.stop()
    return r, s, base, time.perf_counter() - t


def config_for(size: str) -> dict:
    from recipes.tiny_lm import CONFIG

    hidden, layers, inter, heads, kv, vocab = SIZES[size]
    return {**CONFIG, "hidden_size": hidden, "num_hidden_layers": layers, "intermediate_size": inter, "num_attention_heads": heads,
            "num_key_value_heads": kv, "head_dim": hidden // heads, "vocab_size": vocab, "tie_word_embeddings": False}


def recipe_for(size: str, ckpt: Path):
    """tiny-lm's recipe at another size: same buckets, thresholds and code path, pinned to the written files."""
    from exporter.hashing import sha256_file
    from recipes.base import CheckpointPin
    from recipes.cost import CostModel, decoder_graphs, kv_state
    from recipes.lm import lm_components, lm_state_layout
    from recipes.shapes import qwen3_tensor_shapes
    from recipes.tiny_lm import CONTEXT, DECODE, PREFILL, RECIPE

    cfg = config_for(size)
    pin = CheckpointPin(source=f"local:{ckpt}", revision=f"bench-{size}",
                        files={n: sha256_file(ckpt / n) for n in ("config.json", "model.safetensors")})
    cost = CostModel(graphs=decoder_graphs(qwen3_tensor_shapes(cfg), cfg, [("prefill", PREFILL), ("decode", DECODE)], f"bench-{size}"),
                     states=(kv_state("kv", cfg["num_hidden_layers"], cfg["num_key_value_heads"], cfg["head_dim"], dtype_bytes=4),),
                     source="exact: recipes/shapes.py qwen3_tensor_shapes", language_weight_sets=(f"bench-{size}",))
    return replace(RECIPE, name=f"bench-qwen3-{size}", description=f"bench: Qwen3 {size}", pin=pin, model_config=cfg,
                   components=lm_components(cfg, [("prefill", PREFILL), ("decode", DECODE)]), state_layout=lm_state_layout(cfg, CONTEXT),
                   cost=cost, synthesize=None)


def write_checkpoint(size: str, ckpt: Path) -> int:
    from recipes.shapes import qwen3_tensor_shapes
    from recipes.tiny_lm import synthesize

    cfg = config_for(size)
    if not (ckpt / "model.safetensors").is_file():
        synthesize(ckpt, cfg, seed=7)
    import math

    return sum(math.prod(s) for s in qwen3_tensor_shapes(cfg).values())


def _timed(fn):
    t = time.perf_counter()
    v = fn()
    return v, round(time.perf_counter() - t, 3)


def _after_build(bundle: Path, public_key: Path) -> dict:
    from manifests import manifest as mf
    from manifests.audit import Policy, audit_bundle
    from manifests.signing import verify_bundle

    size = sum(p.stat().st_size for p in bundle.rglob("*") if p.is_file())
    data = mf.load(bundle)
    _, before = _timed(lambda: (verify_bundle(bundle, public_key), mf.file_findings(bundle, data)))  # the table rehashed every file
    # now: verify.gate.check_bundle's integrity part (it then also refuses a bundle whose parity failed)
    _, now = _timed(lambda: mf.file_findings(bundle, data, verify_bundle(bundle, public_key)))
    audit, audit_s = _timed(lambda: audit_bundle(bundle, public_key, Policy()))
    gib = size / (1 << 30)
    return {"bundle_bytes": size,
            "gate_check_s": {"before (table rehashed)": before, "now (signed digests)": now, "now_s_per_gib": round(now / gib, 3)},
            "audit": {"wall_s": audit_s, "s_per_gib": round(audit_s / gib, 3), "ok": audit.ok, "failing": [c.id for c in audit.failing()]}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("work", type=Path)
    ap.add_argument("--sizes", default="0.1b,0.5b")
    ap.add_argument("--precision", default="fp32")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()

    import onnxruntime  # noqa: F401  (the fixed working set: interpreter and libraries, in the baseline)
    import torch  # noqa: F401

    from exporter.pipeline import build_one
    from exporter.targets import get_target
    from manifests.signing import dev_key

    keys = dev_key(notice=lambda m: None)
    sizes = a.sizes.split(",")
    if len(sizes) > 1:  # one fresh process per size: no size's memory in another's figures
        import subprocess
        import tempfile

        rows = []
        for size in sizes:
            with tempfile.NamedTemporaryFile(suffix=".json") as f:
                subprocess.run([sys.executable, __file__, str(a.work), "--sizes", size, "--precision", a.precision, "--json", f.name], check=True)
                rows += json.loads(Path(f.name).read_text())
        if a.json:
            a.json.write_text(json.dumps(rows, indent=1) + "\n")
        return
    rows = []
    for size in sizes:
        ckpt = a.work / f"ckpt-{size}"
        params = write_checkpoint(size, ckpt)
        weights = (ckpt / "model.safetensors").stat().st_size
        out = a.work / f"out-{size}-{a.precision}"
        r, s, base, total = sampled(out, lambda rep: build_one(recipe_for(size, ckpt), get_target("cpu"), a.precision, out_root=out,
                                                              checkpoint=ckpt, reporter=rep))
        top = {k: v for k, v in r.timings.items()}
        after = _after_build(r.bundle, keys.public)
        import shutil

        shutil.rmtree(r.bundle)
        t = time.perf_counter()
        again = build_one(recipe_for(size, ckpt), get_target("cpu"), a.precision, out_root=out, checkpoint=ckpt)
        rerun = time.perf_counter() - t
        rows.append({
            "size": size, "parameters": params, "weights_bytes": weights, "status": r.status,
            "parity": {"verdict": r.parity.get("verdict"), "failed": r.parity.get("failed")}, "total_s": round(total, 1),
            "baseline_rss_bytes": base,
            "stages": {name: {"wall_s": round(s.wall.get(name, top.get(name, 0.0)), 2), "peak_pss_bytes": s.peak.get(name),
                              "peak_rss_sum_bytes": s.peak_rss.get(name), "peak_by_process": s.by_process.get(name),
                              "peak_over_weights": round((s.peak.get(name, 0) - base) / weights, 2) if s.peak.get(name) else None}
                       for name in sorted(set(s.wall) | set(top))},
            "bundle_bytes": after.pop("bundle_bytes"), **after,
            "cache_hit_rerun": {"wall_s": round(rerun, 2), "status": again.status, "hits": again.cache, "over_first_run": round(rerun / total, 3)},
        })
        print(json.dumps(rows[-1], indent=1), flush=True)
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()

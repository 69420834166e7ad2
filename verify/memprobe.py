"""Measure what opening and running a bundle's graphs costs in resident memory, in a fresh process.

``python -m verify.memprobe SPEC.json`` prints one JSON document. The process
imports ONNX Runtime, records its resident set as the baseline, resets the
kernel's high-water mark (Linux ``/proc/self/clear_refs``), opens every graph on
the target's execution provider (no CPU fallback; an ExecuTorch program through
``executorch.runtime`` with its declared kernel libraries), allocates the runtime-owned
state buffers of the state layout, runs every graph once, and reports the peaks
above the baseline. On the x86 QNN simulator the numbers are host memory of the
simulator, not device memory; the manifest says so.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

_DTYPES = {"float32": "float32", "int32": "int32", "int64": "int64", "float16": "float16", "uint16": "uint16", "uint8": "uint8"}


def _status(field: str) -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _reset_peak() -> bool:
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def _opener(spec: dict):
    """Import the runtime (before the baseline: its import is not the graphs' cost) and return an opener."""
    from exporter.loaders import is_program, open_graph, register_kernels

    comps = {c["name"]: c for c in spec["components"]}
    if any(is_program(p) for p in spec["graphs"].values()):
        import executorch.runtime  # noqa: F401

        register_kernels(sorted({k for c in comps.values() for k in c.get("kernel_libraries", ())}))
    else:
        import onnxruntime  # noqa: F401
    libs = tuple(spec.get("custom_ops", ()))
    return lambda name, path: open_graph(path, comps[name], spec["target"], custom_ops=libs)[0]


def _state_buffers(spec: dict) -> list:
    """The runtime-owned state buffers of the state layout, allocated (a runtime holds them beside the sessions)."""
    import numpy as np

    return [np.zeros(b["shape"], dtype=spec.get("state_dtype", "float32")) for b in spec.get("state_buffers", [])]


def _zero_feeds(comp: dict) -> dict:
    import numpy as np

    return {t["name"]: np.zeros(t["shape"], dtype=_DTYPES[t["dtype"]]) for t in comp["inputs"]}


def probe(spec: dict) -> dict:
    from exporter.loaders import provider_of

    open_graph = _opener(spec)
    if spec.get("one_at_a_time"):
        return _probe_one_at_a_time(spec, open_graph)
    baseline = _status("VmRSS")
    reset = _reset_peak()
    sessions = {name: open_graph(name, path) for name, path in spec["graphs"].items()}
    after_open = _status("VmHWM")
    state = _state_buffers(spec)
    for comp in spec["components"]:
        sessions[comp["name"]].run(None, _zero_feeds(comp))
    after_run = _status("VmHWM")
    state_bytes = sum(a.nbytes for a in state)
    if baseline is None or after_open is None or not reset:
        return {"method": "unavailable (needs Linux /proc/self/status and clear_refs)", "baseline_rss_bytes": baseline}
    return {
        "method": "VmHWM above the post-import VmRSS, peak reset via /proc/self/clear_refs",
        "baseline_rss_bytes": baseline,
        "session_peak_bytes": after_open - baseline,
        "run_peak_bytes": after_run - baseline,
        "state_buffers_bytes": state_bytes,
        "provider": provider_of(next(iter(spec["graphs"].values())), spec["target"]),
    }


def _probe_one_at_a_time(spec: dict, open_graph) -> dict:
    """Each graph opened and run alone (the build's memory budget does not hold every graph at once), its peaks above
    the resident set before it; the bundle's figures are the sums, plus the state buffers once."""
    import gc

    from exporter.loaders import provider_of

    state = _state_buffers(spec)
    comps = {c["name"]: c for c in spec["components"]}
    per_graph = {}
    baseline = _status("VmRSS")
    for name, path in spec["graphs"].items():
        gc.collect()
        before = _status("VmRSS")
        if before is None or not _reset_peak():
            return {"method": "unavailable (needs Linux /proc/self/status and clear_refs)", "baseline_rss_bytes": baseline}
        session = open_graph(name, path)
        after_open = _status("VmHWM")
        session.run(None, _zero_feeds(comps[name]))
        after_run = _status("VmHWM")
        per_graph[name] = {"session_peak_bytes": after_open - before, "run_peak_bytes": after_run - before}
        del session
    state_bytes = sum(a.nbytes for a in state)
    return {
        "method": "one graph at a time (the build's memory budget does not hold every graph at once): VmHWM above the "
                  "VmRSS before each graph, peak reset via /proc/self/clear_refs; the bundle's figures are the sums",
        "baseline_rss_bytes": baseline,
        "session_peak_bytes": sum(g["session_peak_bytes"] for g in per_graph.values()),
        "run_peak_bytes": sum(g["run_peak_bytes"] for g in per_graph.values()) + state_bytes,
        "state_buffers_bytes": state_bytes,
        "per_graph": per_graph,
        "provider": provider_of(next(iter(spec["graphs"].values())), spec["target"]),
    }


_PROBE = "import json, sys; from pathlib import Path; from verify.memprobe import probe; print(json.dumps(probe(json.loads(Path(sys.argv[1]).read_text()))))"


def measure(graphs: dict[str, Path], components: list[dict], target: dict, state_layout: dict, timeout_s: int = 300,
            custom_ops: tuple[str, ...] = (), one_at_a_time: bool = False) -> dict:
    """Run the probe in a child process (a clean heap) and return its report; a failure is reported, not raised.
    `one_at_a_time`: open and run each graph alone and sum (where the build's budget cannot hold every graph)."""
    import tempfile

    spec = {
        "graphs": {k: str(v) for k, v in graphs.items()},
        "components": [{"name": c["name"], "inputs": c["inputs"], "outputs": c["outputs"],
                        "kernel_libraries": list(c.get("kernel_libraries", ()))} for c in components],
        "target": target,
        "state_buffers": state_layout.get("buffers", []),
        "state_dtype": state_layout.get("dtype", "float32"),
        "custom_ops": list(custom_ops),
        "one_at_a_time": one_at_a_time,
    }
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(spec, f)
    from exporter.child import run_python

    try:  # a fresh interpreter that dies with the build (a killed build leaves no probe running)
        p = run_python(_PROBE, f.name, timeout_s=timeout_s)
    except subprocess.TimeoutExpired:
        return {"method": "failed", "error": f"memory probe exceeded {timeout_s} s"}
    finally:
        Path(f.name).unlink(missing_ok=True)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    if p.returncode != 0 or not lines:
        return {"method": "failed", "error": (p.stderr.strip().splitlines() or ["no output"])[-1][:500]}
    return json.loads(lines[-1])


def compare(estimate: dict, measured: dict) -> dict:
    """Estimated vs measured, both without the safety margin; the difference is reported, never hidden."""
    if "run_peak_bytes" not in measured:
        return {"available": False, "reason": measured.get("error") or measured.get("method")}
    est = estimate["steady_bytes"]
    got = max(measured["run_peak_bytes"], measured["session_peak_bytes"])  # the state buffers are allocated before the run, so the run peak includes them
    return {
        "available": True,
        "estimated_steady_bytes": est,
        "estimated_loading_peak_bytes": estimate["loading_peak_bytes"] + estimate["runtime_overhead_bytes"],
        "measured_peak_bytes": got,
        "difference_bytes": got - est,
        "measured_over_estimated": round(got / est, 3) if est else None,
    }


if __name__ == "__main__":
    print(json.dumps(probe(json.loads(Path(sys.argv[1]).read_text()))))

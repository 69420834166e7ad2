"""Weight-shared QNN contexts through ONNX Runtime (``ep.share_ep_contexts``), and a probe of whether they load.

Compiling several QDQ graphs in one sharing group writes one context binary holding every
graph, with identical weights stored once; each EPContext model points at that binary.
The build compiles each group in a fresh interpreter (qnn_stages.compile_shared_groups). The
probe opens such a context in a child process (a crash in the QNN backend must not take the
caller down) and reports what happened; tests/test_weight_sharing.py checks with it that the
x86 simulator still cannot load one (exporter/htp_sharing.py).
"""

from __future__ import annotations

from pathlib import Path


def compile_shared(sources: list[Path], out_dir: Path, graph_names: list[str], target: dict) -> list[Path]:
    """One sharing group, in this process: every source compiled into an EPContext model `out_dir/<name>.onnx`, all of
    them over the single context binary the last compile writes (identical weights stored once). Raises where a node
    does not lower to the HTP (no CPU fallback)."""
    from exporter.runtime import open_session

    out = []
    for i, (src, name) in enumerate(zip(sources, graph_names)):
        ctx = out_dir / f"{name}.onnx"
        _, placement = open_session(src, target, context_out=ctx, share="last" if i == len(sources) - 1 else "more")
        off = placement.nodes_not_on(target["execution_provider"])
        if off:
            raise RuntimeError(f"{name}: nodes not on {target['execution_provider']}: {off[:10]}")
        out.append(ctx)
    return out


_LOADER = """
import sys, numpy as np, onnxruntime as ort, json
from exporter.runtime import qnn_devices, qnn_provider_options
acc = json.loads(sys.argv[1])
devices, qnn = qnn_devices(ort)
for path in sys.argv[2:]:
    so = ort.SessionOptions(); so.log_severity_level = 3
    so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    so.add_session_config_entry("ep.share_ep_contexts", "1")
    so.add_provider_for_devices(devices, qnn_provider_options(acc, qnn))
    s = ort.InferenceSession(path, sess_options=so)
    feeds = {i.name: np.zeros(i.shape, np.int32 if "int32" in i.type else np.float32) for i in s.get_inputs()}
    s.run(None, feeds)
print("LOADED", len(sys.argv) - 2)
"""


def probe_load(models: list[Path], accelerator: dict, timeout_s: int = 120) -> dict:
    """Open and run every EPContext model of a sharing group in a child process."""
    import json

    from exporter.child import run_python

    p = run_python(_LOADER, json.dumps(accelerator), *map(str, models), timeout_s=timeout_s)
    ok = p.returncode == 0 and f"LOADED {len(models)}" in p.stdout
    tail = (p.stderr.strip().splitlines() or [""])[-1][:300]
    return {"loaded": ok, "returncode": p.returncode, "detail": "" if ok else (f"signal {-p.returncode}" if p.returncode < 0 else tail)}

"""A replaying stand-in for AI Hub: devices from the target registry, jobs run on the local HTP simulator.

Everything it produces is labelled ``simulated``: a record made with it is never a device result.
Its jobs are real work, not canned answers: a compile job checks that the context binary's Hexagon
version matches the device's and that the QAIRT version is pinned; an inference job runs the
uploaded graph through onnxruntime-qnn's x86 HTP simulator with CPU fallback disabled. The job
table lives in a directory, so a second instance (a resumed run) sees the first one's jobs, and
counts submissions so tests can prove a resume resubmits nothing.

Scenarios (for tests and dry runs): ``hang`` (jobs never finish: the caller's time limit fires),
``perturb`` (add this offset to every device output: a device-side numerical failure).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from exporter.hub.client import HubDevice, InferenceResult, JobState


def registry_devices() -> list[HubDevice]:
    """One device per registry target that names an AI Hub device, with AI Hub's attribute names."""
    from exporter.targets import all_targets

    out = {}
    for t in all_targets():
        if not (t.hub_device and t.hub_chipset):
            continue
        attrs = [f"chipset:{t.hub_chipset}", f"os:{t.os}", "vendor:qualcomm", "framework:qnn", "framework:onnx"]
        if t.accelerator.htp_arch:
            attrs.append(f"hexagon:v{t.accelerator.htp_arch}")
        if t.accelerator.soc_model:
            attrs.append(f"soc-model:{t.accelerator.soc_model}")
        out[t.hub_device] = HubDevice(t.hub_device, "", tuple(sorted(attrs)))
    return sorted(out.values(), key=lambda d: d.name)


class ReplayHub:
    simulated = True
    source = "replay: jobs run on the local x86 HTP simulator (onnxruntime-qnn); not a device"

    def __init__(self, store: Path, devices: list[HubDevice] | None = None, hang: bool = False, perturb: float = 0.0):
        self.store = Path(store)
        self.store.mkdir(parents=True, exist_ok=True)
        self._devices = devices if devices is not None else registry_devices()
        self.hang, self.perturb = hang, perturb

    # -- persistence --------------------------------------------------------------------------------
    def _table(self) -> dict:
        p = self.store / "table.json"
        return json.loads(p.read_text()) if p.is_file() else {"models": {}, "jobs": {}, "submissions": {"upload": 0, "compile": 0, "inference": 0}}

    def _save(self, table: dict) -> None:
        from exporter.hub.records import write_json_atomic

        write_json_atomic(self.store / "table.json", table)

    def submissions(self) -> dict:
        return self._table()["submissions"]

    def _new(self, table: dict, kind: str, prefix: str) -> str:
        table["submissions"][kind] += 1
        return f"{prefix}{sum(table['submissions'].values()):04d}"

    # -- the HubClient interface ---------------------------------------------------------------------
    def check_reachable(self, timeout_s: float) -> None:
        return None

    def devices(self, chipset: str | None = None) -> list[HubDevice]:
        return [d for d in self._devices if chipset is None or d.chipset == chipset]

    def upload_model(self, path: Path, name: str) -> str:
        t = self._table()
        mid = self._new(t, "upload", "m")
        t["models"][mid] = {"path": str(Path(path).resolve()), "name": name}
        self._save(t)
        return mid

    def submit_compile(self, model_id: str, device: HubDevice, options: str, name: str) -> str:
        t = self._table()
        jid = self._new(t, "compile", "jc")
        t["jobs"][jid] = {"kind": "compile", "model": model_id, "device": device.to_json(), "options": options, "created": time.time()}
        self._save(t)
        return jid

    def compiled_model(self, job_id: str) -> str:
        t = self._table()
        job = t["jobs"][job_id]
        tm = f"t{job_id}"
        t["models"].setdefault(tm, {**t["models"][job["model"]], "compiled_by": job_id})
        self._save(t)
        return tm

    def submit_inference(self, model_id: str, device: HubDevice, inputs: dict[str, list], options: str, name: str) -> str:
        import numpy as np

        t = self._table()
        jid = self._new(t, "inference", "ji")
        arrays = {f"{k}__{i}": np.asarray(v) for k, vals in inputs.items() for i, v in enumerate(vals)}
        np.savez(self.store / f"{jid}-inputs.npz", **arrays)
        t["jobs"][jid] = {"kind": "inference", "model": model_id, "device": device.to_json(), "options": options,
                          "inputs": {k: len(v) for k, v in inputs.items()}, "created": time.time()}
        self._save(t)
        return jid

    def status(self, job_id: str) -> JobState:
        job = self._table()["jobs"].get(job_id)
        if job is None:
            return JobState("failed", f"job {job_id} does not exist")
        if self.hang:
            return JobState("running")
        if job["kind"] == "compile":
            problem = self._compile_problem(job)
            return JobState("failed", problem) if problem else JobState("success")
        return JobState("success")

    def inference_result(self, job_id: str) -> InferenceResult:
        import numpy as np

        from exporter.runtime import open_session
        from exporter.versions import qairt_version

        t = self._table()
        job = t["jobs"][job_id]
        model = Path(t["models"][job["model"]]["path"])
        manifest = json.loads((model.parent / "manifest.json").read_text())
        sess, placement = open_session(model, manifest["target"])
        names = [o.name for o in sess.get_outputs()]
        with np.load(self.store / f"{job_id}-inputs.npz") as z:
            n = next(iter(job["inputs"].values()))
            feeds = [{k: z[f"{k}__{i}"] for k in job["inputs"]} for i in range(n)]
        outputs, times = {k: [] for k in names}, []
        for f in feeds:
            t0 = time.perf_counter()
            vals = sess.run(names, f)
            times.append(time.perf_counter() - t0)
            for k, v in zip(names, vals):
                outputs[k].append(v + np.asarray(self.perturb, dtype=v.dtype) if self.perturb else v)
        pl = placement.to_json()
        profile = {"inference_time_us": round(sorted(times)[len(times) // 2] * 1e6, 1), "peak_memory_bytes": None,
                   "compute_units": pl["by_provider"], "layers": pl["nodes_total"],
                   "note": "simulated: wall time of the x86 HTP simulator and ONNX Runtime's node placement, not device latency or memory"}
        return InferenceResult(outputs, profile, {"qairt": qairt_version(), "runtime": "onnxruntime-qnn x86 HTP simulator"})

    # -- the replayed compile check --------------------------------------------------------------------
    def _compile_problem(self, job: dict) -> str | None:
        t = self._table()
        model = Path(t["models"][job["model"]]["path"])
        manifest = json.loads((model.parent / "manifest.json").read_text())
        arch = manifest["target"]["accelerator"].get("htp_arch")
        hexagon = HubDevice.from_json(job["device"]).hexagon
        if "--qairt_version" not in job["options"]:
            return "no --qairt_version: the service would pick its default QAIRT, not the bundle's"
        from manifests.manifest import shared_context_of

        shared = shared_context_of(manifest, model.stem)
        if shared is not None:
            return (f"replay cannot run {model.name}: it ships in the weight-shared context {shared['binary']}, which the x86 HTP "
                    "simulator this replay runs on cannot load; only a real device job validates a shared bundle")
        if arch and hexagon != f"v{arch}":
            return (f"the context binary was compiled for Hexagon v{arch}; device {job['device']['name']} is {hexagon}: "
                    "a context binary runs only on the HTP version it was built for (rebuild for that target)")
        return None

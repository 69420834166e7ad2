"""`edge-export hub validate`: a verified bundle on an AI Hub device, compared with the torch reference.

Flow, per component (graph) of a QNN bundle:

1. the bundle passes the gate first (signature, digests, target, verdict): only trusted bundles go out;
2. the device is picked by the chipset attribute of the bundle's target (names drift between AI Hub
   releases), preferring the Hexagon version the context was compiled for, or named with --device;
3. upload the graph (the EPContext ONNX with its context binary); a compile job wraps the precompiled
   context for the device (``--target_runtime precompiled_qnn_onnx``), pinned to the bundle's QAIRT
   version; the graph itself is not recompiled;
4. an inference job with profiling runs the held-out inputs (the bundle's evaluation prompts, driven
   through the torch reference) on the device's NPU;
5. device outputs are compared with the reference using the bundle's final-stage thresholds; the
   profile gives latency, peak memory and per-layer compute units.

Every job id is written to ``BUNDLE.hub-state.json`` the moment it exists; a rerun resumes from it
without resubmitting. Waits are bounded (``timeout_s``); a timeout leaves the state for the next run.
The result is ``BUNDLE.device-validation.json``, signed and bound to the manifest digest; a replayed
(simulated) run says so in ``simulated`` and never counts as a device result.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from dataclasses import dataclass
from pathlib import Path

from exporter.errors import UnknownNameError, UsageError
from exporter.hub.client import HubClient, HubDevice, HubJobFailed, HubTimeout
from exporter.hub.records import SCHEMA, manifest_digest, record_path, sign_record, state_path, write_json_atomic


@dataclass(frozen=True)
class ValidateOptions:
    public_key: Path
    private_key: Path
    device: str | None = None
    chipset: str | None = None
    samples: int = 6
    timeout_s: float = 3600.0
    poll_s: float = 15.0
    checkpoint: Path | None = None
    cache_root: Path | None = None


def qairt_option(manifest: dict) -> str:
    v = manifest["tools"].get("qairt")
    if not v:
        raise UsageError("the bundle records no QAIRT version", "rebuild it with onnxruntime-qnn installed")
    return ".".join(v.split(".")[:2])


def job_options(manifest: dict) -> tuple[str, str]:
    """(compile options, inference options) derived from the bundle's format and pinned QAIRT (its backend's)."""
    from exporter import backends

    fmt = manifest["bundle"]["format"]
    backend = backends.find(fmt)
    opts = backend.hub_options(qairt_option(manifest)) if backend else None
    if opts is None:
        able = [n for n in backends.names() if backends.get(n).hub_options("x") is not None]
        raise UsageError(f"AI Hub validation takes {' or '.join(able)} bundles; this one is {fmt}", "validate a qnn-context bundle of the same recipe")
    return opts


def pick_device(client: HubClient, target: dict, name: str | None, chipset: str | None) -> HubDevice:
    if name:
        every = client.devices()
        hit = [d for d in every if d.name == name]
        if not hit:
            raise UnknownNameError("AI Hub device", name, sorted({d.name for d in every}))
        return hit[0]
    chipset = chipset or target.get("hub_chipset")
    if not chipset:
        raise UsageError(f"target {target['name']} has no AI Hub chipset", "pass --chipset or --device (see `edge-export hub devices`)")
    devices = client.devices(chipset=chipset)
    if not devices:
        raise UsageError(f"AI Hub lists no device with chipset:{chipset}", "see `edge-export hub devices`; pass --device NAME")
    want = f"v{target['accelerator']['htp_arch']}" if target["accelerator"].get("htp_arch") else None
    return sorted(devices, key=lambda d: (d.hexagon != want, d.name))[0]


class _State:
    """The resumable job state: rewritten atomically after every new id."""

    def __init__(self, bundle: Path, digest: str):
        self.path = state_path(bundle)
        data = json.loads(self.path.read_text()) if self.path.is_file() else {}
        self.resumed = data.get("manifest_sha256") == digest and bool(data.get("jobs"))
        self.data = data if self.resumed else {"manifest_sha256": digest, "jobs": {}}

    def save(self) -> None:
        write_json_atomic(self.path, self.data)

    def jobs(self, comp: str) -> dict:
        return self.data["jobs"].setdefault(comp, {})


def _wait(client: HubClient, job_id: str, what: str, deadline: float, poll_s: float, state: _State):
    while True:
        st = client.status(job_id)
        if st.finished:
            return st
        if time.monotonic() >= deadline:
            raise HubTimeout(f"{what} (job {job_id}) is still {st.state} at the time limit",
                             f"job ids are saved in {state.path}; rerun the same command to resume without resubmitting")
        time.sleep(min(poll_s, max(0.0, deadline - time.monotonic())))


def _compare(samples, outputs: dict[str, list], thresholds: dict) -> dict:
    import numpy as np

    from verify.metrics import Accumulator
    from verify.thresholds import output_checks

    result = {}
    agree = total = 0
    for name in samples[0].outputs:
        got = outputs.get(name)
        if got is None or len(got) != len(samples):
            result[name] = {"calls": 0, "error": f"device returned {0 if got is None else len(got)} of {len(samples)} outputs"}
            continue
        acc = Accumulator()
        for s, dev in zip(samples, got):
            ref, dev = s.outputs[name], np.asarray(dev).reshape(s.outputs[name].shape)
            n = s.n_valid
            ref, dev = (ref[:, :, :n], dev[:, :, :n]) if ref.ndim == 4 else (ref[:, :n], dev[:, :n])
            acc.add(ref, dev)
            if name == "logits":
                agree += int(np.sum(ref.argmax(-1) == dev.argmax(-1)))
                total += int(np.prod(ref.shape[:-1]))
        result[name] = acc.to_json()
    failures = []
    for name, m in result.items():
        if not m.get("calls"):
            failures.append({"output": name, "metric": "calls", "value": 0, "threshold": len(samples)})
            continue
        failures += [{"output": name, "metric": c["metric"], "value": c["value"], "threshold": c["threshold"]}
                     for c in output_checks(m, thresholds) if not c["ok"]]
    top1 = agree / total if total else None
    if top1 is not None and top1 < thresholds["min_token_agreement"]:
        failures.append({"output": "logits", "metric": "top1_agreement", "value": top1, "threshold": thresholds["min_token_agreement"]})
    return {"outputs": result, "top1_agreement": top1, "failures": failures, "verdict": "fail" if failures else "pass"}


def _component_path(bundle: Path, comp: dict) -> Path:
    from manifests import manifest as mf

    return mf.safe_relpath(bundle, comp["entry"])


def validate(bundle: Path, client: HubClient, opts: ValidateOptions, reporter=None) -> dict:
    """Run (or resume) the validation; write and return the signed record. Raises HubJobFailed (after
    writing the record) when the device run fails, HubTimeout when a job outlives the time limit."""
    from exporter.build import Reporter
    from exporter.pipeline import context_for_bundle
    from exporter.versions import qairt_version
    from verify import gate

    reporter = reporter or Reporter()
    bundle = Path(bundle)
    opened = gate.check_bundle(bundle, opts.public_key, json.loads((bundle / "manifest.json").read_text())["bundle"]["target"])
    manifest = opened.manifest
    digest = manifest_digest(bundle)
    compile_opts, infer_opts = job_options(manifest)
    client.check_reachable(timeout_s=5.0)
    state = _State(bundle, digest)
    if "device" in state.data:
        device = HubDevice.from_json(state.data["device"])
    else:
        device = pick_device(client, manifest["target"], opts.device, opts.chipset)
        state.data["device"] = device.to_json()
        state.save()
    with reporter.stage("reference", f"held-out inputs and torch outputs ({opts.samples} per graph)"):
        from exporter.hub.reference import reference_samples

        build = context_for_bundle(manifest, opts.checkpoint, opts.cache_root or bundle.parent / ".cache", reporter)
        samples = reference_samples(build, opts.samples)
    final_stage = manifest["parity"]["stages"][-1]["stage"]
    thresholds = manifest["parity"]["thresholds"][final_stage]
    deadline = time.monotonic() + opts.timeout_s
    comps = {c["name"]: c for c in manifest["components"]}
    results, failure = {}, None
    for name, comp in comps.items():
        js = state.jobs(name)
        label = f"{manifest['bundle']['recipe']}/{manifest['bundle']['target']}/{comp['graph_name']}"
        if "model" not in js:
            js["model"] = client.upload_model(_component_path(bundle, comp), label)
            state.save()
        if "compile" not in js:
            js["compile"] = client.submit_compile(js["model"], device, compile_opts, label)
            state.save()
        with reporter.stage("hub", f"compile {label} on {device.name}"):
            st = _wait(client, js["compile"], f"compile of {comp['graph_name']}", deadline, opts.poll_s, state)
        if st.state != "success":
            failure = {"stage": "compile", "component": name, "job": js["compile"], "message": st.message or "compile job failed"}
            break
        if "target_model" not in js:
            js["target_model"] = client.compiled_model(js["compile"])
            state.save()
        if "inference" not in js:
            inputs = {t["name"]: [s.feeds[t["name"]] for s in samples[name]] for t in comp["inputs"]}
            js["inference"] = client.submit_inference(js["target_model"], device, inputs, infer_opts, label)
            state.save()
    if failure is None:
        for name, comp in comps.items():
            js = state.jobs(name)
            with reporter.stage("hub", f"inference + profile of {comp['graph_name']} on {device.name}"):
                st = _wait(client, js["inference"], f"inference of {comp['graph_name']}", deadline, opts.poll_s, state)
            if st.state != "success":
                failure = {"stage": "inference", "component": name, "job": js["inference"], "message": st.message or "inference job failed"}
                break
            res = client.inference_result(js["inference"])
            cmp = _compare(samples[name], res.outputs, thresholds)
            results[name] = {**cmp, "samples": len(samples[name]), "profile": res.profile, "runtime": res.runtime}
    verdict = "fail" if failure or any(r["verdict"] != "pass" for r in results.values()) else "pass"
    record = {
        "schema": SCHEMA,
        "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "simulated": bool(client.simulated),
        "source": client.source,
        "bundle": {"path": bundle.name, "manifest_sha256": digest, **{k: manifest["bundle"][k] for k in ("recipe", "target", "precision", "format")}},
        "device": device.to_json(),
        "expected": {"htp_arch": manifest["target"]["accelerator"].get("htp_arch"), "soc_model": manifest["target"]["accelerator"].get("soc_model"),
                     "hub_chipset": manifest["target"].get("hub_chipset")},
        "qairt": {"bundle": manifest["tools"].get("qairt"), "requested": qairt_option(manifest),
                  "hub": sorted({r["runtime"].get("qairt") for r in results.values() if r["runtime"].get("qairt")}),
                  "validator_host": qairt_version()},
        "options": {"compile": compile_opts, "inference": infer_opts},
        "jobs": state.data["jobs"],
        "resumed": state.resumed,
        "thresholds": thresholds,
        "threshold_stage": final_stage,
        "components": results,
        "failure": failure,
        "verdict": verdict,
    }
    record = sign_record(record, opts.private_key)
    write_json_atomic(record_path(bundle), record)
    state.path.unlink(missing_ok=True)  # finished: the record holds every job id
    if verdict != "pass":
        what = (f"{failure['stage']} job {failure['job']} of {failure['component']} failed: {failure['message']}" if failure else
                "; ".join(f"{n}: {f['output']} {f['metric']} = {f['value']:.4g} (threshold {f['threshold']})"
                          for n, r in results.items() for f in r["failures"][:2]))
        raise HubJobFailed(f"{bundle} did not validate on {device.name}{' (simulated)' if client.simulated else ''}: {what}; "
                           f"recorded in {record_path(bundle)}", "the bundle is not qualified on that device; see the record")
    return record

"""The real AI Hub client: ``qai_hub`` (pinned in the ``[hub]`` extra) behind the HubClient interface.

The token comes from qai_hub's own configuration (``qai-hub configure``, ``~/.qai_hub/client.ini``
or the profile named by ``QAIHUB_CLIENT_INI``) or from ``QAI_HUB_API_TOKEN``; it is handed to
``qai_hub.ClientConfig`` and never printed, logged or written anywhere by edge-export.

Reachability is checked first with a plain TCP connection and a short timeout: the stock client
retries for about 45 s when offline. Calls are retried a bounded number of times on connection
errors only; a rejected request fails at once.
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path
from urllib.parse import urlparse

from exporter.hub.client import HubDevice, HubUnavailable, InferenceResult, JobState

TOKEN_ENV = "QAI_HUB_API_TOKEN"
URL_ENV = "QAI_HUB_API_URL"
FIX_TOKEN = f"run `qai-hub configure --api_token <token>` (token from your AI Hub account settings) or set {TOKEN_ENV}"


def _qai_hub():
    try:
        import qai_hub
    except ImportError:
        raise HubUnavailable("the qai_hub package is not installed", "pip install -e '.[hub]'") from None
    return qai_hub


def configured_token_source(profile: str | None = None) -> str | None:
    """Where a token would come from (never the token itself), or None."""
    if os.environ.get(TOKEN_ENV):
        return f"environment variable {TOKEN_ENV}"
    from qai_hub import api_utils

    path = Path(api_utils.get_config_path(profile))
    return f"qai_hub configuration {path}" if path.is_file() else None


class QaiHubClient:
    simulated = False
    source = "Qualcomm AI Hub"

    def __init__(self, profile: str | None = None, retries: int = 3, backoff_s: float = 2.0):
        hub = _qai_hub()
        self._hub_mod = hub
        self.retries, self.backoff_s = retries, backoff_s
        token = os.environ.get(TOKEN_ENV)
        if token:
            cfg = hub.ClientConfig(api_token=token, api_url=os.environ.get(URL_ENV, "https://workbench.aihub.qualcomm.com"))
            self.api_url = cfg.api_url
            self._client = hub.Client(config=cfg)
        else:
            if configured_token_source(profile) is None:
                raise HubUnavailable("no AI Hub token is configured", FIX_TOKEN)
            from qai_hub import api_utils

            cfg = api_utils.load_api_config_from_profile(profile or "client")
            self.api_url = cfg.api_url
            self._client = hub.Client(config=cfg)

    def _call(self, fn, *args, **kwargs):
        import requests

        for attempt in range(self.retries):
            try:
                return fn(*args, **kwargs)
            except (requests.ConnectionError, requests.Timeout):
                if attempt == self.retries - 1:
                    raise HubUnavailable(f"AI Hub did not answer after {self.retries} attempts", "check the network and rerun; job ids already saved are reused")
                time.sleep(self.backoff_s * (attempt + 1))

    def check_reachable(self, timeout_s: float) -> None:
        u = urlparse(self.api_url)
        host, port = u.hostname, u.port or (443 if u.scheme == "https" else 80)
        try:
            socket.create_connection((host, port), timeout=timeout_s).close()
        except OSError as e:
            raise HubUnavailable(f"cannot reach AI Hub at {host}:{port} within {timeout_s:g} s ({e})",
                                 "AI Hub validation needs network access to the service; nothing was submitted") from None

    def _device(self, d: HubDevice):
        return self._hub_mod.Device(name=d.name, os=d.os)

    def devices(self, chipset: str | None = None) -> list[HubDevice]:
        found = self._call(self._client.get_devices, attributes=f"chipset:{chipset}" if chipset else None)
        return [HubDevice(d.name, d.os, tuple(d.attributes if isinstance(d.attributes, list) else [d.attributes])) for d in found]

    def upload_model(self, path: Path, name: str) -> str:
        """An ONNX graph with files beside it (an EPContext graph's context binaries, external weights) travels as an
        ``.onnx`` directory holding them."""
        import shutil
        import tempfile

        from manifests.onnx_refs import named_files

        path = Path(path)
        if path.suffix == ".onnx":
            # the files the graph names: its context binary (a sharing group's one binary), or its external weights
            bins = [path.parent / n for n in named_files(path)]
            if bins:
                tmp = Path(tempfile.mkdtemp(prefix="edge-export-hub-")) / f"{path.stem}.onnx"
                tmp.mkdir()
                shutil.copy2(path, tmp / "model.onnx")
                for b in bins:
                    shutil.copy2(b, tmp / b.name)
                path = tmp
        return self._call(self._client.upload_model, str(path), name=name).model_id

    def submit_compile(self, model_id: str, device: HubDevice, options: str, name: str) -> str:
        model = self._call(self._client.get_model, model_id)
        return self._call(self._client.submit_compile_job, model, self._device(device), name=name, options=options).job_id

    def compiled_model(self, job_id: str) -> str:
        return self._call(self._client.get_job, job_id).get_target_model().model_id

    def submit_inference(self, model_id: str, device: HubDevice, inputs: dict[str, list], options: str, name: str) -> str:
        model = self._call(self._client.get_model, model_id)
        return self._call(self._client.submit_inference_job, model, self._device(device), inputs=inputs, name=name,
                          options=options, profile=True).job_id

    def status(self, job_id: str) -> JobState:
        st = self._call(self._client.get_job, job_id).get_status()
        if st.success:
            return JobState("success", st.message)
        if st.failure:
            return JobState("failed", st.message)
        return JobState("running" if st.running else "pending", st.message)

    def inference_result(self, job_id: str) -> InferenceResult:
        job = self._call(self._client.get_job, job_id)
        outputs = self._call(job.download_output_data) or {}
        prof = self._call(job.download_profile) or {}
        summary = prof.get("execution_summary", {})
        units: dict[str, int] = {}
        for layer in prof.get("execution_detail", []):
            u = layer.get("compute_unit", "unknown")
            units[u] = units.get(u, 0) + 1
        runtime = prof.get("runtime_config", {}) or {}
        return InferenceResult(
            {k: list(v) for k, v in outputs.items()},
            {"inference_time_us": summary.get("estimated_inference_time"), "peak_memory_bytes": summary.get("estimated_inference_peak_memory"),
             "compute_units": units, "layers": sum(units.values())},
            {"qairt": runtime.get("qnn_version") or runtime.get("qairt_version"), "runtime": runtime.get("runtime")},
        )

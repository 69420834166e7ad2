"""The small interface edge-export needs from Qualcomm AI Hub, and the value types it exchanges.

Two implementations: ``exporter.hub.qai_hub_client.QaiHubClient`` (the real service, through the
``qai_hub`` package) and ``exporter.hub.replay.ReplayHub`` (a recorded device list and jobs that
run the artifact on the local HTP simulator; everything it returns is labelled simulated).
Validation code sees only this interface, so no test patches ``qai_hub``'s module functions.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from exporter.errors import EdgeExportError, MissingPrerequisite


class HubUnavailable(MissingPrerequisite):
    """No token, no network, or no qai_hub package: validation cannot start (exit 6)."""


class HubJobFailed(EdgeExportError):
    exit_code = 3  # the artifact did not compile or run on the device: it is not qualified there


class HubTimeout(EdgeExportError):
    exit_code = 8  # still running: the job ids are saved, rerunning resumes


@dataclass(frozen=True)
class HubDevice:
    name: str
    os: str
    attributes: tuple[str, ...] = ()

    def attribute(self, key: str) -> str | None:
        prefix = key + ":"
        return next((a[len(prefix):] for a in self.attributes if a.startswith(prefix)), None)

    @property
    def chipset(self) -> str | None:
        return self.attribute("chipset")

    @property
    def hexagon(self) -> str | None:
        return self.attribute("hexagon")

    @property
    def soc_model(self) -> str | None:
        return self.attribute("soc-model")

    def to_json(self) -> dict:
        return {"name": self.name, "os": self.os, "attributes": list(self.attributes), "chipset": self.chipset,
                "hexagon": self.hexagon, "soc_model": self.soc_model}

    @staticmethod
    def from_json(d: dict) -> "HubDevice":
        return HubDevice(d["name"], d.get("os", ""), tuple(d.get("attributes", ())))


@dataclass(frozen=True)
class JobState:
    """A job's state, normalised: ``pending``, ``running``, ``success`` or ``failed``."""

    state: str
    message: str | None = None

    @property
    def finished(self) -> bool:
        return self.state in ("success", "failed")


@dataclass(frozen=True)
class InferenceResult:
    outputs: dict[str, list]  # output name -> one array per input sample, in order
    profile: dict = field(default_factory=dict)  # latency, peak memory, per-layer compute units
    runtime: dict = field(default_factory=dict)  # versions on the hub side (QAIRT, runtime)


class HubClient(Protocol):
    """What validation asks of AI Hub. ``simulated`` is True for anything that is not a real device."""

    simulated: bool
    source: str  # where results come from, recorded verbatim ("Qualcomm AI Hub", "replay: local HTP simulator")

    def check_reachable(self, timeout_s: float) -> None:
        """Fail fast (HubUnavailable) without a token or a network path to the service."""

    def devices(self, chipset: str | None = None) -> list[HubDevice]: ...

    def upload_model(self, path: Path, name: str) -> str:
        """Upload a model (a file or an .onnx directory with its context binary); returns its id."""

    def submit_compile(self, model_id: str, device: HubDevice, options: str, name: str) -> str:
        """Returns the compile job id."""

    def compiled_model(self, job_id: str) -> str:
        """The target model id a successful compile job produced."""

    def submit_inference(self, model_id: str, device: HubDevice, inputs: dict[str, list], options: str, name: str) -> str:
        """Inference with profiling on ``device``; returns the job id."""

    def status(self, job_id: str) -> JobState: ...

    def inference_result(self, job_id: str) -> InferenceResult: ...

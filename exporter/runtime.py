"""ONNX Runtime sessions on a target's execution provider, with placement recorded.

Torch-free: the exporter's compile and verify stages and the load gate all open
sessions through here, so "which EP, with which options, CPU fallback or not"
is decided in one place.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from exporter.errors import MissingPrerequisite, PlanRejected


@dataclass(frozen=True)
class Placement:
    """Which nodes each execution provider took, from ORT's own assignment record."""

    by_provider: dict[str, list[str]]  # provider -> node names (op types for EPContext)

    def nodes_not_on(self, provider: str) -> list[str]:
        return [n for p, nodes in self.by_provider.items() if p != provider for n in nodes]

    def to_json(self) -> dict:
        total = sum(len(v) for v in self.by_provider.values())
        return {
            "nodes_total": total,
            "by_provider": {p: len(v) for p, v in self.by_provider.items()},
            "off_accelerator": {p: v[:50] for p, v in self.by_provider.items()},
        }


def _ort():
    try:
        import onnxruntime
    except ImportError as e:  # pragma: no cover - depends on install
        raise MissingPrerequisite(
            "onnxruntime is not installed", "pip install 'edge-export[runtime]'"
        ) from e
    return onnxruntime


def available_providers() -> set[str]:
    """The execution providers ONNX Runtime offers on this host (plugin EPs such as onnxruntime-qnn included); empty
    without onnxruntime. Cheap: nothing is imported that is not installed."""
    import importlib.util

    def has(name: str) -> bool:
        try:
            return importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            return False

    if not has("onnxruntime"):
        return set()
    import onnxruntime

    names = set(onnxruntime.get_available_providers())
    if has("onnxruntime_qnn"):  # plugin EPs register devices rather than providers
        names.add("QNNExecutionProvider")
    return names


def qnn_devices(ort):
    """Register the onnxruntime-qnn plugin EP (once per process) and return its devices."""
    try:
        import onnxruntime_qnn
    except ImportError as e:
        raise MissingPrerequisite(
            "onnxruntime-qnn (the QNN execution provider with its QAIRT libraries) is not installed",
            "pip install 'edge-export[qnn]'",
        ) from e
    devices = [d for d in ort.get_ep_devices() if d.ep_name == onnxruntime_qnn.EP_NAME]
    if not devices:
        ort.register_execution_provider_library(onnxruntime_qnn.EP_NAME, onnxruntime_qnn.get_library_path())
        devices = [d for d in ort.get_ep_devices() if d.ep_name == onnxruntime_qnn.EP_NAME]
    if not devices:
        raise MissingPrerequisite("the QNN execution provider registered no device", "reinstall onnxruntime-qnn")
    return devices, onnxruntime_qnn


def qnn_provider_options(accelerator: dict, qnn) -> dict[str, str]:
    opts = {"backend_path": qnn.get_qnn_htp_path(), "htp_arch": str(accelerator["htp_arch"])}
    if accelerator.get("soc_model") is not None:
        opts["soc_model"] = str(accelerator["soc_model"])
    return opts


def open_session(
    model_path: str | Path,
    target: dict,
    *,
    allow_fallback: bool = False,
    context_out: str | Path | None = None,
    threads: int = 1,
    custom_ops: tuple[str, ...] = (),
    provider_options: dict | None = None,
    share: str | None = None,
):
    """Create a session for `target` (a Target.to_json() dict); returns (session, placement).

    For an accelerator target the CPU fallback is disabled unless `allow_fallback`
    (used only to name the nodes that would not be placed); `context_out` makes the
    QNN EP write an EPContext model plus its context binary there. `custom_ops` are
    custom-op libraries to register (Quark's, for BF16 QDQ models); `provider_options`
    are the EP's own (the Vitis AI EP's from its bundle). `share` ("more" | "last") puts a compile in the process's
    weight-sharing group (`ep.share_ep_contexts`); "last" writes the group's one context binary.
    """
    ort = _ort()
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.log_severity_level = 3
    so.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
    for lib in custom_ops:
        so.register_custom_ops_library(str(lib))
    provider = target["execution_provider"]
    if provider == "CPUExecutionProvider":
        if context_out is not None:
            raise PlanRejected(f"target {target['name']} has no compiled-context format")
        sess = ort.InferenceSession(str(model_path), sess_options=so, providers=["CPUExecutionProvider"])
    elif provider == "QNNExecutionProvider":
        devices, qnn = qnn_devices(ort)
        if not allow_fallback:
            so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
        if context_out is not None:
            so.add_session_config_entry("ep.context_enable", "1")
            so.add_session_config_entry("ep.context_file_path", str(context_out))
            so.add_session_config_entry("ep.context_embed_mode", "0")
            if share is not None:
                so.add_session_config_entry("ep.share_ep_contexts", "1")
                if share == "last":
                    so.add_session_config_entry("ep.stop_share_ep_contexts", "1")
        so.add_provider_for_devices(devices, qnn_provider_options(target["accelerator"], qnn))
        sess = ort.InferenceSession(str(model_path), sess_options=so)
    elif provider in ort.get_available_providers():
        # a provider-library EP (Vitis AI, DirectML, CUDA): every node on it, no CPU fallback
        if context_out is not None:
            raise PlanRejected(f"target {target['name']} has no compiled-context format")
        if not allow_fallback:
            so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
        sess = ort.InferenceSession(str(model_path), sess_options=so, providers=[provider], provider_options=[dict(provider_options or {})])
    else:
        raise MissingPrerequisite(
            f"execution provider {provider} is not available on this host",
            "run on a host that has it, or build for another target",
        )
    return sess, placement_of(sess)


def placement_of(sess) -> Placement:
    by: dict[str, list[str]] = {}
    for sub in sess.get_provider_graph_assignment_info() or []:
        names = [n.name or n.op_type for n in sub.get_nodes()]
        by.setdefault(sub.ep_name, []).extend(names)
    return Placement(by)

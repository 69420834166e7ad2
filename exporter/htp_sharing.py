"""Weight-shared QNN context binaries: where they can be loaded (torch-free, floor).

A weight-shared context holds several graphs (the buckets and prefill/decode graphs of one weight set and layer range)
with each identical weight stored once. onnxruntime-qnn writes one on any host (`ep.share_ep_contexts`), but only a
real HTP deserialises it: the x86 HTP simulator refuses (QAIRT 2.47: QNN_COMMON_ERROR_NOT_SUPPORTED) or crashes in
contextCreateFromBinary (2.51), and onnxruntime's own test (`QnnContextShareAcrossSessions`) loads shared contexts only
under ``__aarch64__`` / ``_M_ARM64``. This is a property of the simulator, not of a release: tests/test_weight_sharing.py
re-runs the load and turns red the day the pinned simulator loads one.

So a shared bundle's numbers are measured graph by graph on contexts compiled one per graph from the same QDQ graphs,
its shared load is verified on a device only, and the gate refuses to open it on the simulator.
"""

from __future__ import annotations

import platform

SIMULATOR_CANNOT_LOAD = (
    "the x86 HTP simulator of onnxruntime-qnn cannot deserialise a weight-shared context binary (QAIRT 2.47 returns "
    "QNN_COMMON_ERROR_NOT_SUPPORTED, 2.51 crashes in contextCreateFromBinary; onnxruntime loads shared contexts only on "
    "aarch64/ARM64 devices): a simulator limitation, not a version gap")
LOAD_VERIFIED = "device-only"
PARITY_MEASURED_ON = "the same QDQ graphs compiled one graph per context, on the HTP simulator"


def host_htp_is_simulator(machine: str | None = None) -> bool:
    """Whether the QNN HTP backend on this host is the x86 simulator (every x86-64 host) rather than a device's HTP."""
    m = (machine or platform.machine()).lower()
    return m in ("x86_64", "amd64", "x86", "i686")

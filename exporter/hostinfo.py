"""Where parity was measured: this host's OS, ABI and numeric CPU features, and whether that is the target itself.

Torch-free (part of the floor). The QNN HTP backend of onnxruntime-qnn is a simulator on any host that is not an
arm64 device, so its figures are the compiled context's numerics, not the device's timing or memory.
"""

from __future__ import annotations

import platform

SIMULATED_ON_NON_ARM = {"QNNExecutionProvider": "QNN HTP x86 simulator: numerics of the compiled context, not device timing or memory"}


def host_abi() -> tuple[str, str]:
    """(os, abi) of this host in the registry's terms."""
    system, machine = platform.system().lower(), platform.machine().lower()
    arch = {"amd64": "x86_64", "x86_64": "x86_64", "arm64": "aarch64", "aarch64": "aarch64"}.get(machine, machine)
    if system == "windows":
        return "windows", "win-amd64" if arch == "x86_64" else "win-arm64"
    os_name = "wsl" if "microsoft" in platform.release().lower() else system
    return os_name, f"{system}-{arch}"


def verification_host(target, planned: dict | None = None) -> dict:
    """Where parity is measured (OS, ABI and the CPU features that select numeric kernels), and whether that counts as
    on the target itself (`planned`: the plan's verification)."""
    from exporter.hostcpu import host_cpu

    os_name, abi = host_abi()
    cpu = {"host_cpu": host_cpu(), **({"isa_baseline": target.isa_baseline} if target.isa_baseline else {})}
    if planned and planned.get("emulated"):
        return {"host_os": os_name, "host_abi": abi, "emulated": True, "on_target": False, "provider": planned["provider"],
                "emulates": planned["emulates"], "placement": "unqualified", "note": planned["note"], **cpu}
    note = SIMULATED_ON_NON_ARM.get(target.execution_provider, "")
    emulated = bool(note) and not abi.endswith("aarch64") and "arm64" not in abi
    return {
        "host_os": os_name,
        "host_abi": abi,
        "emulated": emulated,
        "on_target": (not emulated) and abi == target.abi and os_name == target.os,
        "note": note if emulated else "",
        **cpu,
    }

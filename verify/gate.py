"""The load gate: the only way a runtime opens an artifact.

`open_session(bundle, public_key, target=..., component=...)` returns an ONNX
Runtime session on the target's execution provider (CPU fallback disabled for
accelerators) only if, in this order:

1. the signature is valid for `public_key` over every file of the bundle (checked before the manifest is parsed);
2. the manifest is read safely (size, nesting, duplicate keys), schema-valid, self-consistent (every field stated
   twice says the same), and every path stays inside the bundle;
3. every file matches the manifest's digest and no file is added or missing;
4. every file a graph refers to (external data, an EPContext binary) is a signed file inside the bundle;
5. the bundle was built for `target`;
6. the parity verdict is `pass` and the bundle was published;
7. the session opens on the target's own execution provider with every node on it. A bundle whose parity
   was measured on an emulation (Ryzen AI, DirectML, CUDA verified on ORT CPU) is never run on the CPU
   under the target's label: without the target's EP on this host it is refused (EmulatedOnly). A graph
   shipped in a weight-shared QNN context is not opened on the x86 HTP simulator, which cannot load one
   (SharedContextOnSimulator; exporter/htp_sharing.py): its shared load is a device check.

Otherwise it raises a specific GateError subclass saying which. Torch-free:
needs only the core install plus onnxruntime (and onnxruntime-qnn for QNN).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from exporter.errors import IntegrityError
from manifests import manifest as mf
from manifests.signing import SignatureError, verify_bundle


class GateError(IntegrityError):
    pass


class DigestMismatch(GateError):
    pass


class TargetMismatch(GateError):
    pass


class NotVerified(GateError):
    pass


class PlacementError(GateError):
    pass


class EmulatedOnly(PlacementError):
    """The bundle's parity was measured on an emulating EP and this host lacks the target's own EP."""


class SharedContextOnSimulator(PlacementError):
    """The graph ships in a weight-shared QNN context and this host's HTP is the x86 simulator, which cannot load one."""


BundleInvalid = mf.ManifestInvalid
__all__ = [
    "GateError",
    "BundleInvalid",
    "SignatureError",
    "DigestMismatch",
    "TargetMismatch",
    "NotVerified",
    "PlacementError",
    "EmulatedOnly",
    "SharedContextOnSimulator",
    "check_bundle",
    "open_session",
    "OpenedBundle",
]


@dataclass(frozen=True)
class OpenedBundle:
    path: Path
    manifest: dict

    def component(self, name: str) -> dict:
        for c in self.manifest["components"]:
            if c["name"] == name:
                return c
        raise GateError(f"{self.path}: no component {name!r}; it has {[c['name'] for c in self.manifest['components']]}")


def _check_files(bundle: Path, data: dict, verified: dict[str, str] | None = None) -> None:
    found = mf.file_findings(bundle, data, verified)
    if found:
        raise DigestMismatch(
            f"{bundle}: files differ from the manifest: " + "; ".join(f"{f['file']}: {f['problem']}" for f in found),
            "the bundle was altered; rebuild it",
        )


def _check_references(bundle: Path, data: dict) -> None:
    from manifests.onnx_refs import reference_findings

    found = [f for rel in sorted(data["files"]) if rel.endswith(".onnx") for f in reference_findings(bundle, rel, data["files"])]
    if found:
        raise BundleInvalid(f"{bundle}: a graph refers to bytes outside the signed bundle: " + "; ".join(found[:5]),
                            "rebuild the bundle; a signed graph keeps its weights and context binaries inside it")


def check_bundle(bundle: str | Path, public_key: str | Path, target: str | None = None) -> OpenedBundle:
    """Run every gate check; return the opened bundle or raise the first failing check. `target` None: the bundle's
    own target (read only after the signature verified)."""
    from exporter.targets import get_target

    bundle = Path(bundle)
    if not (bundle / mf.MANIFEST).is_file():
        raise BundleInvalid(f"{bundle / mf.MANIFEST} is missing: {bundle} is not an edge-export bundle",
                            "point at a bundle directory (it holds manifest.json and model.sig)")
    signed = verify_bundle(bundle, Path(public_key))  # reads every byte once, before any of them is trusted
    data = mf.load(bundle)
    _check_files(bundle, data, signed)
    _check_references(bundle, data)
    want = get_target(target).name if target is not None else data["bundle"]["target"]
    built = data["bundle"]["target"]
    if built != want:
        raise TargetMismatch(
            f"{bundle} was built for target {built!r}, not {want!r}",
            f"build it for {want}: edge-export recipe {data['bundle']['recipe']} --target {want}",
        )
    if data["parity"]["verdict"] != "pass" or not data["bundle"]["published"]:
        failing = data["parity"].get("first_failure") or {}
        raise NotVerified(
            f"{bundle} has not passed verification (verdict {data['parity']['verdict']!r}"
            + (f"; {failing.get('stage')}/{failing.get('component')}/{failing.get('metric')}" if failing else "")
            + ")",
            "runtimes load only verified bundles; see its parity report",
        )
    return OpenedBundle(bundle, data)


def open_session(bundle: str | Path, public_key: str | Path, target: str, component: str, threads: int = 1,
                 ep_cache: str | Path | None = None):
    """Verify `bundle` and return a loaded `component`: an onnxruntime.InferenceSession, or for an
    ExecuTorch bundle a loaded program's ``forward`` behind the same ``run(output_names, feeds)`` call."""
    from exporter.loaders import is_program, open_graph

    opened = check_bundle(bundle, public_key, target)
    comp = opened.component(component)
    entry = mf.safe_relpath(opened.path, comp["entry"])
    target_json = opened.manifest["target"]
    ep = target_json["execution_provider"]
    v = opened.manifest.get("verification", {})
    if not is_program(entry) and v.get("emulated") and v.get("emulates") == ep and not _has_provider(ep):
        raise EmulatedOnly(
            f"{opened.path}: parity was measured on {v.get('provider')} as an emulation of {ep} ({v.get('note')}); this host has no {ep}, "
            f"and a {target_json['name']} artifact is not run on the CPU under that label",
            f"open it on a {target_json['name']} host with {ep} installed, or build for a CPU target (edge-export recipe "
            f"{opened.manifest['bundle']['recipe']} --target cpu) to run on the CPU",
        )
    shared = mf.shared_context_of(opened.manifest, comp["graph_name"])
    if shared is not None and ep == "QNNExecutionProvider" and _htp_is_simulator():
        from exporter.htp_sharing import PARITY_MEASURED_ON, SIMULATOR_CANNOT_LOAD

        raise SharedContextOnSimulator(
            f"{opened.path}: {component} ships in the weight-shared context {shared['binary']} (with {len(shared['graphs']) - 1} other "
            f"graphs), and this host's HTP is the x86 simulator: {SIMULATOR_CANNOT_LOAD}. Its parity was measured on {PARITY_MEASURED_ON}",
            f"open it on a {target_json['name']} device (aarch64/ARM64 with the QNN HTP), or qualify it there with `edge-export hub "
            f"validate {opened.path}`; to run this recipe on the simulator, build it without weight sharing "
            f"(edge-export recipe {opened.manifest['bundle']['recipe']} --target {target_json['name']} --no-weight-sharing)",
        )
    # a program is loaded with Verification.InternalConsistency; the digest check above already covered the bytes
    runner, placement = open_graph(entry, comp, target_json, threads=threads, provider_options=_provider_options(opened, ep_cache))
    off = placement.nodes_not_on(ep) if placement is not None else []
    if off:
        raise PlacementError(
            f"{entry}: nodes not on {ep}: {off[:10]}",
            "the artifact does not run fully on the declared accelerator",
        )
    return runner


def _htp_is_simulator() -> bool:
    from exporter.htp_sharing import host_htp_is_simulator

    return host_htp_is_simulator()


def _has_provider(ep: str) -> bool:
    from exporter.runtime import available_providers

    return ep in available_providers()


def _provider_options(opened: OpenedBundle, ep_cache: str | Path | None) -> dict:
    """The bundle's EP options with its paths made absolute: files inside the bundle, the EP's compile cache
    outside it (a signed bundle never gains files), by default beside the bundle."""
    rt = opened.manifest.get("runtime") or {}
    opts = dict(rt.get("provider_options") or {})
    if "config_file" in opts:
        opts["config_file"] = str(mf.safe_relpath(opened.path, opts["config_file"]))
    if "cache_dir" in opts:
        opts["cache_dir"] = str(Path(ep_cache) if ep_cache else opened.path.parent / f".{opened.path.name}.{opts['cache_dir']}")
    return opts

"""The load gate: the only way a runtime opens an artifact.

`open_session(bundle, public_key, target=..., component=...)` returns an ONNX
Runtime session on the target's execution provider (CPU fallback disabled for
accelerators) only if, in this order:

1. the manifest is present, schema-valid and every path stays inside the bundle;
2. the signature is valid for `public_key` over every file of the bundle;
3. every file matches the manifest's digest and no file is added or missing;
4. the bundle was built for `target`;
5. the parity verdict is `pass` and the bundle was published.

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


BundleInvalid = mf.ManifestInvalid
__all__ = [
    "GateError",
    "BundleInvalid",
    "SignatureError",
    "DigestMismatch",
    "TargetMismatch",
    "NotVerified",
    "PlacementError",
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


def _check_files(bundle: Path, data: dict) -> None:
    found = mf.file_findings(bundle, data)
    if found:
        raise DigestMismatch(
            f"{bundle}: files differ from the manifest: " + "; ".join(f"{f['file']}: {f['problem']}" for f in found),
            "the bundle was altered; rebuild it",
        )


def check_bundle(bundle: str | Path, public_key: str | Path, target: str) -> OpenedBundle:
    """Run every gate check; return the opened bundle or raise the first failing check."""
    from exporter.targets import get_target

    bundle = Path(bundle)
    data = mf.load(bundle)
    verify_bundle(bundle, Path(public_key))
    _check_files(bundle, data)
    want = get_target(target).name
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


def open_session(bundle: str | Path, public_key: str | Path, target: str, component: str, threads: int = 1):
    """Verify `bundle` and return a loaded `component`: an onnxruntime.InferenceSession, or for an
    ExecuTorch bundle a loaded program's ``forward`` behind the same ``run(output_names, feeds)`` call."""
    from exporter.runtime import open_session as _open

    opened = check_bundle(bundle, public_key, target)
    comp = opened.component(component)
    entry = mf.safe_relpath(opened.path, comp["entry"])
    if opened.manifest["bundle"]["format"] == "executorch":
        from exporter.backends.executorch_export import PteRunner

        # loaded with Verification.InternalConsistency; the digest check above already covered the bytes
        return PteRunner(entry, [t["name"] for t in comp["inputs"]], [t["name"] for t in comp["outputs"]], comp.get("kernel_libraries", ()))
    sess, placement = _open(entry, opened.manifest["target"], threads=threads)
    off = placement.nodes_not_on(opened.manifest["target"]["execution_provider"])
    if off:
        raise PlacementError(
            f"{entry}: nodes not on {opened.manifest['target']['execution_provider']}: {off[:10]}",
            "the artifact does not run fully on the declared accelerator",
        )
    return sess

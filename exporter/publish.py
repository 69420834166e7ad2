"""The publish stage: assemble the bundle (graphs, parity report, runtime files, manifest), sign it, verify the
signature just made, and rename it into place; or say the bundle on disk is already this build. Knows no format and
no family: the backend copies its graphs and writes its runtime files."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

from exporter import versions
from exporter.atomic import staging_dir
from exporter.cache import artifact_digest, code_digest
from exporter.errors import EdgeExportError
from exporter.hashing import sha256_file, sha256_json


def bundle_variant(plan, target) -> str:
    """Bundle and record name: the precision, prefixed by the format where it is not the target's default."""
    return plan.precision if plan.format == target.formats[0] else f"{plan.format}-{plan.precision}"


def worst(outputs: dict) -> dict:
    """The worst value of each metric over every component and output of a stage (None where nothing finite was
    measured; the non-finite calls are counted)."""
    ms = [m for outs in outputs.values() for m in outs.values()]
    cos = [m["min_cosine"] for m in ms if m["min_cosine"] is not None]
    psnrs = [m["min_psnr_db"] for m in ms if m["min_psnr_db"] is not None]
    mabs = [m["max_abs"] for m in ms if m["max_abs"] is not None]
    return {
        "min_cosine": min(cos) if cos else None,
        "min_psnr_db": min(psnrs) if psnrs else None,
        "max_abs": max(mabs) if mabs else None,
        "nonfinite_calls": sum((m.get("nonfinite_calls") or 0) + (m.get("reference_nonfinite_calls") or 0) for m in ms),
    }


def _existing_matches(bundle: Path, build_key: str, public_key: Path) -> bool:
    from manifests import manifest as mf
    from manifests.signing import verify_bundle

    try:
        verify_bundle(bundle, public_key)
        return mf.load(bundle).get("build_key") == build_key
    except EdgeExportError:
        return False


def _verify_own_signature(staging: Path, public: Path) -> None:
    """A bundle is published only if the public key its manifest names verifies what was just signed."""
    from exporter.errors import IntegrityError
    from manifests.signing import verify_bundle

    try:
        verify_bundle(staging, public)
    except EdgeExportError as e:
        raise IntegrityError(f"the signature just made does not verify with the signer's public key ({e.message})",
                             "check the signing key (--key); nothing was published") from None


def publish(build, artifacts, summary: dict, placement: dict, memory: dict) -> tuple[str, Path]:
    """("published" | "parity-failed" | "up-to-date", bundle directory)."""
    from exporter.build_memory import measured_peak_bytes
    from exporter.hostinfo import verification_host
    from manifests import manifest as mf
    from manifests.signing import public_key_fingerprint, sign_bundle
    from verify.parity import markdown

    spec, recipe, target, plan, keys = build.spec, build.recipe, build.target, build.plan, build.spec.keys
    bundle = spec.out_root / recipe.name / target.name / bundle_variant(plan, target)
    passed = summary["verdict"] == "pass"
    dest = bundle if passed else bundle.with_name(bundle.name + ".failed")
    build_key = sha256_json({
        "recipe": recipe.content_hash(),
        "checkpoint": build.ckpt.to_json(),
        # the build's budget is the host's (its cut shows in the artifacts): a rebuild on another host is up to date
        "plan": {k: v for k, v in plan.to_json().items() if k not in ("requested", "missing_prerequisites", "buildable", "build_memory")},
        "artifacts": {n: artifact_digest(p) for n, p in artifacts.final.items()},
        "shipped": {n: artifact_digest(p) for n, p in (artifacts.shipped or {}).items()},
        "parity": summary,
        "signer": public_key_fingerprint(keys.public),
        "code": code_digest(),
    })
    if passed and _existing_matches(dest, build_key, keys.public):
        build.log.hit("publish", True)
        return "up-to-date", dest

    with build.log.stage("sign", str(dest)), staging_dir(dest) as tmp:
        comps = []
        emulated = plan.verification.get("emulated", False)
        for comp, cj in zip(build.components, build.manifest_components()):
            entry, files = build.backend.bundle_files(artifacts.bundled()[comp.name], comp.graph_name, tmp)
            c = {**cj, "entry": entry, "files": files, "placement": placement.get(comp.name, {})}
            if emulated:
                c["placement"] = {**c["placement"], "measured_on": plan.verification["provider"], "placement_on_target": "unqualified"}
            comps.append(c)
        runtime = build.backend.runtime(build, artifacts, f"{recipe.name}-{dest.name}", tmp)
        (tmp / "parity.json").write_text(json.dumps(summary, indent=1, sort_keys=True, allow_nan=False) + "\n")
        (tmp / "parity.md").write_text(markdown(summary, f"{recipe.name} / {target.name} / {plan.precision}"))
        files = {str(p.relative_to(tmp)): {"sha256": sha256_file(p), "size": p.stat().st_size} for p in sorted(tmp.rglob("*")) if p.is_file()}
        manifest = {
            "schema_version": mf.SCHEMA_VERSION,
            "build_key": build_key,
            "bundle": {"recipe": recipe.name, "target": target.name, "precision": plan.precision, "format": plan.format,
                       "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "published": passed},
            "recipe": {"name": recipe.name, "content_sha256": recipe.content_hash(), "family": recipe.family, "architecture": recipe.architecture},
            "checkpoint": build.ckpt.to_json(),
            "target": target.to_json(),
            "plan": plan.to_json(),
            "components": comps,
            "state_layout": recipe.state_layout,
            "quantization": artifacts.scheme,
            "evaluation": summary["evaluation"],
            "tools": build.tools,
            "memory": memory,
            "verification": verification_host(target, plan.verification),
            "build_memory": {**plan.build_memory, "measured": measured_peak_bytes(), "checkpoint_tensors_held": build.adapter.held},
            "runtime": runtime,
            **artifacts.bundle_fields,
            "parity": {
                "verdict": summary["verdict"],
                "first_failure": summary["first_failure"],
                "thresholds": {v["stage"]: v["thresholds"] for v in summary["stages"]},
                "stages": [
                    {"stage": v["stage"], "verdict": v["verdict"], "provider": v["provider"], "precision": v["precision"],
                     "decode": {k: v["decode"].get(k) for k in ("applicable", "steps", "token_agreement", "min_greedy_prefix", "all_greedy_exact")
                                if k in v["decode"]},
                     "worst": worst(v["outputs"])}
                    for v in summary["stages"]
                ],
                "report": "parity.json",
            },
            "files": files,
            "host": versions.host_info(),
            "signing": {"format": "model-signing/elliptic-key", "public_key_sha256": public_key_fingerprint(keys.public), "signature": mf.SIGNATURE},
        }
        mf.write(tmp, manifest)
        sign_bundle(tmp, keys.private)
        _verify_own_signature(tmp, keys.public)
    return ("published" if passed else "parity-failed"), dest

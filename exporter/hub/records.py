"""Device-validation records and the resumable job state, both beside (never inside) a bundle.

``BUNDLE.device-validation.json``: what AI Hub (or the replay) did with the bundle and what it
measured, bound to the bundle by the SHA-256 of its manifest (which lists every file's digest) and
signed with ECDSA P-256 over its canonical JSON. A record whose ``simulated`` is true never counts
as a device result: the audit and the matrix say "simulator-only".

``BUNDLE.hub-state.json``: job ids as soon as they exist, so an interrupted validation resumes
without resubmitting. Neither file holds a token.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

from exporter.errors import IntegrityError
from exporter.hashing import canonical_json, sha256_file

SCHEMA = "edge-export.device-validation/v1"


class RecordInvalid(IntegrityError):
    pass


def record_path(bundle: Path) -> Path:
    bundle = Path(bundle)
    return bundle.with_name(bundle.name + ".device-validation.json")


def state_path(bundle: Path) -> Path:
    bundle = Path(bundle)
    return bundle.with_name(bundle.name + ".hub-state.json")


def manifest_digest(bundle: Path) -> str:
    return sha256_file(Path(bundle) / "manifest.json")


def sign_record(record: dict, private_key: Path) -> dict:
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    from manifests.signing import public_key_fingerprint, public_path_for

    body = {k: v for k, v in record.items() if k != "signature"}
    key = serialization.load_pem_private_key(Path(private_key).read_bytes(), password=None)
    sig = key.sign(canonical_json(body), ec.ECDSA(hashes.SHA256()))
    return {**body, "signature": {"format": "ecdsa-sha256/canonical-json", "public_key_sha256": public_key_fingerprint(public_path_for(Path(private_key))),
                                  "value": base64.b64encode(sig).decode()}}


def verify_record(record: dict, public_key: Path) -> None:
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    sig = record.get("signature") or {}
    if not sig.get("value"):
        raise RecordInvalid("the device-validation record is unsigned", "rerun `edge-export hub validate`; unsigned records are never trusted")
    key = serialization.load_pem_public_key(Path(public_key).read_bytes())
    body = {k: v for k, v in record.items() if k != "signature"}
    try:
        key.verify(base64.b64decode(sig["value"]), canonical_json(body), ec.ECDSA(hashes.SHA256()))
    except (InvalidSignature, ValueError):
        raise RecordInvalid("the device-validation record's signature does not verify with this public key",
                            "it was altered or signed by another key; rerun the validation") from None


def load_record(bundle: Path, public_key: Path | None) -> dict | None:
    """The bundle's device-validation record, verified and bound to the bundle; None if there is none."""
    path = record_path(bundle)
    if not path.is_file():
        return None
    from exporter.safejson import JsonRefused, load_json

    try:
        record = load_json(path, "the device-validation record", 64 << 20)
    except JsonRefused as e:
        raise RecordInvalid(e.message, "delete it and rerun the validation") from None
    if not isinstance(record, dict) or record.get("schema") != SCHEMA:
        raise RecordInvalid(f"{path}: schema {record.get('schema') if isinstance(record, dict) else None!r}, expected {SCHEMA}", "rerun the validation")
    if public_key is None:
        raise RecordInvalid(f"{path}: no public key to verify it with", "pass --public-key")
    verify_record(record, public_key)
    if record["bundle"]["manifest_sha256"] != manifest_digest(bundle):
        raise RecordInvalid(f"{path} validates another build (manifest digest differs from {bundle}/manifest.json)",
                            "rerun `edge-export hub validate` for this build")
    return record


def validation_state(record: dict | None) -> str:
    """What a (verified) record means for qualification: ``none``, ``failed``, ``simulated`` or ``device``.
    Only ``device`` is a device result; the audit and the matrix both read it through here."""
    if record is None:
        return "none"
    if record["verdict"] != "pass":
        return "failed"
    return "simulated" if record["simulated"] else "device"


def write_json_atomic(path: Path, data: dict) -> None:
    from exporter.atomic import write_text_atomic

    write_text_atomic(path, json.dumps(data, indent=1, sort_keys=True) + "\n")

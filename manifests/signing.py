"""Bundle signatures in the OpenSSF model-signing format, with EC keys.

The signature (`model.sig`) covers every file of the bundle, the manifest
included, so that `model_signing verify key --signature B/model.sig
--public_key K.pub B` accepts our bundles unchanged.

Without `--key`, a local development key is created on first use under
$EDGE_EXPORT_KEY_DIR (default ~/.config/edge-export/keys), never inside the
repository; key material is never logged.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

from exporter.errors import IntegrityError, UsageError
from exporter.hashing import sha256_bytes

DEV_KEY_NAME = "dev-signing-key.pem"


class SignatureError(IntegrityError):
    pass


@dataclass(frozen=True)
class KeyPair:
    private: Path | None
    public: Path  # the public key derived from `private` (never a file merely found beside it)


def key_dir() -> Path:
    return Path(os.environ.get("EDGE_EXPORT_KEY_DIR") or Path.home() / ".config" / "edge-export" / "keys")


def public_path_for(private: Path) -> Path:
    return private.with_name(private.stem + ".pub.pem")


CURVES = ("secp256r1", "secp384r1")  # what model-signing's elliptic-key signer accepts (P-256, P-384)


def load_private_key(path: Path):
    """An EC P-256/P-384 private key from PEM, or a UsageError saying exactly what the file is instead."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    path = Path(path)
    fix = "pass an unencrypted EC private key in PEM (P-256 or P-384), e.g. openssl ecparam -name prime256v1 -genkey -noout -out key.pem"
    if not path.is_file():
        raise UsageError(f"signing key {path} does not exist", fix)
    try:
        data = path.read_bytes()
    except OSError as e:
        raise UsageError(f"signing key {path} cannot be read ({e.strerror or e})", "check its owner and mode") from None
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except TypeError:
        raise UsageError(f"signing key {path} is encrypted", "decrypt it to a file only you can read (openssl ec -in KEY -out PLAIN), "
                                                            "or use an unencrypted key; edge-export never asks for passphrases") from None
    except (ValueError, Exception):  # noqa: BLE001 - cryptography raises ValueError and UnsupportedAlgorithm alike
        try:
            serialization.load_pem_public_key(data)
            raise UsageError(f"signing key {path} is a public key", "pass the private key; the public key is derived from it") from None
        except UsageError:
            raise
        except Exception:  # noqa: BLE001
            raise UsageError(f"signing key {path} is not a PEM private key", fix) from None
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise UsageError(f"signing key {path} is a {type(key).__name__.replace('_', '').replace('PrivateKey', '')} key, not an elliptic-curve key",
                         fix)
    if key.curve.name not in CURVES:
        raise UsageError(f"signing key {path} is on curve {key.curve.name}, not P-256 or P-384", fix)
    return key


def _public_pem(key) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


def dev_key(notice=lambda msg: print(msg, file=sys.stderr)) -> KeyPair:
    """The local development key, created (EC P-256) on first use; its public key is derived and rewritten if stale."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    d = key_dir()
    priv = d / DEV_KEY_NAME
    pub = public_path_for(priv)
    if not priv.exists():
        d.mkdir(parents=True, exist_ok=True)
        key = ec.generate_private_key(ec.SECP256R1())
        fd = os.open(priv, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
        notice(f"created a local development signing key at {priv} (public key {pub}); pass --key for release signing")
    _write_if_different(pub, _public_pem(load_private_key(priv)))
    return KeyPair(priv, pub)


def _write_if_different(path: Path, data: bytes) -> None:
    if not path.is_file() or path.read_bytes() != data:
        from exporter.atomic import write_bytes_atomic

        write_bytes_atomic(path, data)


def write_public_key(private: Path, public: Path) -> None:
    _write_if_different(public, _public_pem(load_private_key(private)))


def resolve_key(key: str | Path | KeyPair | None) -> KeyPair:
    """The signing key, loaded and checked before any work; its public key derived from it and kept outside the
    user's key directory (nothing is written beside --key)."""
    if isinstance(key, KeyPair):
        return key
    if key is None:
        return dev_key()
    priv = Path(key)
    pem = _public_pem(load_private_key(priv))
    import tempfile

    d = Path(tempfile.gettempdir()) / f"edge-export-{os.getuid() if hasattr(os, 'getuid') else 'user'}-public-keys"
    d.mkdir(mode=0o700, parents=True, exist_ok=True)
    pub = d / f"{sha256_bytes(pem)[:32]}.pub.pem"
    _write_if_different(pub, pem)
    return KeyPair(priv, pub)


def public_key_fingerprint(public: Path) -> str:
    from cryptography.hazmat.primitives import serialization

    key = serialization.load_pem_public_key(Path(public).read_bytes())
    der = key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return sha256_bytes(der)


def _hashing_config(signature_name: str):
    """Hash every file but the signature; model-signing takes ignored paths relative to the bundle."""
    from model_signing import hashing

    return hashing.Config().set_ignored_paths(paths=[signature_name], ignore_git_paths=False)


def sign_bundle(bundle: Path, private_key: Path, signature_name: str = "model.sig") -> Path:
    from model_signing import signing

    bundle = Path(bundle).resolve()
    sig = bundle / signature_name
    signing.Config().use_elliptic_key_signer(private_key=private_key).set_hashing_config(
        _hashing_config(signature_name)
    ).sign(Path(bundle), sig)
    return sig


def verify_bundle(bundle: Path, public_key: Path, signature_name: str = "model.sig") -> dict[str, str]:
    """Raise SignatureError unless the signature is by `public_key` and every file matches it. Returns the signed
    SHA-256 of every file (model-signing hashed the files on disk and compared them with these), so that a caller
    comparing the manifest's table need not read the bytes a second time."""
    from model_signing import verifying

    bundle = Path(bundle).resolve()
    sig = bundle / signature_name
    if not sig.is_file():
        raise SignatureError(f"{sig} is missing: the bundle is unsigned", "only signed bundles may be loaded; rebuild with edge-export recipe")
    from manifests.manifest import MAX_SIGNATURE_BYTES

    if sig.stat().st_size > MAX_SIGNATURE_BYTES:
        raise SignatureError(f"{sig}: {sig.stat().st_size} bytes, larger than any signature ({MAX_SIGNATURE_BYTES})",
                             "the bundle is damaged or crafted; rebuild it")
    if not Path(public_key).is_file():
        raise UsageError(f"public key {public_key} does not exist", "pass the .pub.pem beside the signing key")
    try:
        verifying.Config().use_elliptic_key_verifier(public_key=Path(public_key)).set_hashing_config(
            _hashing_config(signature_name)
        ).verify(bundle, sig)
    except Exception as e:  # model_signing raises ValueError and crypto errors alike
        detail = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        changed = unverified_differences(bundle, sig)
        raise SignatureError(
            f"{sig}: signature verification failed ({detail})"
            + (f"; compared with the digests the signature file lists (unverified, for diagnosis): {'; '.join(changed[:5])}" if changed else ""),
            "the bundle was altered after signing or signed by another key; rebuild it or use the signer's public key",
        ) from None
    return signed_digests(sig)


def unverified_differences(bundle: Path, sig: Path) -> list[str]:
    """Which files differ from the digests a signature file lists, read without trusting it (for the error message of
    a failed verification only: which file was altered, added or removed)."""
    from exporter.hashing import sha256_file

    try:
        listed = signed_digests(sig)
    except Exception:  # noqa: BLE001 - a damaged signature file lists nothing usable
        return []
    if not listed:
        return []
    on_disk = {str(p.relative_to(bundle)) for p in Path(bundle).rglob("*") if p.is_file() and p.name != sig.name}
    out = [f"{n}: missing" for n in sorted(set(listed) - on_disk)] + [f"{n}: added" for n in sorted(on_disk - set(listed))]
    out += [f"{n}: content differs" for n in sorted(on_disk & set(listed)) if sha256_file(Path(bundle) / n) != listed[n]]
    return out


def signed_digests(sig: Path) -> dict[str, str]:
    """The per-file SHA-256 of a model-signing signature's payload (call only after the signature verified)."""
    import base64

    from exporter.safejson import loads

    payload = loads(base64.b64decode(loads(Path(sig).read_bytes(), str(sig))["dsseEnvelope"]["payload"]), f"{sig} payload")
    pred = payload["predicate"]
    if pred.get("serialization", {}).get("method") != "files" or pred["serialization"].get("hash_type") != "sha256":
        return {}  # another serialization: the caller hashes the files itself
    return {r["name"]: r["digest"] for r in pred["resources"] if r.get("algorithm") == "sha256"}

"""Reading, validating and writing bundle manifests (schema `edge-export.manifest/v1`)."""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from pathlib import Path, PurePosixPath

from exporter.errors import IntegrityError

SCHEMA_VERSION = "edge-export.manifest/v1"
MANIFEST = "manifest.json"
SIGNATURE = "model.sig"
MAX_MANIFEST_BYTES = 32 << 20  # a 27B bundle's manifest is well under 1 MiB
MAX_PARITY_BYTES = 256 << 20
MAX_SIGNATURE_BYTES = 16 << 20


class ManifestInvalid(IntegrityError):
    pass


@lru_cache(maxsize=1)
def schema() -> dict:
    return json.loads(resources.files("manifests").joinpath("schema/manifest-v1.schema.json").read_text())


def safe_relpath(bundle: Path, rel: str) -> Path:
    """Resolve a manifest path, refusing anything that leaves the bundle."""
    p = PurePosixPath(rel)
    if p.is_absolute() or ".." in p.parts or not rel or "\\" in rel:
        raise ManifestInvalid(f"{bundle / MANIFEST}: path {rel!r} leaves the bundle", "rebuild the bundle; never edit manifest paths")
    full = (bundle / rel).resolve()
    if bundle.resolve() not in full.parents:
        raise ManifestInvalid(f"{bundle / MANIFEST}: path {rel!r} resolves outside the bundle", "rebuild the bundle")
    return full


def validate(data: dict, where: str = MANIFEST) -> None:
    import jsonschema

    try:
        jsonschema.validate(data, schema())
    except jsonschema.ValidationError as e:
        loc = "/".join(str(x) for x in e.absolute_path) or "(root)"
        raise ManifestInvalid(f"{where}: schema violation at {loc}: {e.message}", "rebuild the bundle with edge-export") from None


def _read(path: Path, what: str, max_bytes: int):
    from exporter.safejson import JsonRefused, load_json

    try:
        return load_json(path, what, max_bytes, fix="the bundle is damaged or crafted; rebuild it with edge-export")
    except JsonRefused as e:
        raise ManifestInvalid(e.message, e.hint) from None


# fields a manifest states twice: both must say the same (a re-signed manifest naming qcs6490 over a CPU target block
# must not pass as a qcs6490 bundle)
def cross_check(data: dict, where: str) -> None:
    b, plan, q, t = data["bundle"], data["plan"], data["quantization"], data["target"]
    pairs = [("bundle.target", b["target"], "target.name", t.get("name")),
             ("bundle.target", b["target"], "plan.target", plan.get("target")),
             ("bundle.recipe", b["recipe"], "recipe.name", data["recipe"].get("name")),
             ("bundle.recipe", b["recipe"], "plan.recipe", plan.get("recipe")),
             ("bundle.precision", b["precision"], "plan.precision", plan.get("precision")),
             ("bundle.precision", b["precision"], "quantization.precision", q.get("precision")),
             ("bundle.format", b["format"], "plan.format", plan.get("format")),
             ("signing.signature", data.get("signing", {}).get("signature", SIGNATURE), "the signature file", SIGNATURE)]
    if "isa_baseline" in (data.get("verification") or {}):
        pairs.append(("verification.isa_baseline", data["verification"]["isa_baseline"], "target.isa_baseline", t.get("isa_baseline")))
    bad = [f"{a} is {x!r} but {c} is {y!r}" for a, x, c, y in pairs if x != y]
    if bad:
        raise ManifestInvalid(f"{where}: the manifest contradicts itself: " + "; ".join(bad), "rebuild the bundle; never edit a manifest")


def load(bundle: Path) -> dict:
    """The manifest, read safely (size, nesting, duplicate keys, no NaN), schema-valid, self-consistent, with every
    path inside the bundle. Trust it only after the signature verified (the gate and the audit check that first)."""
    path = Path(bundle) / MANIFEST
    if not path.is_file():
        raise ManifestInvalid(f"{path} is missing: {bundle} is not an edge-export bundle", "point at a bundle directory (it holds manifest.json and model.sig)")
    data = _read(path, "the manifest", MAX_MANIFEST_BYTES)
    if not isinstance(data, dict):
        raise ManifestInvalid(f"{path} is not a JSON object", "the bundle is damaged; rebuild it")
    validate(data, str(path))
    cross_check(data, str(path))
    for rel in data["files"]:
        safe_relpath(Path(bundle), rel)
    for comp in data["components"]:
        for rel in [comp["entry"], *comp["files"]]:
            safe_relpath(Path(bundle), rel)
            if rel not in data["files"]:
                raise ManifestInvalid(f"{path}: component {comp['name']} names {rel!r}, which the file list lacks", "rebuild the bundle")
    _check_sharing(data, path)
    return data


def _check_sharing(data: dict, path: Path) -> None:
    """A weight-shared context names a signed file of the bundle, the graphs it holds are components that carry it,
    and its digest is the file list's."""
    names = {c["graph_name"]: c for c in data["components"]}
    for g in (data.get("weight_sharing") or {}).get("groups", []):
        meta = data["files"].get(g["binary"])
        bad = [] if meta is not None else [f"its binary {g['binary']!r} is not in the file list"]
        if meta is not None and meta["sha256"] != g["sha256"]:
            bad.append(f"its binary's digest {g['sha256'][:12]} is not the file list's {meta['sha256'][:12]}")
        bad += [f"graph {n!r} is not a component carrying it" for n in g["graphs"] if g["binary"] not in (names.get(n) or {}).get("files", [])]
        if bad:
            raise ManifestInvalid(f"{path}: weight-shared context {g['binary']}: " + "; ".join(bad), "rebuild the bundle; never edit a manifest")


def shared_context_of(data: dict, graph_name: str) -> dict | None:
    """The weight-sharing group that holds `graph_name`, if the bundle ships it in a shared context."""
    return next((g for g in (data.get("weight_sharing") or {}).get("groups", []) if graph_name in g["graphs"]), None)


def file_findings(bundle: Path, data: dict, verified: dict[str, str] | None = None) -> list[dict]:
    """Every way the files on disk differ from the manifest's table (streamed digests): files added or
    missing, links, wrong sizes, wrong content. Empty when the bundle is intact. `verified`: digests of the
    files on disk already established by a verified signature (verify_bundle's result); a file listed there is
    compared by that digest instead of being read again."""
    verified = verified or {}
    from exporter.hashing import sha256_file

    bundle = Path(bundle)
    listed = set(data["files"])
    on_disk = {str(p.relative_to(bundle)) for p in bundle.rglob("*") if p.is_file() or p.is_symlink()}
    found = [{"file": f, "problem": "added (not in the manifest)"} for f in sorted(on_disk - listed - {MANIFEST, SIGNATURE})]
    found += [{"file": f, "problem": "missing"} for f in sorted(listed - on_disk)]
    for rel, meta in sorted(data["files"].items()):
        p = bundle / rel
        if rel not in on_disk:
            continue
        if p.is_symlink():
            found.append({"file": rel, "problem": "symbolic link (bundles hold plain files only)"})
        elif p.stat().st_size != meta["size"]:
            found.append({"file": rel, "problem": f"size {p.stat().st_size}, manifest says {meta['size']}"})
        elif (verified[rel] if rel in verified else sha256_file(p)) != meta["sha256"]:
            found.append({"file": rel, "problem": "content differs from its digest"})
    return found


def dumps(data: dict) -> str:
    return json.dumps(data, indent=2, sort_keys=True) + "\n"


def write(bundle: Path, data: dict) -> None:
    validate(data)
    (Path(bundle) / MANIFEST).write_text(dumps(data))


def load_parity(bundle: Path, data: dict) -> dict:
    """The full parity record (every stage, component, output and prompt) the manifest summarises."""
    rel = data["parity"].get("report")
    if not rel:
        raise ManifestInvalid(f"{Path(bundle) / MANIFEST}: no parity report is named", "rebuild the bundle")
    path = safe_relpath(Path(bundle), rel)
    full = _read(path, "the parity report", MAX_PARITY_BYTES)
    if not isinstance(full, dict) or not isinstance(full.get("stages"), list):
        raise ManifestInvalid(f"{path} holds no parity stages", "rebuild the bundle")
    return full

"""Reviewed checkpoint pins a team can commit: `edge-export pin RECIPE --checkpoint DIR` writes one, `edge-export
recipe ... --checkpoint DIR --pin FILE` builds against it.

A pin file (schema ``edge-export.pin/v1``, JSON) names the recipe, the checkpoint's source and revision, the SHA-256
and size of every file the loader reads (config.json, the safetensors files, the shard index), the result of the
layout check, and every file of the snapshot that is *not* read (pickle weights, code, tokenizer files) with why.
Making one checks, before anything is loaded: the config against the recipe, every safetensors header (torch-free,
exporter/safetensors_header.py), every tensor name and shape against the recipe's layout, the shard index against
the shards, that weights come from safetensors only (pickle never read, code never executed), and that no symbolic
link leaves the snapshot (a Hugging Face cache snapshot's links may point into its own ``blobs/``; a blob named by a
SHA-256 must have that digest). A Hugging Face cache snapshot (``.../models--ORG--NAME/snapshots/REV/``) gives the
source and revision from its path, offline. Torch-free.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
from dataclasses import dataclass
from math import prod
from pathlib import Path, PurePosixPath
from typing import Callable

from exporter.errors import IntegrityError, UsageError

PIN_SCHEMA = "edge-export.pin/v1"
PIN_MAX_BYTES = 16 << 20
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt", ".joblib")
CODE_SUFFIXES = (".py", ".pyc", ".so", ".dll", ".dylib")
INDEX_SUFFIX = ".safetensors.index.json"
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_HF_SNAPSHOT = re.compile(r"^models--(?P<org>[^/]+?)--(?P<name>[^/]+)$")


@dataclass(frozen=True)
class PinFile:
    """A pin file as read and checked (`load_pin`)."""

    path: Path
    digest: str  # SHA-256 of the pin file's bytes: what the manifest records and a policy may trust
    recipe: str
    source: str
    revision: str
    files: dict[str, dict]  # relative name -> {sha256, size}

    def checkpoint_pin(self):
        from recipes.base import CheckpointPin

        return CheckpointPin(source=self.source, revision=self.revision, files={n: f["sha256"] for n, f in self.files.items()})

    def record(self) -> dict:
        """What a manifest records of the pin that a build followed."""
        return {"file": self.path.name, "sha256": self.digest, "recipe": self.recipe, "schema": PIN_SCHEMA}


def hf_snapshot(directory: Path) -> tuple[Path, str, str] | None:
    """(repository cache root, "hf:ORG/NAME", revision) for a Hugging Face cache snapshot directory, else None."""
    d = Path(os.path.abspath(directory))
    if d.parent.name != "snapshots":
        return None
    m = _HF_SNAPSHOT.match(d.parent.parent.name)
    if not m:
        return None
    return d.parent.parent, f"hf:{m.group('org')}/{m.group('name')}", d.name


def _safe_name(rel: str, where: str) -> str:
    p = PurePosixPath(rel)
    if not rel or p.is_absolute() or ".." in p.parts or "\\" in rel:
        raise IntegrityError(f"{where}: file name {rel!r} leaves the checkpoint directory", "rewrite the pin with `edge-export pin`")
    return rel


def _walk(directory: Path, allowed_roots: tuple[Path, ...]) -> list[tuple[str, Path]]:
    """(relative name, resolved path) of every file; a symbolic link must resolve inside an allowed root."""
    out = []
    roots = tuple(Path(os.path.realpath(r)) for r in allowed_roots)
    for root, dirs, files in os.walk(directory, followlinks=False):
        for d in list(dirs):
            if os.path.islink(os.path.join(root, d)):
                raise IntegrityError(f"{os.path.join(root, d)}: a symbolic link to a directory inside the checkpoint",
                                     "copy the directory in; pins follow only file links into the snapshot (or its cache blobs)")
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for f in sorted(files):
            path = Path(root) / f
            rel = path.relative_to(directory).as_posix()
            if any(part.startswith(".") for part in PurePosixPath(rel).parts):
                continue  # .gitattributes, .cache/ of huggingface_hub: metadata, never read
            real = Path(os.path.realpath(path))
            if path.is_symlink() and not any(r == real or r in real.parents for r in roots):
                raise IntegrityError(f"{path}: symbolic link to {os.readlink(path)} resolves outside the checkpoint ({real})",
                                     "copy the file into the snapshot; a pin never follows a link out of it")
            if not real.is_file():
                raise IntegrityError(f"{path}: not a regular file (dangling link or special file)", "complete the download")
            out.append((rel, real))
    return out


def _json_object(path: Path, what: str) -> dict:
    from exporter.safetensors_header import _unique_object

    try:
        data = json.loads(path.read_text(encoding="utf-8"), object_pairs_hook=_unique_object)
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as e:
        raise IntegrityError(f"{path}: {what} does not parse ({str(e)[:200]})", "download the file again") from None
    if not isinstance(data, dict):
        raise IntegrityError(f"{path}: {what} is not a JSON object", "download the file again")
    return data


def _classify(files: list[tuple[str, Path]]) -> tuple[dict[str, Path], list[dict]]:
    read, excluded = {}, []
    has_weights = any(rel.endswith(".safetensors") and "/" not in rel for rel, _ in files)
    for rel, real in files:
        top = "/" not in rel
        if top and (rel == "config.json" or rel.endswith(".safetensors") or rel.endswith(INDEX_SUFFIX)):
            read[rel] = real
        elif rel.endswith(PICKLE_SUFFIXES):
            excluded.append({"file": rel, "size": real.stat().st_size, "reason": "pickle: never read (weights come from safetensors only)"})
        elif rel.endswith(CODE_SUFFIXES):
            excluded.append({"file": rel, "size": real.stat().st_size, "reason": "code: never executed (no trust_remote_code)"})
        else:
            excluded.append({"file": rel, "size": real.stat().st_size, "reason": "not read by the recipe's loader"})
    if "config.json" not in read:
        raise IntegrityError("the checkpoint has no config.json at its top level", "point --checkpoint at the snapshot directory itself")
    if not has_weights:
        pickles = [e["file"] for e in excluded if e["reason"].startswith("pickle")]
        raise IntegrityError("the checkpoint has no *.safetensors weights" + (f" (only pickle files: {pickles[:5]}, refused)" if pickles else ""),
                             "convert the weights to safetensors (pickle can run code when loaded, and is never read)")
    return read, excluded


def _tensors(read: dict[str, Path]) -> dict[str, tuple[str, object]]:
    """Tensor name -> (file, header entry) over every safetensors file; the shard index must agree exactly."""
    from exporter.safetensors_header import read_header

    found: dict[str, tuple[str, object]] = {}
    for rel in sorted(r for r in read if r.endswith(".safetensors")):
        for name, entry in read_header(read[rel]).tensors.items():
            if name in found:
                raise IntegrityError(f"tensor {name!r} is in both {found[name][0]} and {rel}", "use a consistent snapshot (one shard per tensor)")
            found[name] = (rel, entry)
    for rel in sorted(r for r in read if r.endswith(INDEX_SUFFIX)):
        index = _json_object(read[rel], "the shard index")
        wm = index.get("weight_map")
        if not isinstance(wm, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in wm.items()):
            raise IntegrityError(f"{read[rel]}: no weight_map of tensor name -> file", "download the index again")
        shards = set(wm.values())
        missing_files = sorted(f for f in shards if f not in read)
        wrong = sorted(k for k, f in wm.items() if f in read and found.get(k, (None,))[0] != f)
        unlisted = sorted(k for k, (f, _) in found.items() if f in shards and k not in wm)
        problems = [f"{what}: {items[:5]}" for what, items in (("shards named but absent", missing_files),
                    ("tensors not where the index says", wrong), ("tensors the index does not list", unlisted)) if items]
        if problems:
            raise IntegrityError(f"{read[rel]}: the shard index disagrees with the shards: " + "; ".join(problems),
                                 "download the complete snapshot (every shard the index names)")
    return found


def check_layout(recipe, cfg: dict, tensors: dict[str, tuple[str, object]]) -> dict:
    """Every tensor the recipe's loader reads present with its shape; every other tensor accounted for by name."""
    if recipe.checkpoint_layout is None:
        raise UsageError(f"recipe {recipe.name} cannot check a checkpoint's layout yet (no loader: {recipe.blocked or 'plan-only'})",
                         "pin a checkpoint of a recipe that builds (`edge-export recipes`); this one gets its loader with its own issue")
    layout = recipe.checkpoint_layout(cfg)
    want = layout.tensors
    missing = sorted(set(want) - set(tensors))
    mismatched = [f"{k}: {list(tensors[k][1].shape)} (the config needs {list(want[k])})" for k in sorted(want)
                  if k in tensors and tuple(tensors[k][1].shape) != tuple(want[k])]
    rest = sorted(set(tensors) - set(want))
    unused = [k for k in rest if k.startswith(layout.unused)] if layout.unused else []
    unchecked = [k for k in rest if layout.unchecked and k.startswith(layout.unchecked)]
    unknown = sorted(set(rest) - set(unused) - set(unchecked))
    problems = [f"{len(items)} {label}: {items[:5]}" + (" ..." if len(items) > 5 else "")
                for label, items in (("missing tensors", missing), ("shape mismatches", mismatched), ("tensors of no known part", unknown))
                if items]
    if problems:
        raise IntegrityError(f"the checkpoint does not have the layout recipe {recipe.name} loads: " + "; ".join(problems),
                             "use a complete snapshot of the family's architecture (tensor names as upstream writes them)")
    dtypes: dict[str, int] = {}
    for _, e in tensors.values():
        dtypes[e.dtype] = dtypes.get(e.dtype, 0) + 1
    return {"checked_by": recipe.name, "ok": True, "tensors": len(tensors), "loaded": len(want),
            "parameters": sum(prod(e.shape) for _, e in tensors.values()), "dtypes": dict(sorted(dtypes.items())),
            "unused": {"prefixes": list(layout.unused), "tensors": len(unused)},
            "unchecked": {"prefixes": list(layout.unchecked), "tensors": len(unchecked)}}


def make_pin(recipe_name: str, directory: Path, revision: str | None = None,
             hasher: Callable[[Path], str] | None = None) -> dict:
    """The pin of the checkpoint at `directory` for `recipe_name`, every check done (raises on the first refusal)."""
    from exporter.hashing import sha256_file
    from recipes import get_recipe

    directory = Path(directory)
    if not directory.is_dir():
        raise UsageError(f"checkpoint {directory} is not a directory", "pass the snapshot directory (config.json and *.safetensors)")
    recipe = get_recipe(recipe_name)
    if recipe.checkpoint_layout is None:
        raise UsageError(f"recipe {recipe.name} cannot check a checkpoint's layout yet (no loader: {recipe.blocked or 'plan-only'})",
                         "pin a checkpoint of a recipe that builds (`edge-export recipes`); this one gets its loader with its own issue")
    hf = hf_snapshot(directory)
    roots = (directory,) + ((hf[0] / "blobs",) if hf else ())
    read, excluded = _classify(_walk(directory, roots))
    cfg = _json_object(read["config.json"], "config.json")
    problems = recipe.config_problems(cfg)
    if problems:
        raise UsageError(f"{read['config.json']}: not a checkpoint for recipe {recipe.name}: " + "; ".join(problems[:5]),
                         "pin it for the recipe of its architecture (`edge-export recipes`)")
    layout = check_layout(recipe.for_checkpoint(cfg), cfg, _tensors(read))
    if hf:
        source, rev = hf[1], hf[2]
        if revision is not None and revision != rev:
            raise UsageError(f"--revision {revision} differs from the snapshot's revision {rev} (read from its path)",
                             "omit --revision for a Hugging Face cache snapshot")
    else:
        source, rev = f"local:{directory.resolve()}", revision
    hasher = hasher or sha256_file
    files = {}
    for rel, real in sorted(read.items()):
        digest = hasher(real)
        if hf and real.parent == (hf[0] / "blobs").resolve() and _SHA256.match(real.name) and real.name != digest:
            raise IntegrityError(f"{directory / rel}: its cache blob {real.name} does not have that SHA-256 (content {digest})",
                                 "the download is corrupt: delete the blob and download the snapshot again")
        files[rel] = {"sha256": digest, "size": real.stat().st_size}
    if rev is None:  # a plain directory without a revision: the content itself names it
        from exporter.hashing import sha256_json

        rev = "sha256:" + sha256_json({n: f["sha256"] for n, f in files.items()})
    notes = []
    if cfg.get("auto_map"):
        notes.append(f"config.json names remote code (auto_map {sorted(cfg['auto_map'])}): never imported or executed")
    from exporter import versions

    return {"schema": PIN_SCHEMA, "recipe": recipe.name, "family": recipe.family, "architecture": recipe.architecture,
            "source": source, "revision": rev, "files": files, "layout": layout, "excluded": excluded, "notes": notes,
            "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "tool": {"edge-export": versions.tool_versions().get("edge-export")}}


def load_pin(path: Path) -> PinFile:
    """A pin file, its shape checked and its digest taken (a crafted or damaged file is refused by name)."""
    from exporter.hashing import sha256_bytes
    from exporter.safetensors_header import _unique_object

    path = Path(path)
    try:
        size = path.stat().st_size
        if size > PIN_MAX_BYTES:
            raise IntegrityError(f"{path}: {size} bytes, larger than any pin ({PIN_MAX_BYTES})", "pass the pin file `edge-export pin` wrote")
        raw = path.read_bytes()
    except FileNotFoundError:
        raise UsageError(f"pin file {path} does not exist", "write it with `edge-export pin RECIPE --checkpoint DIR --output FILE`") from None
    except OSError as e:
        raise UsageError(f"pin file {path}: cannot read ({e.strerror or e})", "check the path and its permissions") from None
    try:
        data = json.loads(raw.decode("utf-8"), object_pairs_hook=_unique_object)
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise IntegrityError(f"{path}: not a pin file ({str(e)[:200]})", "write it again with `edge-export pin`") from None
    if not isinstance(data, dict) or data.get("schema") != PIN_SCHEMA:
        raise IntegrityError(f"{path}: not a pin file (schema {data.get('schema') if isinstance(data, dict) else None!r}, want {PIN_SCHEMA})",
                             "write it with `edge-export pin`")
    files = data.get("files")
    bad = [k for k in ("recipe", "source", "revision") if not isinstance(data.get(k), str) or not data.get(k)]
    if bad or not isinstance(files, dict) or not files:
        raise IntegrityError(f"{path}: pin file lacks {bad or ['files']}", "write it again with `edge-export pin`")
    for rel, meta in files.items():
        _safe_name(rel, str(path))
        if not isinstance(meta, dict) or not _SHA256.match(str(meta.get("sha256", ""))) or not isinstance(meta.get("size"), int):
            raise IntegrityError(f"{path}: file {rel!r} has no valid sha256/size", "write the pin again with `edge-export pin`")
        if rel.endswith(PICKLE_SUFFIXES):
            raise IntegrityError(f"{path}: pins pickle file {rel!r}: refused", "weights come from safetensors only")
    if "config.json" not in files:
        raise IntegrityError(f"{path}: pins no config.json", "write the pin again with `edge-export pin`")
    return PinFile(path, sha256_bytes(raw), data["recipe"], data["source"], data["revision"], files)

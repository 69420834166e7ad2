"""Resolve stage: pin and hash the checkpoint before any other work.

Every pinned file is hashed (streamed) and compared with the recipe's pin; a
mismatch or a missing file stops the run. The loader then sees a directory that
holds only the pinned files (symbolic links into the source), so nothing
unpinned (a stray generation_config.json, a second weights file) is ever read.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from exporter.atomic import staging_dir
from exporter.errors import EdgeExportError, IntegrityError, UsageError
from exporter.hashing import sha256_file, sha256_json
from recipes.base import Recipe


@dataclass(frozen=True)
class ResolvedCheckpoint:
    source: str
    revision: str
    directory: Path  # holds exactly the pinned files
    files: dict[str, str]  # name -> sha256 actually measured
    pinned: bool
    mismatches: list[dict] = field(default_factory=list)
    synthetic: bool = False  # the files match a synthesised tiny checkpoint's pin: not the family's real weights
    pin_file: dict | None = None  # the reviewed pin file the build followed (exporter/pins.py PinFile.record())

    @property
    def digest(self) -> str:
        return sha256_json(self.files)

    def to_json(self) -> dict:
        out = {"source": self.source, "revision": self.revision, "pinned": self.pinned, "files": dict(self.files), "synthetic": self.synthetic}
        if self.pin_file:
            out["pin_file"] = dict(self.pin_file)
        if self.mismatches:
            out["pin_mismatches"] = self.mismatches
        return out


def _synthesized_dir(recipe: Recipe, cache_root: Path) -> Path:
    d = cache_root / "checkpoints" / recipe.name / recipe.pin.revision
    if not all((d / f).is_file() for f in recipe.pin.files):
        if recipe.synthesize is None:
            raise UsageError(f"recipe {recipe.name} has no synthesiser and no checkpoint", "pass --checkpoint PATH")
        try:
            with staging_dir(d) as tmp:
                recipe.synthesize(tmp)
        except EdgeExportError:
            raise
        except Exception as e:
            from exporter.errors import filesystem_error_in

            fs = filesystem_error_in(e)
            if fs is not None:  # the library's error does not name the file: this does
                fs.message = f"{d}: writing the synthesised checkpoint: {fs.message}"
                raise fs from None
            raise
    return d


def resolve(recipe: Recipe, cache_root: Path, checkpoint: Path | None = None, allow_unpinned: bool = False,
            pin_file: dict | None = None) -> ResolvedCheckpoint:
    """`pin_file`: the record of the reviewed pin file whose digests `recipe.pin` carries (exporter/pins.py)."""
    if checkpoint is not None:
        src_dir = Path(checkpoint)
        if not src_dir.is_dir():
            raise UsageError(f"checkpoint {src_dir} is not a directory", "pass a Hugging Face layout directory (config.json, *.safetensors)")
        source = recipe.pin.source if pin_file and recipe.pin else f"local:{src_dir.resolve()}"
    elif recipe.pin is not None and recipe.pin.source.startswith("synthesized:"):
        src_dir = _synthesized_dir(recipe, cache_root)
        source = recipe.pin.source
    else:
        raise UsageError(f"recipe {recipe.name} needs a local checkpoint snapshot", "pass --checkpoint PATH")

    if recipe.pin is None:
        return _resolve_unpinned(recipe, src_dir, source, cache_root, allow_unpinned)
    pickled = [n for n in recipe.pin.files if n.endswith((".bin", ".pt", ".pth", ".pkl", ".ckpt"))]
    if pickled:
        raise IntegrityError(f"recipe {recipe.name} pins pickle checkpoint files {pickled}: refused", "convert the weights to safetensors")

    measured: dict[str, str] = {}
    mismatches: list[dict] = []
    for name, expected in sorted(recipe.pin.files.items()):
        path = src_dir / name
        if not path.is_file():
            raise IntegrityError(
                f"{path}: pinned checkpoint file is missing (recipe {recipe.name} pins {sorted(recipe.pin.files)})",
                "point --checkpoint at the complete snapshot",
            )
        actual = sha256_file(path)
        measured[name] = actual
        if actual != expected:
            mismatches.append({"file": name, "expected": expected, "actual": actual})
    if mismatches and not allow_unpinned:
        m = mismatches[0]
        whose = f"pin file {pin_file['file']}" if pin_file else f"the pin of recipe {recipe.name}"
        raise IntegrityError(
            f"{src_dir / m['file']}: SHA-256 {m['actual']} does not match {whose} ({m['expected']})"
            + (f" (and {len(mismatches) - 1} more file(s))" if len(mismatches) > 1 else ""),
            (f"delete {src_dir} to synthesise it again" if checkpoint is None else "use the pinned snapshot")
            + ", or pass --allow-unpinned to build anyway (the manifest then records it and a release audit fails it)",
        )

    check_headers(src_dir, measured)
    view = _view(cache_root, src_dir, measured)
    return ResolvedCheckpoint(
        source=source,
        revision=recipe.pin.revision if not mismatches else "unpinned",
        directory=view,
        files=measured,
        pinned=not mismatches,
        mismatches=mismatches,
        synthetic=not mismatches and recipe.pin.source.startswith("synthesized:"),
        pin_file=pin_file if not mismatches else None,
    )


def check_headers(src_dir: Path, names) -> None:
    """Every safetensors header readable and consistent (and the shard index with the shards), before a loader maps a
    byte: a truncated file or offsets past its end are an IntegrityError naming the file and the fault (exit 5)."""
    from exporter.pins import INDEX_SUFFIX, _tensors

    _tensors({n: Path(src_dir) / n for n in names if n.endswith(".safetensors") or n.endswith(INDEX_SUFFIX)})


def _view(cache_root: Path, src_dir: Path, measured: dict[str, str]) -> Path:
    """A directory of symbolic links to exactly the measured files."""
    view = cache_root / "resolved" / sha256_json({"src": str(src_dir.resolve()), "files": measured})
    if not view.is_dir():
        with staging_dir(view) as tmp:
            for name in measured:
                (tmp / name).parent.mkdir(parents=True, exist_ok=True)
                os.symlink((src_dir / name).resolve(), tmp / name)
    return view


def _resolve_unpinned(recipe: Recipe, src_dir: Path, source: str, cache_root: Path, allow_unpinned: bool) -> ResolvedCheckpoint:
    """A checkpoint for which the recipe has no pin: hash what a loader would read; build only if allowed."""
    names = ["config.json"] + sorted(p.name for p in src_dir.glob("*.safetensors")) + (
        ["model.safetensors.index.json"] if (src_dir / "model.safetensors.index.json").is_file() else [])
    if not (src_dir / "config.json").is_file() or len(names) < 2:
        raise IntegrityError(f"{src_dir}: no config.json and *.safetensors to load", "point --checkpoint at a safetensors snapshot (pickle files are refused)")
    measured = {n: sha256_file(src_dir / n) for n in names}
    if not allow_unpinned:
        raise IntegrityError(
            f"recipe {recipe.name} has no pin for the checkpoint at {src_dir} (config.json {measured['config.json'][:12]}...)",
            f"pin it after review: `edge-export pin {recipe.name.split('.')[0]} --checkpoint {src_dir} --output PIN.json`, then build with "
            "--pin PIN.json; or pass --allow-unpinned to build anyway (the manifest records every digest and pinned: false, and a release "
            "audit fails it)",
        )
    check_headers(src_dir, measured)
    return ResolvedCheckpoint(source=source, revision="unpinned", directory=_view(cache_root, src_dir, measured), files=measured,
                              pinned=False, mismatches=[{"file": n, "expected": None, "actual": d} for n, d in measured.items()])

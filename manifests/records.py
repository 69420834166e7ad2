"""Run records: what the last attempt at (recipe, target, precision) produced, where the matrix finds it.

One JSON file per attempt key, ``OUT/RECIPE/TARGET/PRECISION.record.json``,
rewritten atomically by every attempt, so it always describes the latest one.
Statuses follow the roadmap's per-cell record: ``rejected`` (a plan rejection,
with its reason code), ``missing-prerequisite`` (what this host or the recipe
lacks), ``failed`` (an attempted run: failing stage, reason, evidence, next
repair) and ``verified`` (a signed bundle passed parity; the bundle itself is
re-checked by whoever reads the record). Torch-free.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

RECORD_SCHEMA = "edge-export.record/v1"
STATUSES = ("rejected", "missing-prerequisite", "failed", "verified")
SUFFIX = ".record.json"


def _component(name: str, what: str) -> str:
    """A record path component: a plain name, never a path (a crafted --format or recipe must not escape the root)."""
    if not name or "/" in name or "\\" in name or name in (".", "..") or name.startswith(".") or "\0" in name:
        raise ValueError(f"{what} {name!r} is not a plain name")
    return name


def record_path(out_root: Path, recipe: str, target: str, precision: str) -> Path:
    """`precision` names the variant: the precision, or FORMAT-PRECISION for a target's non-default format."""
    return Path(out_root) / _component(recipe, "recipe") / _component(target, "target") / f"{_component(precision, 'variant')}{SUFFIX}"


def write_record(
    out_root: Path,
    recipe: str,
    target: str,
    precision: str,
    status: str,
    *,
    reason: str,
    fix: str | None = None,
    code: str | None = None,
    stage: str | None = None,
    evidence: list[str] | None = None,
    plan: dict | None = None,
    command: str | None = None,
    bundle: str | None = None,
    variant: str | None = None,
    checkpoint: dict | None = None,
) -> Path:
    """`checkpoint`: what the attempt built from, where known: {"twin": a family's synthetic tiny checkpoint, "pinned",
    "source", "revision"}; the matrix counts twin attempts as toolchain readiness, the others as the family's own."""
    from exporter.atomic import write_text_atomic

    if status not in STATUSES:
        raise ValueError(f"unknown record status {status!r}")
    path = record_path(out_root, recipe, target, variant or precision)
    rec = {
        "schema": RECORD_SCHEMA,
        "recipe": recipe,
        "target": target,
        "precision": precision,
        "format": (plan or {}).get("format"),
        "status": status,
        "code": code,
        "stage": stage,
        "reason": reason,
        "next_repair": fix,
        "evidence": evidence or [],
        "bundle": bundle,
        "command": command,
        "plan": plan,
        "checkpoint": checkpoint,
        "time": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
    }
    write_text_atomic(path, json.dumps(rec, indent=2, sort_keys=True) + "\n")
    return path


def read_records(out_root: Path, recipe: str | None = None) -> list[tuple[Path, dict]]:
    """Every readable record under out_root (optionally of one recipe); unreadable ones are reported, not skipped."""
    root = Path(out_root)
    pattern = f"{recipe}/*/*{SUFFIX}" if recipe else f"*/*/*{SUFFIX}"
    out = []
    for p in sorted(root.glob(pattern)):
        from exporter.errors import EdgeExportError
        from exporter.safejson import load_json

        try:
            data = load_json(p, "a run record", 16 << 20)
            if not isinstance(data, dict) or data.get("schema") != RECORD_SCHEMA:
                raise ValueError(f"schema {data.get('schema') if isinstance(data, dict) else None!r}")
        except (OSError, ValueError, EdgeExportError) as e:
            data = {"schema": None, "status": "failed", "stage": "record", "reason": f"unreadable record: {e}",
                    "next_repair": "rerun the command that wrote it", "recipe": p.parent.parent.name, "target": p.parent.name,
                    "precision": p.name[: -len(SUFFIX)], "evidence": [str(p)]}
        out.append((p, data))
    return out

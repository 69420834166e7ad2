"""JSON documents from files a user (or an attacker) controls: size, nesting depth, duplicate keys and non-finite
numbers are refused with the file named, before anything reads a field.

Python's json module follows nesting by recursion (200 000 `[` end in RecursionError), keeps the last of two equal
keys (`"target"` twice: the second wins silently) and accepts NaN / Infinity, which JSON does not have. A manifest,
a parity report, a pin file, a record or a policy is read through `load_json` instead. Torch-free, standard library only.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from exporter.errors import IntegrityError

MAX_DEPTH = 64
_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.S)
_BRACKETS = bytes(range(256)).translate(None, b"[]{}")  # every byte but brackets: what `translate` deletes


class JsonRefused(IntegrityError):
    pass


def _unique(pairs):
    d = {}
    for k, v in pairs:
        if k in d:
            raise ValueError(f"duplicate key {k!r}")
        d[k] = v
    return d


def _no_constant(name):
    raise ValueError(f"{name} is not a JSON number")


def depth(raw: bytes) -> int:
    """The deepest nesting of arrays and objects, counted outside strings (no recursion)."""
    only = _STRING.sub(b'""', raw).translate(None, _BRACKETS)
    level = deepest = 0
    for b in only:
        if b in (0x5B, 0x7B):  # [ {
            level += 1
            deepest = max(deepest, level)
        else:
            level -= 1
    return deepest


def loads(raw: bytes, where: str, max_depth: int = MAX_DEPTH, fix: str = "the file is damaged or crafted: rebuild or rewrite it"):
    d = depth(raw)
    if d > max_depth:
        raise JsonRefused(f"{where}: JSON nested {d} levels deep (at most {max_depth} are read)", fix)
    try:
        return json.loads(raw.decode("utf-8"), object_pairs_hook=_unique, parse_constant=_no_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise JsonRefused(f"{where}: not valid JSON ({str(e)[:300]})", fix) from None


def load_json(path: Path, what: str, max_bytes: int, max_depth: int = MAX_DEPTH,
              fix: str = "the file is damaged or crafted: rebuild or rewrite it"):
    """Read and parse `path` (at most `max_bytes`), refusing what `loads` refuses; `what` names the document."""
    path = Path(path)
    try:
        size = path.stat().st_size
        if size > max_bytes:
            raise JsonRefused(f"{path}: {what} is {size} bytes, more than the {max_bytes} any real one has", fix)
        raw = path.read_bytes()
    except FileNotFoundError:
        raise JsonRefused(f"{path} is missing ({what})", fix) from None
    except OSError as e:
        raise JsonRefused(f"{path}: cannot read {what} ({e.strerror or e})", "check the path and its permissions") from None
    return loads(raw, f"{path} ({what})", max_depth, fix)

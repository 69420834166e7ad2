"""Reading and checking a safetensors file's header without torch, numpy or the safetensors package.

The format (https://github.com/huggingface/safetensors, "Format"): 8 bytes little-endian header length N, N bytes
of UTF-8 JSON mapping each tensor name to {dtype, shape, data_offsets: [begin, end]} (offsets relative to the byte
after the header) plus an optional "__metadata__" string map, then the data. Every fault a damaged or crafted file
can have is reported as an IntegrityError naming the file and the fault, before any loader touches the data:
truncation, a header length past the file, bad JSON, an unknown dtype, a shape whose byte count disagrees with its
offsets, offsets past the end, overlapping tensors or bytes no tensor owns.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from math import prod
from pathlib import Path

from exporter.errors import IntegrityError

ITEMSIZE = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U64": 8, "U32": 4, "U16": 2,
            "U8": 1, "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1}
MAX_HEADER = 100 << 20  # the safetensors library's own limit on a header (100 MB)
FLOAT_DTYPES = frozenset({"F64", "F32", "F16", "BF16", "F8_E4M3", "F8_E5M2"})


class CorruptCheckpoint(IntegrityError):
    pass


@dataclass(frozen=True)
class TensorEntry:
    dtype: str
    shape: tuple[int, ...]
    begin: int  # absolute byte offset in the file
    end: int

    @property
    def nbytes(self) -> int:
        return self.end - self.begin


@dataclass(frozen=True)
class Header:
    path: Path
    tensors: dict[str, TensorEntry]
    metadata: dict[str, str]
    data_start: int


def _fault(path: Path, what: str) -> CorruptCheckpoint:
    return CorruptCheckpoint(f"{path}: corrupt safetensors file: {what}",
                             "the file is damaged, truncated or not a safetensors file: download or copy it again and check its "
                             "SHA-256 against the source (edge-export pin records them)")


def _unique_object(pairs):
    d = {}
    for k, v in pairs:
        if k in d:
            raise ValueError(f"duplicate key {k!r}")
        d[k] = v
    return d


def read_header(path: Path) -> Header:
    path = Path(path)
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) < 8:
                raise _fault(path, f"{size} bytes, shorter than the 8-byte header length")
            (n,) = struct.unpack("<Q", head)
            if n > MAX_HEADER:
                raise _fault(path, f"header length {n} exceeds the format's limit of {MAX_HEADER} bytes")
            if 8 + n > size:
                raise _fault(path, f"header length {n} runs past the end of the {size}-byte file (truncated?)")
            raw = f.read(n)
    except OSError as e:
        raise IntegrityError(f"{path}: cannot read ({e.strerror or e})", "check the path and its permissions") from None
    try:
        doc = json.loads(raw.decode("utf-8"), object_pairs_hook=_unique_object)
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise _fault(path, f"header is not a JSON object ({str(e)[:200]})") from None
    if not isinstance(doc, dict):
        raise _fault(path, "header is not a JSON object")
    meta = doc.pop("__metadata__", {}) or {}
    if not isinstance(meta, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in meta.items()):
        raise _fault(path, "__metadata__ is not a map of strings")
    data_start, data_size = 8 + n, size - 8 - n
    tensors: dict[str, TensorEntry] = {}
    for name, t in doc.items():
        if not isinstance(t, dict) or set(t) != {"dtype", "shape", "data_offsets"}:
            raise _fault(path, f"tensor {name!r}: entry is not {{dtype, shape, data_offsets}}")
        dtype, shape, offs = t["dtype"], t["shape"], t["data_offsets"]
        if dtype not in ITEMSIZE:
            raise _fault(path, f"tensor {name!r}: unknown dtype {dtype!r}")
        if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
            raise _fault(path, f"tensor {name!r}: shape {shape!r} is not a list of non-negative integers")
        if (not isinstance(offs, list) or len(offs) != 2 or not all(isinstance(o, int) and not isinstance(o, bool) for o in offs)
                or not 0 <= offs[0] <= offs[1]):
            raise _fault(path, f"tensor {name!r}: data_offsets {offs!r} are not [begin, end] with 0 <= begin <= end")
        if offs[1] > data_size:
            raise _fault(path, f"tensor {name!r}: data_offsets {offs} end past the file's {data_size} data bytes (truncated?)")
        want = prod(shape) * ITEMSIZE[dtype]
        if offs[1] - offs[0] != want:
            raise _fault(path, f"tensor {name!r}: {dtype} {shape} needs {want} bytes, its offsets span {offs[1] - offs[0]}")
        tensors[name] = TensorEntry(dtype, tuple(shape), data_start + offs[0], data_start + offs[1])
    spans = sorted((t.begin, t.end, k) for k, t in tensors.items() if t.end > t.begin)
    at = data_start
    for begin, end, k in spans:
        if begin < at:
            raise _fault(path, f"tensor {k!r} overlaps the tensor before it")
        if begin > at:
            raise _fault(path, f"{begin - at} bytes before tensor {k!r} belong to no tensor")
        at = end
    if at != size and spans:
        raise _fault(path, f"{size - at} trailing bytes belong to no tensor")
    return Header(path, tensors, meta, data_start)

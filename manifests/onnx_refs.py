"""The files an ONNX graph refers to, read from its protobuf without the onnx package (torch-free, numpy-free).

An ONNX model can name files beside it: an initializer's external data (`TensorProto.external_data`, key
`location`), in the graph, in sparse initializers, in node attributes and in every subgraph and function; and an
EPContext node with `embed_mode` 0 names its compiled context binary (`ep_cache_context`). A signed bundle must not
load bytes from outside itself, so the gate, `verify` and the audit list these references and refuse any that is
absolute, leaves the bundle, or names a file the signature does not cover. Only the protobuf wire format is read
(field numbers of onnx.proto3); nesting is bounded.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path, PurePosixPath

# onnx.proto3 field numbers
MODEL_GRAPH, MODEL_FUNCTIONS = 7, 25
GRAPH_NODE, GRAPH_INITIALIZER, GRAPH_SPARSE_INITIALIZER = 1, 5, 15
NODE_NAME, NODE_OP_TYPE, NODE_ATTRIBUTE, NODE_DOMAIN = 3, 4, 5, 7
ATTR_NAME, ATTR_I, ATTR_S, ATTR_T, ATTR_G, ATTR_TENSORS, ATTR_GRAPHS, ATTR_SPARSE, ATTR_SPARSES = 1, 3, 4, 5, 6, 10, 11, 22, 23
TENSOR_NAME, TENSOR_EXTERNAL_DATA = 8, 13
SPARSE_VALUES, SPARSE_INDICES = 1, 2
ENTRY_KEY, ENTRY_VALUE = 1, 2
FUNCTION_NODE = 7
MAX_NESTING = 32


class OnnxRefError(ValueError):
    pass


@dataclass(frozen=True)
class Reference:
    kind: str  # "external-data" | "ep-context"
    location: str
    owner: str  # tensor or node name


def _varint(buf: memoryview, i: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        if i >= len(buf) or shift > 63:
            raise OnnxRefError("truncated or malformed varint")
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, i
        shift += 7


def _fields(buf: memoryview):
    """(field number, wire type, value) of one message: int for varints, memoryview for length-delimited."""
    i = 0
    while i < len(buf):
        key, i = _varint(buf, i)
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, i = _varint(buf, i)
        elif wt == 1:
            v, i = None, i + 8
        elif wt == 5:
            v, i = None, i + 4
        elif wt == 2:
            n, i = _varint(buf, i)
            if i + n > len(buf):
                raise OnnxRefError("a length-delimited field runs past the message")
            v, i = buf[i:i + n], i + n
        else:
            raise OnnxRefError(f"unsupported wire type {wt}")
        if i > len(buf):
            raise OnnxRefError("truncated message")
        yield num, wt, v


def _text(v) -> str:
    return bytes(v).decode("utf-8", errors="replace")


def _tensor(buf, out: list) -> None:
    name, loc = "", None
    for num, wt, v in _fields(buf):
        if num == TENSOR_NAME and wt == 2:
            name = _text(v)
        elif num == TENSOR_EXTERNAL_DATA and wt == 2:
            key = value = None
            for n2, w2, v2 in _fields(v):
                if n2 == ENTRY_KEY and w2 == 2:
                    key = _text(v2)
                elif n2 == ENTRY_VALUE and w2 == 2:
                    value = _text(v2)
            if key == "location":
                loc = value
    if loc is not None:
        out.append(Reference("external-data", loc, name))


def _sparse(buf, out: list) -> None:
    for num, wt, v in _fields(buf):
        if num in (SPARSE_VALUES, SPARSE_INDICES) and wt == 2:
            _tensor(v, out)


def _node(buf, out: list, level: int) -> None:
    name = op = domain = ""
    attrs = []
    for num, wt, v in _fields(buf):
        if wt != 2:
            continue
        if num == NODE_NAME:
            name = _text(v)
        elif num == NODE_OP_TYPE:
            op = _text(v)
        elif num == NODE_DOMAIN:
            domain = _text(v)
        elif num == NODE_ATTRIBUTE:
            attrs.append(v)
    embed_mode, cache = 1, None
    for a in attrs:
        aname = ""
        for num, wt, v in _fields(a):
            if num == ATTR_NAME and wt == 2:
                aname = _text(v)
            elif num == ATTR_I and wt == 0 and aname == "embed_mode":
                embed_mode = v
            elif num == ATTR_S and wt == 2 and aname == "ep_cache_context":
                cache = v
            elif num in (ATTR_T, ATTR_TENSORS) and wt == 2:
                _tensor(v, out)
            elif num in (ATTR_SPARSE, ATTR_SPARSES) and wt == 2:
                _sparse(v, out)
            elif num in (ATTR_G, ATTR_GRAPHS) and wt == 2:
                _graph(v, out, level + 1)
        # attribute fields may come in any order: read embed_mode again where the name followed the value
        for num, wt, v in _fields(a):
            if num == ATTR_I and wt == 0 and aname == "embed_mode":
                embed_mode = v
    if op == "EPContext" and cache is not None and embed_mode == 0:
        out.append(Reference("ep-context", _text(cache), name or f"{domain}:{op}"))


def _graph(buf, out: list, level: int) -> None:
    if level > MAX_NESTING:
        raise OnnxRefError(f"subgraphs nested more than {MAX_NESTING} deep")
    for num, wt, v in _fields(buf):
        if wt != 2:
            continue
        if num == GRAPH_INITIALIZER:
            _tensor(v, out)
        elif num == GRAPH_SPARSE_INITIALIZER:
            _sparse(v, out)
        elif num == GRAPH_NODE:
            _node(v, out, level)


def references(data: bytes) -> list[Reference]:
    """Every file reference of a serialized ModelProto."""
    out: list[Reference] = []
    buf = memoryview(data)
    for num, wt, v in _fields(buf):
        if wt != 2:
            continue
        if num == MODEL_GRAPH:
            _graph(v, out, 0)
        elif num == MODEL_FUNCTIONS:
            for n2, w2, v2 in _fields(v):
                if n2 == FUNCTION_NODE and w2 == 2:
                    _node(v2, out, 1)
    return out


def named_files(graph: Path) -> list[str]:
    """The files a graph names (its external data, an EPContext model's context binary), sorted, once each."""
    return sorted({r.location for r in references(Path(graph).read_bytes())})


def reference_findings(bundle: Path, graph_rel: str, signed_files) -> list[str]:
    """What is wrong with the references of one graph of a bundle ([] when every one is a signed file inside it)."""
    graph = Path(bundle) / graph_rel
    try:
        refs = references(graph.read_bytes())
    except OnnxRefError as e:
        return [f"{graph_rel}: not a readable ONNX model ({e})"]
    found = []
    base = PurePosixPath(graph_rel).parent
    root = Path(bundle).resolve()
    for r in refs:
        p = PurePosixPath(r.location)
        rel = str(base / p) if str(base) != "." else str(p)
        if p.is_absolute() or ".." in p.parts or not r.location or "\\" in r.location or r.location.startswith("/"):
            found.append(f"{graph_rel}: {r.kind} of {r.owner!r} points outside the bundle ({r.location!r})")
        elif not (root / rel).resolve().is_relative_to(root):
            found.append(f"{graph_rel}: {r.kind} of {r.owner!r} resolves outside the bundle ({r.location!r})")
        elif rel not in signed_files:
            found.append(f"{graph_rel}: {r.kind} of {r.owner!r} names {rel!r}, a file the signature does not cover")
    return found

"""The layering, read from the source (ast; nothing is imported): no import cycles, a torch-free floor that imports
nothing above it, a trust boundary that cannot reach torch, onnx, transformers, executorch or lowering code, and a
pipeline that names no format and no family (docs/ARCHITECTURE.md)."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("exporter", "recipes", "calibration", "manifests", "verify")
HEAVY = {"torch", "onnx", "transformers", "executorch", "torchao", "onnxscript", "quark"}
# modules holding a name -> "module" registry that importlib resolves: each entry is an import edge
REGISTRIES = ("exporter.backends", "exporter.adapters", "recipes")

FLOOR = {f"exporter.{m}" for m in ("errors", "names", "hashing", "atomic", "locks", "versions", "hostcpu", "hostinfo", "targets",
                                   "routes", "child", "safejson", "safetensors_header", "runtime", "loaders", "heap",
                                   "htp_sharing")}
TRUST_BOUNDARY = ("manifests.manifest", "manifests.signing", "verify.gate", "verify.thresholds", "manifests.audit")
# The one place the trust boundary may reach a heavy library: the floor's loaders open a bundle's `.pte` programs with the
# ExecuTorch runtime, whose Python binding takes torch tensors; imported inside the function that opens a program
RUNTIME_OPENERS = {"exporter.loaders": {"executorch", "torch"}}
# backend modules that describe a format (torch-free); every other module under exporter.backends is lowering code
BACKEND_DESCRIPTIONS = re.compile(r"^exporter\.backends(\.(base|\w+_format))?$")
PIPELINE = ("exporter.pipeline", "exporter.build", "exporter.stage_verify", "exporter.stage_memory", "exporter.publish")


@dataclass
class Module:
    name: str
    path: Path
    top: set[str] = field(default_factory=set)  # imported when the module is imported
    lazy: set[str] = field(default_factory=set)  # imported inside a function
    external_top: set[str] = field(default_factory=set)  # third-party top-level packages, module level
    external_lazy: set[str] = field(default_factory=set)

    @property
    def edges(self) -> set[str]:
        return self.top | self.lazy


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING")


def _imports(tree: ast.Module, name: str, is_package: bool):
    """(imported module name, at module level?) for every import statement, TYPE_CHECKING blocks excluded."""
    out = []

    def visit(node, in_function: bool):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                for c in child.orelse:
                    visit_stmt(c, in_function)
                continue
            visit_stmt(child, in_function)

    def visit_stmt(child, in_function):
        if isinstance(child, ast.Import):
            out.extend((a.name, not in_function) for a in child.names)
        elif isinstance(child, ast.ImportFrom):
            if child.level:
                base = name.split(".") if is_package else name.split(".")[:-1]
                base = base[: len(base) - (child.level - 1)]
                mod = ".".join(base + ([child.module] if child.module else []))
            else:
                mod = child.module or ""
            out.append((mod, not in_function))
            out.extend((f"{mod}.{a.name}", not in_function) for a in child.names)
        visit(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

    visit(tree, False)
    return out


def _registry_entries(tree: ast.Module) -> set[str]:
    """The module names of a registry: every string constant of a module-level dict named REGISTRY or *_REGISTRY, or of
    recipes' lazy table (values "module" or "module:attribute")."""
    names = set()
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) else node.target if isinstance(node, ast.AnnAssign) else None
        if isinstance(target, ast.Name) and "REGISTRY" in target.id.upper() and isinstance(node.value, ast.Dict):
            for v in node.value.values:
                for c in ast.walk(v):
                    if isinstance(c, ast.Constant) and isinstance(c.value, str) and re.fullmatch(r"[\w.]+(:\w+)?", c.value):
                        names.add(c.value.split(":")[0])
    return names


def build_graph() -> dict[str, Module]:
    mods = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            mods[_module_name(path)] = Module(_module_name(path), path)
    for m in mods.values():
        tree = ast.parse(m.path.read_text(), str(m.path))
        pairs = _imports(tree, m.name, m.path.name == "__init__.py")
        if m.name in REGISTRIES:
            registered = _registry_entries(tree)
            assert registered, f"{m.name}: no registry found (the test reads a dict named REGISTRY)"
            pairs += [(r, False) for r in registered]
        for imported, top in pairs:
            if not imported:
                continue
            if imported.split(".")[0] not in PACKAGES:
                (m.external_top if top else m.external_lazy).add(imported.split(".")[0])
                continue
            target = imported
            while target not in mods and "." in target:  # `from pkg import name`: the module, else its package
                target = target.rsplit(".", 1)[0]
            if target in mods and target != m.name:
                (m.top if top else m.lazy).add(target)
    return mods


GRAPH = build_graph()


def _closure(start: str, graph=GRAPH) -> dict[str, str | None]:
    """Every module reachable from `start` over all import edges, with the module that imported it."""
    parent: dict[str, str | None] = {start: None}
    stack = [start]
    while stack:
        v = stack.pop()
        for w in sorted(graph[v].edges):
            if w not in parent:
                parent[w] = v
                stack.append(w)
    return parent


def _chain(parent, node) -> str:
    chain = [node]
    while parent[chain[-1]] is not None:
        chain.append(parent[chain[-1]])
    return " <- ".join(chain)


def _cycles(graph) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root].edges)))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w].edges))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
    return out


def test_graph_is_read_from_the_source():
    # the reader sees what it must: module-level, lazy and registry edges, and TYPE_CHECKING imports left out
    assert "exporter.loaders" in GRAPH["verify.gate"].lazy
    assert "exporter.backends.onnx_format" in GRAPH["exporter.backends"].lazy  # a registry entry
    assert "recipes.tiny_lm" in GRAPH["recipes"].edges
    assert "exporter.adapters.decoder_lm" in GRAPH["exporter.adapters"].edges
    assert "recipes.cost" not in GRAPH["recipes.base"].edges  # imported only under TYPE_CHECKING
    assert "torch" in GRAPH["exporter.loaders"].external_lazy
    assert len(GRAPH) > 100


def test_cycle_detection_finds_a_cycle():
    fake = {"a": Module("a", Path("a"), top={"b"}), "b": Module("b", Path("b"), lazy={"c"}), "c": Module("c", Path("c"), top={"a"}),
            "d": Module("d", Path("d"), top={"a"})}
    assert _cycles(fake) == [["a", "b", "c"]]


def test_no_import_cycles():
    assert _cycles(GRAPH) == [], "import cycles (module-level, lazy and registry imports all count)"


def test_the_floor_imports_nothing_above_it():
    missing = FLOOR - set(GRAPH)
    assert not missing, f"floor modules that do not exist: {missing}"
    for name in sorted(FLOOR):
        above = GRAPH[name].edges - FLOOR
        assert not above, f"{name} (floor) imports {sorted(above)}, which are above the floor"
        heavy = (GRAPH[name].external_top | GRAPH[name].external_lazy) & HEAVY
        assert heavy <= RUNTIME_OPENERS.get(name, set()), f"{name} (floor) imports {sorted(heavy)}"
        assert not GRAPH[name].external_top & HEAVY, f"{name} (floor) imports {sorted(GRAPH[name].external_top & HEAVY)} at module level"


def test_the_trust_boundary_reaches_no_heavy_library_and_no_lowering_code():
    for start in TRUST_BOUNDARY:
        reach = _closure(start)
        for name in sorted(reach):
            m = GRAPH[name]
            heavy = ((m.external_top | m.external_lazy) & HEAVY) - RUNTIME_OPENERS.get(name, set())
            assert not heavy, f"{start} reaches {name}, which imports {sorted(heavy)}: {_chain(reach, name)}"
            if name.startswith("exporter.backends"):
                assert BACKEND_DESCRIPTIONS.match(name), f"{start} reaches lowering code {name}: {_chain(reach, name)}"
            assert not name.startswith(("exporter.adapters", "exporter.models")), f"{start} reaches {name}: {_chain(reach, name)}"


def test_backend_descriptions_and_recipes_are_torch_free():
    for name, m in GRAPH.items():
        if BACKEND_DESCRIPTIONS.match(name) or name.startswith("recipes"):
            heavy = (m.external_top | m.external_lazy) & HEAVY
            assert not heavy, f"{name} imports {sorted(heavy)}"
            lowering = {e for e in m.edges if e.startswith("exporter.backends") and not BACKEND_DESCRIPTIONS.match(e)}
            assert not lowering, f"{name} imports lowering code {sorted(lowering)}"


# names a pipeline module must not contain: every format, family and model-kind name edge-export knows
FORMAT_AND_FAMILY_WORDS = re.compile(
    r"onnx|qnn|executorch|ryzen|vitis|\.pte\b|\bhtp\b|\bgpu\b|cuda|migraphx|xnnpack|"
    r"spark|gemma|qwen|minicpm|internvla|tiny[-_]|\b(tts|vla|lm|decoder|vision|audio|speech|codec|text)\b", re.IGNORECASE)


def test_pipeline_modules_name_no_format_and_no_family():
    from recipes import recipe_names

    words = FORMAT_AND_FAMILY_WORDS
    for name in PIPELINE:
        text = GRAPH[name].path.read_text()
        hits = sorted({m.group(0) for m in words.finditer(text)})
        assert not hits, f"{GRAPH[name].path.relative_to(ROOT)} names {hits}: format and family knowledge belongs in a backend or an adapter"
        for recipe in recipe_names():
            assert recipe not in text, f"{name} names the recipe {recipe}"
    # the pattern finds what it should (a guard against a regex that matches nothing)
    assert words.search('if plan.format == "qnn-context":') and words.search("harness = 'minicpm-o'")

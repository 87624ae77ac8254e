"""The modules of core/ (``dynashape``) import each other without a circle: read from the
source, every import counted, the ones inside functions too (a late import closes a circle as
surely as one at the top). A circle found is printed module by module."""
from __future__ import annotations

import ast
from pathlib import Path

CORE = Path(__file__).resolve().parents[2] / "core"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(CORE).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)      # "" is the package itself (dynashape/__init__.py)


def _modules() -> dict:
    return {_module_name(p): p for p in CORE.rglob("*.py") if "__pycache__" not in p.parts}


def _imported(module: str, path: Path, modules: dict) -> set:
    """The core modules ``module`` imports (``from . import x``, ``from .x import y``,
    ``from dynashape.x import y``, ``import dynashape.x``), wherever the statement is.
    ``from . import name`` of a name that is no core module is the package's attribute,
    unless the name is a package of its own folder (``ops_builtin``)."""
    package = module.split(".") if module else []
    if path.name != "__init__.py":
        package = package[:-1]
    found = set()
    for node in _statements(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - (node.level - 1)] + (node.module.split(".") if node.module else [])
            elif node.module and (node.module == "dynashape" or node.module.startswith("dynashape.")):
                base = node.module.split(".")[1:]
            else:
                continue
            if base and base[0] == "ops_builtin":
                continue
            for alias in node.names:
                sub = ".".join(base + [alias.name])
                if sub in modules:
                    found.add(sub)
                elif alias.name != "ops_builtin":
                    found.add(".".join(base))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("dynashape.") and alias.name[len("dynashape."):] in modules:
                    found.add(alias.name[len("dynashape."):])
    found.discard(module)
    return {m for m in found if m in modules}


def _statements(tree: ast.AST):
    """Every node of the tree but those under ``if TYPE_CHECKING:`` (imports for annotations
    only, never run)."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            yield from (n for child in node.orelse for n in [child, *_statements(child)])
            continue
        yield node
        yield from _statements(node)


def _circles(edges: dict) -> list:
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, circles = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                circles.append(sorted(component))
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return circles


def test_no_module_of_core_imports_one_that_imports_it_back():
    modules = _modules()
    edges = {m: _imported(m, p, modules) for m, p in modules.items()}
    circles = _circles(edges)
    described = ["; ".join(f"{m or 'dynashape'} -> {sorted(edges[m] & set(c))}" for m in c) for c in circles]
    assert circles == [], "import circles in core/:\n" + "\n".join(described)


def test_the_reader_finds_late_imports_and_package_attributes(tmp_path):
    """(the checker's own check: a late import is an edge, an attribute of the package an
    edge to the package, another folder's package none)"""
    modules = {"": CORE / "__init__.py", "a": tmp_path / "a.py", "b": tmp_path / "b.py", "cli": CORE / "cli"}
    (tmp_path / "a.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .cli import x\n"
                                   "def f():\n    from .b import g\n    from . import __version__, ops_builtin\n")
    assert _imported("a", tmp_path / "a.py", modules) == {"b", ""}
    assert _circles({"a": {"b"}, "b": {"a"}, "c": set()}) == [["a", "b"]]


#: docs/ARCHITECTURE.md's layers of core/: a module imports only modules of its layer or below
#: (a package's modules take the package's layer; a module not listed is the API, layer 5)
LAYERS = {
    0: "errors symbolic dtypes onnx_proto distributions usercache limits fpstate threads version re2",
    1: "weights external_data onnx_schemas validate model weight_arena",
    2: "records shapes rewrite hookspecs libindex registry",
    3: "graph node inference optimize compilation symbolic_inference codegen planner segments emit program",
    4: "plan executor engine compiled subgraph profiling gcpause",
}
_LAYER_OF = {m: k for k, names in LAYERS.items() for m in names.split()}


def layer_of(module: str) -> int:
    return _LAYER_OF.get(module, _LAYER_OF.get(module.split(".")[0], 5))


def test_no_module_of_core_imports_a_higher_layer():
    modules = _modules()
    assert set(_LAYER_OF) <= set(modules), f"layers name no module: {sorted(set(_LAYER_OF) - set(modules))}"
    up = [f"{m or 'dynashape'} (layer {layer_of(m)}) imports {d} (layer {layer_of(d)})"
          for m, p in sorted(modules.items()) for d in sorted(_imported(m, p, modules)) if layer_of(d) > layer_of(m)]
    assert up == [], "imports up the layers of docs/ARCHITECTURE.md:\n" + "\n".join(up)


#: what the plugins (ops_builtin with its compiled kernels, plugins_example; their tests aside) may import of
#: core/: the plugin API (layers 0-2), and by name the few lower-level pieces ops reach for
#: (graph-building ops read model's Graph, If/Loop/Scan copy values as the program does, the
#: oneDNN kernels pack weights into weight_arena's memory)
PLUGIN_API = {m for m in _LAYER_OF if _LAYER_OF[m] <= 2} | {"ops_builtin", "program"}


def test_the_plugins_import_only_the_plugin_api_of_core():
    root = CORE.parent
    sources = [p for folder in ("ops_builtin", "plugins_example") for p in (root / folder).rglob("*.py")
               if "tests" not in p.relative_to(root).parts and "__pycache__" not in p.parts]
    assert sources
    beyond = []
    for path in sources:
        for node in _statements(ast.parse(path.read_text())):
            names = ([node.module] if isinstance(node, ast.ImportFrom) and node.module and not node.level else
                     [a.name for a in node.names] if isinstance(node, ast.Import) else [])
            for name in names:
                if name.startswith("dynashape.") and name.split(".")[1] not in PLUGIN_API:
                    beyond.append(f"{path.relative_to(root)}: {name}")
    assert beyond == [], "plugins importing core beyond the plugin API:\n" + "\n".join(sorted(set(beyond)))


def _private_uses_of_ops_builtin(path: Path) -> list:
    """``from dynashape.ops_builtin[.x] import _name`` and ``module._name`` of a module so
    imported, in one source file."""
    tree = ast.parse(path.read_text())
    modules, found = set(), []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and not node.level and node.module and \
                (node.module == "dynashape.ops_builtin" or node.module.startswith("dynashape.ops_builtin.")):
            for alias in node.names:
                if alias.name.startswith("_"):
                    found.append(f"{node.module}.{alias.name}")
                modules.add(alias.asname or alias.name)
        elif isinstance(node, ast.Import):
            modules.update(a.asname for a in node.names if a.asname and a.name.startswith("dynashape.ops_builtin"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in modules \
                and node.attr.startswith("_") and not node.attr.startswith("__"):
            found.append(f"{node.value.id}.{node.attr}")
    return found


def test_only_ops_builtin_and_its_compiled_kernels_use_its_private_names():
    """The compiled kernels (ops_builtin/fast) build on the numpy kernels' preparation and
    scratch, inside the package that owns both; a third-party plugin (plugins_example) or
    core/ uses ops_builtin only through its registered ops."""
    root = CORE.parent
    sources = [p for folder in ("core", "plugins_example") for p in (root / folder).rglob("*.py")
               if "__pycache__" not in p.parts]
    found = [f"{p.relative_to(root)}: {use}" for p in sources for use in _private_uses_of_ops_builtin(p)]
    assert found == [], "private names of ops_builtin used outside it:\n" + "\n".join(found)
    probe = root / "ops_builtin" / "fast" / "pool.py"
    assert _private_uses_of_ops_builtin(probe), "the reader finds the compiled kernels' own uses"


"""House rules, read off the source with ``ast`` (nothing is imported):

- no import cycles in ``zoo/``, and every import goes down the layer table ``LAYERS``
  (DESIGN.md's dependency direction). Every import counts: inside functions (they run as
  surely as top-level ones, only later), under ``if TYPE_CHECKING:`` (an annotation is a
  dependency of the design even when it never runs), and by name (a string naming a zoo
  module, ``"zoo.hub.config"`` or ``"zoo.hub.config:read"``, as ``importlib.import_module``
  takes them: the CLI's subcommand table, the presets' family list, a forkserver's preload);
- the core names no concrete component, and out-of-tree plugins use only public API;
- no function over 60 lines, no file in ``zoo/`` over 400.

The import graph has one node per module. An import of ``a.b.c`` is an edge to the module
``a.b.c`` only: Python runs the packages ``a`` and ``a.b`` first, but that holds for every
submodule, so it is no design dependency (``from zoo.quant import kernels`` depends on the
submodule, not on what ``zoo/quant/__init__.py`` defines). ``from pkg import name`` where
``name`` is not a submodule is an edge to ``pkg``. A module that imports its package's own
submodules by a computed name (``import_module(f"{__package__}.{name}")``) has an edge to
each of them.

Two things are how plugins are found, not layering, and are the only imports not counted:
the registry's ``BUILTIN_PLUGINS`` (loaded as entry points are; entry points are no source),
and the root package's lazy facade: ``zoo.build`` imports ``zoo.model.build`` on first use,
through ``_LAZY`` and ``__getattr__`` (its ``if TYPE_CHECKING:`` block names the same objects
for type checkers), so an edge to ``zoo`` is resolved per name: a name of ``_LAZY`` or of
that block is an edge to the module it comes from; a function defined in ``zoo/__init__.py``
is an edge to each module that function imports; anything else (``__version__``,
``hookimpl``) is an edge to ``zoo`` itself, whose edges are only its other module-level
imports. Attribute use after ``import zoo`` (``zoo.spec(...)``) is resolved the same way.
"""

from __future__ import annotations

import ast
import functools
import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "zoo"
REGISTRY = "zoo.specs.registry"  # its BUILTIN_PLUGINS are plugin discovery, not layering
MAX_FUNCTION_LINES = 60
MAX_FILE_LINES = 400
# modules that must not import zoo.components.* (the core names no concrete kind; the
# registry wires built-in components in by name)
CORE_MODULES = (
    "zoo.model.build",
    "zoo.model.stack",
    "zoo.specs.model",
    "zoo.specs.components",
    "zoo.specs.interfaces",
    "zoo.specs.registry",
    "zoo.specs.registry_entries",
    "zoo.specs.plugins",
    "zoo.specs.hookspecs",
)
# DESIGN.md's dependency direction, top to bottom: a module imports only its own folder and
# the tiers below its own (folders in one tier import none of each other). Training sits
# between the harness (which runs a train step) and what it uses; DESIGN.md's middle tier
# (analysis, hub, quant) is ordered: the hub checks a load fits with the analysis' figures,
# and both count or load quantized layers; zoo.parts (the plugin-facing API)
# over the parts it re-exports; model beside components and archs, which it reaches only
# through the registry of specs.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("__main__",),
    ("cli",),
    ("harness",),
    ("training",),
    ("hub",),
    ("analysis",),
    ("quant",),
    ("parts",),
    ("model", "components", "archs"),
    ("specs",),
    ("files",),
    ("errors",),
)
# what an out-of-tree plugin may import from zoo
PUBLIC_MODULES = frozenset(
    {"zoo", "zoo.parts", "zoo.errors", "zoo.hub.family"}
)  # zoo.hub.family: the checkpoint-format protocol


@dataclass(frozen=True)
class Import:
    target: str  # a dotted name as written, relative imports resolved
    names: tuple[str, ...]  # `from target import names`; () for `import target`
    line: int
    binds_root: bool = False  # `import zoo` / `import zoo.x` (binds the name `zoo`)


@dataclass
class Graph:
    edges: dict[str, dict[str, str]] = field(default_factory=dict)  # module -> {target: "file:line"}

    def add(self, source: str, target: str, where: str) -> None:
        if target != source:
            self.edges[source].setdefault(target, where)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports(node: ast.AST, module: str, is_package: bool) -> list[Import]:
    """The import statements under ``node`` (``if TYPE_CHECKING:`` included), relative ones
    resolved against ``module``."""
    found: list[Import] = []
    for n in ast.walk(node):
        if isinstance(n, ast.Import):
            for alias in n.names:
                root_bound = alias.asname is None and alias.name.split(".")[0] == PACKAGE
                found.append(Import(alias.name, (), n.lineno, root_bound))
        elif isinstance(n, ast.ImportFrom):
            base = n.module or ""
            if n.level:
                parts = module.split(".")
                keep = len(parts) - n.level + (1 if is_package else 0)
                base = ".".join(parts[:keep] + ([base] if base else []))
            found.append(Import(base, tuple(a.name for a in n.names), n.lineno))
    return found


MODULE_PATH = re.compile(r"[a-z_][a-z0-9_]*(\.[a-z_][a-z0-9_]*)+(:[A-Za-z_][A-Za-z0-9_]*)?")


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the docstring constants under ``tree`` (prose, not module paths)."""
    found = set()
    for n in ast.walk(tree):
        if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and n.body:
            first = n.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def named_modules(tree: ast.AST, modules: dict[str, Path], skip: set[int] = frozenset()) -> list[tuple[str, int]]:
    """Zoo modules named by a string (``"zoo.hub.config"``, ``"zoo.hub.config:reader"``), with
    their lines; constants whose id is in ``skip`` and docstrings aside."""
    skip = skip | _docstrings(tree)
    found = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in skip:
            if MODULE_PATH.fullmatch(n.value) and n.value.partition(":")[0] in modules:
                found.append((n.value.partition(":")[0], n.lineno))
    return found


def _own_submodules_by_name(tree: ast.AST) -> list[int]:
    """Lines of f-strings naming the package's own modules (``f"{__package__}.{name}"``, or
    ``f"{__name__}.{name}"`` in a package's ``__init__``), as computed imports take them."""
    lines = []
    for n in ast.walk(tree):
        if isinstance(n, ast.JoinedStr) and len(n.values) > 1:
            head, dot = n.values[0], n.values[1]
            own = (
                isinstance(head, ast.FormattedValue)
                and isinstance(head.value, ast.Name)
                and head.value.id in ("__package__", "__name__")
            )
            if own and isinstance(dot, ast.Constant) and str(dot.value).startswith("."):
                lines.append(n.lineno)
    return lines


def _discovery_constants(tree: ast.AST) -> set[int]:
    """The registry's ``BUILTIN_PLUGINS`` strings: plugin discovery, loaded as entry points are."""
    found: set[int] = set()
    for stmt in ast.walk(tree):
        targets = (
            stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target] if isinstance(stmt, ast.AnnAssign) else []
        )
        if any(isinstance(t, ast.Name) and t.id == "BUILTIN_PLUGINS" for t in targets) and stmt.value is not None:
            found |= {id(c) for c in ast.walk(stmt.value) if isinstance(c, ast.Constant)}
    return found


def _modules(package_dir: Path) -> dict[str, Path]:
    modules = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = path.relative_to(package_dir.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        modules[name] = path
    return modules


def _is_facade_wiring(stmt: ast.stmt) -> bool:
    """The facade's ``_LAZY`` table, its ``if TYPE_CHECKING:`` mirror of it, and its functions:
    reached per name (``_root_symbols``), not by importing the package."""
    lazy = isinstance(stmt, (ast.Assign, ast.AnnAssign)) and isinstance(stmt.value, ast.Dict)
    return (
        lazy
        or isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef))
        or (isinstance(stmt, ast.If) and _is_type_checking(stmt.test))
    )


def _root_symbols(path: Path, modules: dict[str, Path]) -> dict[str, set[str]]:
    """For the lazy root package: each public name -> the modules using it imports."""
    tree = ast.parse(path.read_text())
    symbols: dict[str, set[str]] = {}
    for stmt in tree.body:
        value = stmt.value if isinstance(stmt, (ast.Assign, ast.AnnAssign)) else None
        if isinstance(value, ast.Dict):  # _LAZY = {"build": ("zoo.model.build", "build"), ...}
            for key, item in zip(value.keys, value.values):
                if isinstance(key, ast.Constant) and isinstance(item, ast.Tuple) and item.elts:
                    first = item.elts[0]
                    if isinstance(first, ast.Constant) and isinstance(first.value, str):
                        symbols[str(key.value)] = {_owner(first.value, modules)}
        elif isinstance(stmt, ast.If) and _is_type_checking(stmt.test):  # the same names, for type checkers
            for imp in imports(stmt, PACKAGE, True):
                symbols.update({n: {_owner(imp.target, modules)} for n in imp.names})
        elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            symbols[stmt.name] = {
                _owner(f"{i.target}.{n}" if f"{i.target}.{n}" in modules else i.target, modules)
                for i in imports(stmt, PACKAGE, True)
                if _owner(i.target, modules)
                for n in (i.names or ("",))
            }
    return symbols


def _owner(name: str, modules: dict[str, Path]) -> str:
    """The module a dotted name lives in: its longest prefix that is a module."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name


def import_graph(package_dir: Path) -> Graph:
    modules = _modules(package_dir)
    root = package_dir.name
    symbols = _root_symbols(modules[root], modules)
    graph = Graph({name: {} for name in modules})

    def resolve(base: str, name: str) -> set[str]:
        if f"{base}.{name}" in modules:
            return {f"{base}.{name}"}
        if base == root:
            return symbols.get(name, {root})
        return {_owner(base, modules)}

    for name, path in modules.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        where = functools.partial(_where, path.relative_to(package_dir.parent))
        scope = (
            ast.Module(body=[s for s in tree.body if not _is_facade_wiring(s)], type_ignores=[])
            if name == root
            else tree
        )
        binds_root = False
        for imp in imports(scope, name, path.name == "__init__.py"):
            if imp.target != root and not imp.target.startswith(root + "."):
                continue
            binds_root |= imp.binds_root
            for target in (resolve(imp.target, n) for n in imp.names) if imp.names else [{_owner(imp.target, modules)}]:
                for t in target:
                    graph.add(name, t, where(imp.line))
        for target, line in named_modules(scope, modules, _discovery_constants(tree) if name == REGISTRY else set()):
            graph.add(name, target, where(line))
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for line in _own_submodules_by_name(scope):
            for sub in (m for m in modules if m.rpartition(".")[0] == package):
                graph.add(name, sub, where(line))
        if binds_root:  # zoo.build(...) after `import zoo`
            for n in ast.walk(tree):
                if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == root:
                    for t in resolve(root, n.attr):
                        graph.add(name, t, where(n.lineno))
    return graph


def _where(path: Path, line: int) -> str:
    return f"{path}:{line}"


def find_cycle(edges: dict[str, dict[str, str]]) -> list[str] | None:
    """One cycle as a closed path [a, b, ..., a], or None (iterative depth-first search)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    for start in sorted(edges):
        if start in state:
            continue
        path, stack = [start], [iter(sorted(edges[start]))]
        state[start] = 1
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                stack.pop()
            elif state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            elif nxt not in state and nxt in edges:
                state[nxt] = 1
                path.append(nxt)
                stack.append(iter(sorted(edges[nxt])))
    return None


def describe(cycle: list[str], edges: dict[str, dict[str, str]]) -> str:
    return "\n".join(f"  {a} -> {b}  ({edges[a][b]})" for a, b in zip(cycle, cycle[1:]))


# ---- the checker, on a package made for it ---------------------------------------------
def _write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root / "zoo"


def test_the_checker_sees_cycles_through_function_imports_and_relative_imports(tmp_path):
    pkg = _write(
        tmp_path,
        {
            "zoo/__init__.py": "",
            "zoo/a.py": "def f():\n    from zoo.sub import b\n",
            "zoo/sub/__init__.py": "",
            "zoo/sub/b.py": "from ..a import f\n",
        },
    )
    edges = import_graph(pkg).edges
    assert edges["zoo.a"] == {"zoo.sub.b": "zoo/a.py:2"} and "zoo.a" in edges["zoo.sub.b"]
    assert find_cycle(edges) == ["zoo.a", "zoo.sub.b", "zoo.a"]


def test_the_checker_counts_type_checking_and_resolves_the_lazy_facade(tmp_path):
    pkg = _write(
        tmp_path,
        {
            "zoo/__init__.py": (
                "from typing import TYPE_CHECKING\nfrom zoo.errors import E\n"
                "_LAZY = {'build': ('zoo.model.build', 'build')}\n__version__ = '1'\n"
                "def spec(name):\n    from zoo.archs import preset\n"
                "if TYPE_CHECKING:\n    from zoo.model.build import build\n    from zoo.model.sample import sample\n"
            ),
            "zoo/errors.py": "",
            "zoo/archs.py": "from zoo.model.build import build\n",
            "zoo/model/build.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from zoo.archs import x\n"
            "def f():\n    from zoo import __version__\n",
            "zoo/model/sample.py": "",
            "zoo/cli.py": "import zoo\ndef main():\n    zoo.spec('x'); zoo.build(); zoo.sample()\n",
            "zoo/pkg/__init__.py": "def g():\n    from zoo.pkg.leaf import y\n",
            "zoo/pkg/leaf.py": "from zoo.pkg import sibling\nfrom zoo.pkg import g\n",
            "zoo/pkg/sibling.py": "",
        },
    )
    edges = import_graph(pkg).edges
    assert set(edges["zoo"]) == {"zoo.errors"}  # the facade's module-level imports only
    assert set(edges["zoo.model.build"]) == {"zoo", "zoo.archs"}  # __version__, and the TYPE_CHECKING import
    assert set(edges["zoo.cli"]) == {"zoo", "zoo.archs", "zoo.model.build", "zoo.model.sample"}  # resolved per name
    assert set(edges["zoo.pkg.leaf"]) == {"zoo.pkg.sibling", "zoo.pkg"}  # g is defined by the package
    assert find_cycle(edges) == ["zoo.archs", "zoo.model.build", "zoo.archs"]


def test_the_checker_counts_modules_named_by_strings_but_not_plugin_discovery(tmp_path):
    pkg = _write(
        tmp_path,
        {
            "zoo/__init__.py": "",
            "zoo/cli.py": '"""Runs zoo.run, see zoo.table."""\n'
            'COMMANDS = ("zoo.run", "zoo.table:main", "zoo.nothing", "zoo run")\n',
            "zoo/run.py": "",
            "zoo/table.py": "",
            "zoo/specs/registry.py": 'BUILTIN_PLUGINS: tuple = ("zoo.run",)\nREADERS = {"x": "zoo.table:read"}\n',
            "zoo/phases/__init__.py": "import importlib\nfor n in ('a',):\n    "
            "importlib.import_module(f'{__package__}.{n}')\n",
            "zoo/phases/a.py": "",
            "zoo/phases/b.py": "",
        },
    )
    edges = import_graph(pkg).edges
    assert edges["zoo.cli"] == {"zoo.run": "zoo/cli.py:2", "zoo.table": "zoo/cli.py:2"}  # the docstring is prose
    assert set(edges["zoo.specs.registry"]) == {"zoo.table"}  # BUILTIN_PLUGINS aside
    assert set(edges["zoo.phases"]) == {"zoo.phases.a", "zoo.phases.b"}


# ---- the rules, on zoo ------------------------------------------------------------------
@pytest.fixture(scope="module")
def graph() -> Graph:
    return import_graph(ROOT / PACKAGE)


def test_the_graph_is_read(graph):
    # a few edges known to exist, so a broken reader cannot pass the acyclicity test vacuously
    assert "zoo.specs.model" in graph.edges["zoo.model.build"]
    assert "zoo.specs.registry" in graph.edges["zoo.specs.model"]
    assert "zoo.quant.linear" in graph.edges["zoo.quant"]
    assert "zoo.cli.bench" in graph.edges["zoo.cli"]  # named in the subcommand table
    assert "zoo.archs.qwen3" in graph.edges["zoo.archs"]  # named in the presets' family list
    assert "zoo.harness.phases.decode" in graph.edges["zoo.harness.phases"]  # found by name in its package
    assert not {t for t in graph.edges["zoo.specs.registry"] if t.startswith("zoo.components")}  # BUILTIN_PLUGINS aside


def test_zoo_has_no_import_cycle(graph):
    cycle = find_cycle(graph.edges)
    assert cycle is None, (
        "an import cycle (every import counts: inside functions, under TYPE_CHECKING, by name):\n"
        + describe(cycle, graph.edges)
    )


@pytest.mark.parametrize("module", CORE_MODULES)
def test_the_core_imports_no_concrete_component(graph, module):
    assert module in graph.edges, (
        f"{module} is not in zoo/ any more: update CORE_MODULES to the module that took its job"
    )
    concrete = sorted(t for t in graph.edges[module] if t.startswith("zoo.components"))
    assert not concrete, f"{module} imports concrete components {concrete}; take them through the registry"


def _plugin_sources() -> list[Path]:
    return sorted(
        path
        for path in (ROOT / "plugins").glob("*/*/**/*.py")
        if not {"tests", "test", "build"} & set(path.relative_to(ROOT / "plugins").parts[1:-1])
        and not path.name.startswith(("test_", "conftest", "setup"))
    )


def test_plugins_import_only_public_api():
    sources = _plugin_sources()
    assert sources, "no plugin source found under plugins/"
    modules = _modules(ROOT / PACKAGE)
    private = []
    for path in sources:
        for imp in imports(ast.parse(path.read_text()), "", False):
            if imp.target.split(".")[0] != PACKAGE:
                continue
            # `from zoo import parts` uses the module zoo.parts; `from zoo import build` uses zoo
            used = {f"{imp.target}.{n}" if f"{imp.target}.{n}" in modules else imp.target for n in imp.names or ("",)}
            private += [f"{path.relative_to(ROOT)}:{imp.line}: {m}" for m in sorted(used - PUBLIC_MODULES)]
    assert not private, (
        f"plugins use zoo's private modules (public: {', '.join(sorted(PUBLIC_MODULES))}):\n" + "\n".join(private)
    )


def _python_files() -> list[Path]:
    return sorted((ROOT / PACKAGE).rglob("*.py"))


def test_no_file_over_the_limit():
    long = [
        f"{p.relative_to(ROOT)}: {n} lines"
        for p in _python_files()
        if (n := len(p.read_text().splitlines())) > MAX_FILE_LINES
    ]
    assert not long, f"files over {MAX_FILE_LINES} lines (split them by job):\n" + "\n".join(long)


def test_no_function_over_the_limit():
    long = []
    for path in _python_files():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1  # type: ignore[operator]
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.name} is {lines} lines")
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines:\n" + "\n".join(long)


def test_the_package_root_holds_only_the_facade():
    """Folders are the layers: zoo/ itself keeps the public facade, the entry point, the
    errors and the plugin-facing parts; every other module lives in its layer's folder."""
    loose = sorted(p.name for p in (ROOT / PACKAGE).glob("*.py"))
    assert loose == ["__init__.py", "__main__.py", "errors.py", "parts.py"], loose


def _layer(module: str) -> str:
    return module.split(".")[1] if "." in module else module


def test_every_module_is_in_a_layer():
    tiers = {layer for tier in LAYERS for layer in tier}
    unplaced = sorted({_layer(m) for m in _modules(ROOT / PACKAGE)} - tiers - {PACKAGE})
    assert not unplaced, f"zoo/ folders in no tier of LAYERS (place them in DESIGN.md's direction): {unplaced}"


def test_imports_go_down_the_layers(graph):
    """The facade (``zoo`` itself, reached per name) is no layer: its names are resolved to
    the modules they load, and only those edges are checked."""
    tier = {layer: depth for depth, names in enumerate(LAYERS) for layer in names}
    upward = [
        f"{source} -> {target}  ({where})"
        for source, targets in graph.edges.items()
        if source != PACKAGE
        for target, where in targets.items()
        if target != PACKAGE and _layer(source) != _layer(target) and tier[_layer(target)] <= tier[_layer(source)]
    ]
    assert not upward, "imports against the layer order (LAYERS, top to bottom):\n" + "\n".join(sorted(upward))


def test_components_never_import_the_harness_hub_or_cli(graph):
    """Parts sit below the harness, the hub and the command: DESIGN.md's dependency direction."""
    bad = {
        (source, target): where
        for source, targets in graph.edges.items()
        if source.startswith("zoo.components.")
        for target, where in targets.items()
        if target.startswith(("zoo.harness", "zoo.hub", "zoo.cli"))
    }
    assert not bad, bad


def test_nothing_in_zoo_imports_the_cli(graph):
    """The command is the top layer: only itself and ``python -m zoo`` (``zoo.__main__``) import it."""
    bad = {
        (source, target): where
        for source, targets in graph.edges.items()
        if not source.startswith(("zoo.cli", "zoo.__main__"))
        for target, where in targets.items()
        if target.startswith("zoo.cli")
    }
    assert not bad, bad

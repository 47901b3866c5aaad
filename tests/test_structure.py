"""The code's structure as tests, read with `ast` alone (nothing under test is imported):

- no import cycle among the `rollmux` modules. Every import statement counts, wherever it
  stands: at module level, inside a function (a lazy import) or under `if TYPE_CHECKING:`.
  `import a.b.c` and `from a.b import c` name the module `a.b.c` when it is one, else the
  longest prefix that is (`from rollmux import x` is the submodule `rollmux.x` when there
  is one, else the package); relative imports resolve against the importing module's
  package; a package's `__init__` is a module of its own (`rollmux.core`). Each cycle is
  reported as its modules and the import lines that close it.
- no module over MAX_MODULE_LINES lines and no function over MAX_FUNCTION_LINES lines (the
  `def` line to the end of its body, decorators excluded; nested functions and methods
  count on their own) in SCANNED, each offender listed as `path:line name (N lines)`.
"""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "rollmux"
SCANNED = ("rollmux", "benchmarks", "tests")
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 60


@dataclass(frozen=True)
class Source:
    """One module's syntax tree, where it lives (for messages) and whether it is a package's `__init__`."""

    tree: ast.Module
    path: str
    is_package: bool = False


def _python_files(top: str) -> list[Path]:
    return sorted(p for p in (ROOT / top).rglob("*.py") if "__pycache__" not in p.parts)


@functools.cache
def _parsed(path: Path) -> ast.Module:
    """The file's syntax tree, parsed once for all the checks (parsing is most of their time)."""
    return ast.parse(path.read_text(), path.relative_to(ROOT).as_posix())


def _statements(node: ast.AST):
    """The statements directly inside `node`: bodies, branches, handlers and match cases. Imports
    and definitions are statements, and no expression holds one, so expressions are not entered."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.stmt, ast.excepthandler, ast.match_case)):
            yield child


def _imports(node: ast.AST):
    """Every import statement inside `node`, at any depth (in functions, branches, classes)."""
    for child in _statements(node):
        if isinstance(child, (ast.Import, ast.ImportFrom)):
            yield child
        else:
            yield from _imports(child)


def package_sources(package: str = PACKAGE) -> dict[str, Source]:
    """Every module of `package` under ROOT by dotted name (a package by its own name)."""
    out: dict[str, Source] = {}
    for path in _python_files(package):
        rel = path.relative_to(ROOT)
        parts = list(rel.with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts.pop()
        out[".".join(parts)] = Source(_parsed(path), rel.as_posix(), is_package)
    return out


def _known(name: str, modules: set[str]) -> str | None:
    """`name` or its longest prefix that is one of `modules`; None for anything outside them."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        if ".".join(parts[:end]) in modules:
            return ".".join(parts[:end])
    return None


def _from_base(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    """The absolute module a `from ... import` statement reads from."""
    if not node.level:
        return node.module or ""
    package = module.split(".") if is_package else module.split(".")[:-1]
    base = package[: len(package) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _targets(node: ast.Import | ast.ImportFrom, module: str, is_package: bool, modules: set[str]) -> list[str]:
    """The modules of `modules` one import statement names."""
    if isinstance(node, ast.Import):
        found = [_known(alias.name, modules) for alias in node.names]
    else:
        base = _from_base(node, module, is_package)
        found = [_known(f"{base}.{alias.name}", modules) if f"{base}.{alias.name}" in modules
                 else _known(base, modules) for alias in node.names]
    return [t for t in found if t is not None]


def import_graph(sources: dict[str, Source]) -> dict[str, dict[str, int]]:
    """module -> {imported module -> line of its first import there}, self-imports left out."""
    modules = set(sources)
    graph: dict[str, dict[str, int]] = {}
    for module, src in sources.items():
        edges = graph.setdefault(module, {})
        for node in _imports(src.tree):
            for target in _targets(node, module, src.is_package, modules):
                if target != module:
                    edges[target] = min(edges.get(target, node.lineno), node.lineno)
    return graph


def strongly_connected(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """Tarjan's strongly connected components of more than one module, each sorted, in order."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, {}):
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
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def import_cycles(sources: dict[str, Source]) -> list[str]:
    """One line per cycle: its modules, then each import inside it as `path:line imports module`."""
    graph = import_graph(sources)
    lines = []
    for component in strongly_connected(graph):
        edges = [f"{sources[a].path}:{line} imports {b}" for a in component
                 for b, line in sorted(graph[a].items()) if b in component]
        lines.append(" <-> ".join(component) + ": " + "; ".join(edges))
    return lines


def _functions(tree: ast.AST, prefix: str = ""):
    """(qualified name, def line, lines) of every function and method in `tree`, nested ones too."""
    for node in _statements(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield prefix + node.name, node.lineno, node.end_lineno - node.lineno + 1
            yield from _functions(node, f"{prefix}{node.name}.")
        elif isinstance(node, ast.ClassDef):
            yield from _functions(node, f"{prefix}{node.name}.")
        else:
            yield from _functions(node, prefix)


def long_modules(tops: tuple[str, ...] = SCANNED, limit: int = MAX_MODULE_LINES) -> list[str]:
    """`path:1 module (N lines)` for every file over `limit` lines."""
    out = []
    for top in tops:
        for path in _python_files(top):
            n = len(path.read_text().splitlines())
            if n > limit:
                out.append(f"{path.relative_to(ROOT).as_posix()}:1 {path.stem} ({n} lines)")
    return out


def long_functions(tops: tuple[str, ...] = SCANNED, limit: int = MAX_FUNCTION_LINES) -> list[str]:
    """`path:line name (N lines)` for every function over `limit` lines."""
    out = []
    for top in tops:
        for path in _python_files(top):
            rel = path.relative_to(ROOT).as_posix()
            for name, line, n in _functions(_parsed(path)):
                if n > limit:
                    out.append(f"{rel}:{line} {name} ({n} lines)")
    return out


def _failing(what: str, offenders: list[str]) -> None:
    if offenders:
        pytest.fail(f"{len(offenders)} {what}:\n" + "\n".join(offenders), pytrace=False)


def test_no_import_cycle_among_rollmux_modules():
    _failing("import cycles among rollmux modules (lazy and TYPE_CHECKING imports included)",
             import_cycles(package_sources()))


def test_no_module_over_the_line_limit():
    _failing(f"modules over {MAX_MODULE_LINES} lines", long_modules())


def test_no_function_over_the_line_limit():
    _failing(f"functions over {MAX_FUNCTION_LINES} lines (def line to end of body)", long_functions())


# -- the checker itself, on synthetic sources ------------------------------------------------------

def _synthetic(**modules: str) -> dict[str, Source]:
    """Sources by dotted name (`__` for `.`) from their text; `pkg` and `pkg.sub` are packages."""
    out = {}
    for key, text in modules.items():
        name = key.replace("__", ".")
        out[name] = Source(ast.parse(text), name.replace(".", "/") + ".py", name in ("pkg", "pkg.sub"))
    return out


def test_a_cycle_through_a_lazy_import_is_reported():
    sources = _synthetic(pkg="", pkg__a="from pkg import b\n",
                         pkg__b="def f():\n    from . import a\n    return a\n", pkg__c="import pkg.a\n")
    assert import_cycles(sources) == ["pkg.a <-> pkg.b: pkg/a.py:1 imports pkg.b; pkg/b.py:2 imports pkg.a"]


def test_relative_imports_from_a_package_init_and_attributes_resolve():
    sources = _synthetic(pkg="", pkg__sub="from .x import thing\n", pkg__sub__x="from .. import helper\n",
                         pkg__y="from pkg.sub import thing\nfrom typing import Any\nimport pkg.sub.x.attr\n")
    assert import_graph(sources) == {"pkg": {}, "pkg.sub": {"pkg.sub.x": 1}, "pkg.sub.x": {"pkg": 1},
                                     "pkg.y": {"pkg.sub": 1, "pkg.sub.x": 3}}
    # pkg.sub -> pkg.sub.x -> pkg, and nothing leads back into pkg.sub: no cycle
    assert import_cycles(sources) == []


def test_an_acyclic_set_passes_and_a_longer_cycle_lists_every_edge():
    assert import_cycles(_synthetic(pkg="from pkg import a\n", pkg__a="import pkg.b\n", pkg__b="")) == []
    ring = _synthetic(pkg="", pkg__a="import pkg.b\n", pkg__b="from . import c\n",
                      pkg__c="if TYPE_CHECKING:\n    from pkg.a import A\n")
    assert import_cycles(ring) == ["pkg.a <-> pkg.b <-> pkg.c: pkg/a.py:1 imports pkg.b; pkg/b.py:1 imports pkg.c; "
                                   "pkg/c.py:2 imports pkg.a"]


def test_the_size_checks_measure_from_the_def_line():
    tree = ast.parse("@decorator\ndef f():\n    x = 1\n\n    return x\n\n\nclass C:\n    def g(self):\n"
                     "        def h():\n            pass\n        return h\n")
    assert list(_functions(tree)) == [("f", 2, 4), ("C.g", 9, 4), ("C.g.h", 10, 2)]

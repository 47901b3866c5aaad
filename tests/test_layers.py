"""Imports run one way through the layers: every module's imports (lazy ones too) read with `ast`."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "rollmux"

# Which rollmux layers each layer may import (its own included). Bottom up: errors; core (the
# scheduling model every executor shares); workload; sim (the simulator and what it prices); study;
# on the side, shim (job-facing) and live (the service) sit on core only; jobs (the demo's jobs, shipped
# in the package) see only what a user's job sees, the shim; job (`rollmux.init()` for a job `rollmux run`
# launched) joins the shim to the service's HTTP client; adapters (real RL libraries under the shim)
# see the shim, weightsync and job (a drop-in trainer builds its shim from `rollmux run`'s environment
# through `rollmux.init()`'s plumbing, never the HTTP client itself); harness (what exercises the live
# plane end to end: chaos, demo, profiler) sees all of those, and only its demo job list imports
# adapters; cli sees everything.
ALLOWED: dict[str, set[str]] = {
    "errors": {"errors"},
    "data": set(),
    "__init__": {"shim", "job"},  # lazily, on first use of rollmux.phase / init / progress (module __getattr__)
    "core": {"errors", "core"},
    "workload": {"errors", "core", "workload"},
    "sim": {"errors", "core", "sim"},
    "study": {"errors", "core", "workload", "sim", "study"},
    "shim": {"errors", "core", "shim"},
    "live": {"errors", "core", "shim", "live"},  # the service only: nothing that runs jobs or syncs weights
    "jobs": {"errors", "core", "shim", "jobs"},  # the demo jobs that ship in the package: job-facing, like a user's
    "job": {"shim", "live", "job"},  # rollmux.init() from `rollmux run`'s environment: the shim and its HTTP client
    "weightsync": {"weightsync"},
    "adapters": {"errors", "shim", "weightsync", "job", "adapters"},
    "harness": {"errors", "core", "workload", "shim", "live", "jobs", "weightsync", "adapters", "harness"},
    "cli": {"errors", "core", "workload", "sim", "study", "shim", "live", "weightsync", "jobs", "adapters", "harness",
            "job",
            "cli"},
}
# Heavy or service frameworks the scheduling model and the simulator must run without.
FORBIDDEN_THIRD_PARTY: dict[str, set[str]] = {
    "core": {"ray", "torch", "redis", "matplotlib"},
    "sim": {"ray", "torch", "redis"},
}


def layer_of(module: str) -> str:
    """The layer of a dotted rollmux module: its subpackage, or the top-level module's own name."""
    parts = module.split(".")
    if len(parts) == 1:
        return "__init__"
    return parts[1]


def module_name(path: Path, root: Path) -> str:
    """The dotted name of a source file under the package root."""
    rel = path.relative_to(root.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_modules(tree: ast.AST, module: str, is_package: bool) -> list[tuple[int, str]]:
    """(line, absolute module) for every import statement anywhere in the tree."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                base = base[: len(base) - node.level + (1 if is_package else 0)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.append((node.lineno, target))
            # `from rollmux import live` imports the subpackage itself.
            if target == "rollmux":
                found += [(node.lineno, f"rollmux.{alias.name}") for alias in node.names]
    return found


def violations(source: str, module: str, path: str, is_package: bool = False) -> list[str]:
    """Every import in `source` that runs against the layer direction, as 'path:line: reason'."""
    layer = layer_of(module)
    lines = source.splitlines()
    out = []
    for lineno, target in imported_modules(ast.parse(source), module, is_package):
        root = target.split(".")[0]
        if root == "rollmux" and target != "rollmux":
            to = layer_of(target)
            if to not in ALLOWED[layer]:
                out.append(f"{path}:{lineno}: {layer} may not import {to}: {lines[lineno - 1].strip()}")
        elif root in FORBIDDEN_THIRD_PARTY.get(layer, set()):
            out.append(f"{path}:{lineno}: {layer} may not import {root}: {lines[lineno - 1].strip()}")
    return out


def package_sources() -> list[Path]:
    """Every Python source file of the package."""
    return sorted(PACKAGE.rglob("*.py"))


def test_every_module_belongs_to_a_known_layer():
    unknown = {str(p) for p in package_sources() if layer_of(module_name(p, PACKAGE)) not in ALLOWED}
    assert not unknown, f"modules outside every layer (add them to ALLOWED): {sorted(unknown)}"


def test_imports_run_one_way():
    found = []
    for path in package_sources():
        found += violations(path.read_text(), module_name(path, PACKAGE), str(path.relative_to(PACKAGE.parent)),
                            is_package=path.name == "__init__.py")
    assert not found, "imports against the layer direction:\n" + "\n".join(found)


def test_only_the_demo_job_list_imports_adapters():
    importers = set()
    for path in package_sources():
        module = module_name(path, PACKAGE)
        if layer_of(module) not in ("adapters", "cli") and any(
                t.startswith("rollmux.adapters") for _, t in imported_modules(
                    ast.parse(path.read_text()), module, path.name == "__init__.py")):
            importers.add(module)
    assert importers <= {"rollmux.harness.demo_jobs"}, sorted(importers)


def import_graph(layers: set[str]) -> dict[str, set[str]]:
    """Each module of `layers` -> the rollmux modules it imports (lazy ones too; a name's module, not the name)."""
    sources = {module_name(p, PACKAGE): p for p in package_sources()}
    graph: dict[str, set[str]] = {}
    for module, path in sources.items():
        if layer_of(module) not in layers:
            continue
        graph[module] = set()
        for _, target in imported_modules(ast.parse(path.read_text()), module, path.name == "__init__.py"):
            while target and target not in sources:  # `from rollmux.live.journal import open_store`
                target = target.rpartition(".")[0]
            if target and target != module:
                graph[module].add(target)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of `graph` as [a, b, ..., a], or None (depth first, in name order)."""
    done: set[str] = set()
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        path.append(module)
        for target in sorted(graph.get(module, ())):
            if target in path:
                return path[path.index(target):] + [target]
            if target in graph and target not in done:
                found = visit(target)
                if found:
                    return found
        done.add(path.pop())
        return None

    for module in sorted(graph):
        found = None if module in done else visit(module)
        if found:
            return found
    return None


def test_the_service_and_the_harness_have_no_import_cycle():
    assert find_cycle(import_graph({"live", "harness"})) is None


def test_an_import_cycle_is_found_lazy_imports_included():
    # The shape the journal had: the store module imported its Redis backend lazily, which imported it back.
    graph = {"rollmux.live.journal": {"rollmux.live.journal_redis"}, "rollmux.live.journal_redis":
             {"rollmux.live.journal"}, "rollmux.live.service": {"rollmux.live.journal"}}
    assert find_cycle(graph) == ["rollmux.live.journal", "rollmux.live.journal_redis", "rollmux.live.journal"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None


def test_top_level_holds_only_entry_points():
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(top) <= 5, top


@pytest.mark.parametrize("module,source,expected", [
    ("rollmux.core.group", "from rollmux.sim.simulator import simulate\n", "core may not import sim"),
    ("rollmux.core.group", "def f():\n    import rollmux.live.service\n", "core may not import live"),
    ("rollmux.core.group", "from ..study import experiments\n", "core may not import study"),
    ("rollmux.sim.gavel", "from rollmux import live\n", "sim may not import live"),
    ("rollmux.live.service", "from rollmux.sim.runner import compare\n", "live may not import sim"),
    ("rollmux.live.service", "from rollmux.study.offline_optimum import x\n", "live may not import study"),
    ("rollmux.sim.simulator", "from rollmux.study.report import x\n", "sim may not import study"),
    ("rollmux.core.env", "import ray\n", "core may not import ray"),
    ("rollmux.sim.runner", "from rollmux.jobs.grpo import make_job\n", "sim may not import jobs"),
    ("rollmux.study.report", "import rollmux.jobs.grpo\n", "study may not import jobs"),
    ("rollmux.jobs.grpo.job", "from rollmux.live.client import x\n", "jobs may not import live"),
    ("rollmux.jobs.grpo.job", "from rollmux.harness.profile import x\n", "jobs may not import harness"),
    ("rollmux.adapters.trl", "from rollmux.live.client import x\n", "adapters may not import live"),
    ("rollmux.core.group", "import rollmux.adapters.trl\n", "core may not import adapters"),
    ("rollmux.live.service", "from rollmux.jobs.grpo import make_job\n", "live may not import jobs"),
    ("rollmux.live.app", "import rollmux.weightsync\n", "live may not import weightsync"),
    ("rollmux.live.journal.base", "def f():\n    from rollmux.adapters.trl import GRPOTrainer\n",
     "live may not import adapters"),
    ("rollmux.live.server", "from rollmux.harness.chaos.run import Chaos\n", "live may not import harness"),
    ("rollmux.live.journal.repair", "from ...harness import demo\n", "live may not import harness"),
    ("rollmux.harness.demo", "from rollmux.cli import app\n", "harness may not import cli"),
    ("rollmux.core.group", "from rollmux import harness\n", "core may not import harness"),
])
def test_a_forbidden_import_is_reported_with_its_line(module, source, expected):
    found = violations(source, module, "x.py")
    assert len(found) == 1 and expected in found[0], found
    assert found[0].startswith(f"x.py:{source.count(chr(10))}:"), found


def test_allowed_imports_pass():
    assert violations("from rollmux.core.spec import JobSpec\nimport numpy\n", "rollmux.sim.simulator", "x.py") == []
    assert violations("from . import journal\n", "rollmux.live", "x.py", is_package=True) == []

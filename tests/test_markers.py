"""The markers tests/conftest.py gives: every prefix it lists still names a test, and every test of
this run has exactly one of unit, integration and packaging."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def rules(request):
    """tests/conftest.py as pytest loaded it."""
    return request.config.pluginmanager.get_plugin(str(Path(__file__).with_name("conftest.py")))


def _stale(prefix: str) -> str | None:
    """Why `prefix` names no test (no such module, or no test function whose name starts with its
    name part; a parameter id is not checked), or None."""
    module, _, name = prefix.partition("::")
    path = ROOT / module
    if not path.is_file():
        return f"{prefix}: no module {module}"
    name = name.split("[")[0]
    tests = [n.name for n in ast.walk(ast.parse(path.read_text()))
             if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name.startswith("test")]
    if name and not any(t.startswith(name) for t in tests):
        return f"{prefix}: no test in {module} starts with {name}"
    return None


def test_every_listed_prefix_names_a_test(rules):
    prefixes = [*rules.PACKAGING, *rules.INTEGRATION, *rules.SLOW]
    assert [why for why in map(_stale, prefixes) if why] == []


def test_every_test_of_the_run_has_exactly_one_kind(request, rules):
    kinds = {item.nodeid: [k for k in rules.KINDS if item.get_closest_marker(k)] for item in request.session.items}
    assert {nodeid: ks for nodeid, ks in kinds.items() if len(ks) != 1} == {}
    assert kinds[request.node.nodeid] == ["unit"]


def test_the_stale_check_names_what_is_missing():
    assert _stale("tests/test_markers.py::test_every_listed") is None
    assert _stale("tests/test_markers.py") is None
    assert _stale("tests/nowhere.py") == "tests/nowhere.py: no module tests/nowhere.py"
    assert _stale("tests/test_markers.py::test_gone[x]") == (
        "tests/test_markers.py::test_gone[x]: no test in tests/test_markers.py starts with test_gone")

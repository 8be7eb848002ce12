"""Registries: duplicates fail loudly, unknown names list the known ones, entry points load."""
import sys
from importlib.metadata import EntryPoint

import pytest

import pase.registry as registry
from pase.errors import PaseError, UnknownNameError
from pase.registry import PluginError, Registry


def test_duplicate_names_fail_loudly():
    r = Registry("widget", "pase", "pase.test-widgets")
    r.add("a", object())
    with pytest.raises(PaseError, match="widget 'a' is registered twice"):
        r.add("a", object())


def test_unknown_name_lists_known_ones():
    with pytest.raises(UnknownNameError, match="unknown solver 'nope'; known: .*dp.*exhaustive"):
        registry.SOLVERS.get("nope")


@pytest.mark.parametrize("decorated", [True, False])
def test_third_party_solver_through_an_entry_point(tmp_path, monkeypatch, decorated):
    module = f"thirdparty_solver_{int(decorated)}"
    register = '@SOLVERS.register("plugin-solver", "from an entry point")\n' if decorated else ""
    (tmp_path / f"{module}.py").write_text(
        "from pase.problem import Solution, Status\n"
        "from pase.registry import SOLVERS\n"
        f"{register}"
        "def solve(problem, *, time_limit=None, seed=None):\n"
        "    choice = (0,) * problem.num_vertices\n"
        "    return Solution(choice, problem.evaluate(choice), Status.FEASIBLE, 'plugin-solver')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    ep = EntryPoint("plugin-solver", f"{module}:solve", "pase.solvers")
    fresh = Registry("solver", "pase.solvers", "pase.solvers")  # builtins already imported
    monkeypatch.setattr(registry, "entry_points",
                        lambda group: [ep] if group == "pase.solvers" else [])
    monkeypatch.setattr(registry, "SOLVERS", fresh)
    try:
        # The decorated module registers into pase.registry.SOLVERS at import time.
        assert "plugin-solver" in fresh.names()
    finally:
        sys.modules.pop(module, None)


def _registry_with(monkeypatch, points, builtin="pase.solvers", check=None):
    monkeypatch.setattr(registry, "entry_points", lambda group: points if group == "test.group" else [])
    return Registry("solver", builtin, "test.group", check=check)


def test_a_broken_entry_point_is_recorded_and_the_rest_loads(tmp_path, monkeypatch):
    (tmp_path / "good_plugin_mod.py").write_text("def solve(problem, **kw):\n    return None\n")
    (tmp_path / "bad_plugin_mod.py").write_text("raise RuntimeError('no licence\\nfound')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    r = _registry_with(monkeypatch, [EntryPoint("good", "good_plugin_mod:solve", "test.group"),
                                     EntryPoint("bad", "bad_plugin_mod:solve", "test.group")])
    try:
        assert "good" in r.names() and "bad" not in r.names()
        assert "bad" in r  # known, but broken
        [broken] = r.broken()
        assert (broken.name, broken.target) == ("bad", "bad_plugin_mod:solve")
        assert broken.error == "RuntimeError: no licence found"  # one line
        with pytest.raises(PluginError, match=r"^solver plug-in 'bad' \(bad_plugin_mod:solve\) "
                                              r"failed to load: RuntimeError: no licence found$"):
            r.get("bad")
        assert callable(r.get("good"))
    finally:
        for m in ("good_plugin_mod", "bad_plugin_mod"):
            sys.modules.pop(m, None)


def test_a_plug_in_that_fails_halfway_leaves_nothing_registered(tmp_path, monkeypatch):
    (tmp_path / "halfway_mod.py").write_text(
        "import pase.registry as r\n"
        "r.SOLVERS.add('halfway-a', print)\n"
        "raise ImportError('missing backend')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    r = _registry_with(monkeypatch, [EntryPoint("halfway", "halfway_mod:solve", "test.group")])
    monkeypatch.setattr(registry, "SOLVERS", r)
    try:
        assert "halfway-a" not in r.names()
        assert [b.name for b in r.broken()] == ["halfway"]
    finally:
        sys.modules.pop("halfway_mod", None)


def test_wrong_kind_of_object_and_name_clash_are_broken(monkeypatch):
    r = _registry_with(monkeypatch, [EntryPoint("pi", "math:pi", "test.group"),
                                     EntryPoint("dp", "math:sqrt", "test.group")],
                       builtin="pase.errors", check=registry._callable)
    r.add("dp", print)  # as if a built-in had taken the name
    errors = {b.name: b.error for b in r.broken()}
    assert errors["pi"] == "PluginError: 3.141592653589793 is not callable"
    assert "the name 'dp' is taken by another solver" in errors["dp"]
    assert r.get("dp") is print  # the built-in keeps its name


def test_a_failing_builtin_package_is_not_marked_loaded(monkeypatch):
    r = _registry_with(monkeypatch, [], builtin="pase_no_such_builtin_package")
    for _ in range(2):  # the second lookup fails the same way, never "unknown solver"
        with pytest.raises(ModuleNotFoundError):
            r.get("dp")


def test_solver_tags_default_as_the_contract_says():
    info = registry.SOLVERS.entry("greedy").info
    assert info.get("exact", False) is False and info.get("scope", "general") == "general"
    assert registry.SOLVERS.entry("dp").info.get("exact") is True

"""Registries: duplicates fail loudly, unknown names list the known ones, entry points load."""
import sys
from importlib.metadata import EntryPoint

import pytest

import pase.registry as registry
from pase.errors import PaseError, UnknownNameError
from pase.registry import Registry


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

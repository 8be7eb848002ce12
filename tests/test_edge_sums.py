"""Distinct edge matrices priced half in a forked child (pase.costing.edge_sums): the same
Problem, entry for entry, as priced in one process; a child's error reaches the caller."""
from __future__ import annotations

import numpy as np
import pytest

from pase import api, forked
from pase.costing import edge_sums as es
from pase.errors import OptionError


@pytest.fixture
def counted_forks(monkeypatch):
    """Forks counted; forking allowed whatever the CPU count (the answer must not depend on it)."""
    made = []
    real = forked.Forked

    def counting(fn):
        made.append(fn)
        return real(fn)

    monkeypatch.setattr(forked, "available", lambda: True)
    monkeypatch.setattr(forked, "Forked", counting)
    return made


@pytest.mark.parametrize("model,options", [
    ("gpt2", {"cluster": "h100-sxm", "cost_options": {"zero": "auto", "recompute": "auto"}}),
    ("mixtral-8x7b", {"cluster": "h100-sxm"}),
    ("gpt2", {"cost_model": "alpha-beta"}),
])
def test_a_forked_build_gives_the_same_problem(model, options, counted_forks, monkeypatch):
    kw = dict(devices=8, model_options={"layers": 2}, **options)
    alone = api.build_problem(model, **kw).problem
    assert not counted_forks  # small models stay in one process
    monkeypatch.setattr(es, "PARALLEL_MIN_ENTRIES", 0)
    both = api.build_problem(model, **kw).problem
    assert len(counted_forks) == 1
    assert both.edges == alone.edges
    for a, b in zip(alone.edge_costs, both.edge_costs):
        assert a.shape == b.shape and np.array_equal(a, b)
        assert isinstance(b.base, (np.ndarray, type(None)))  # not left on the shared pages
    for a, b in zip(alone.vertex_costs, both.vertex_costs):
        assert np.array_equal(a, b)
    # matrices shared between identical edges stay one array, as in one process
    assert [id(m) for m in both.edge_costs].count(id(both.edge_costs[-1])) == \
        [id(m) for m in alone.edge_costs].count(id(alone.edge_costs[-1]))


def test_halves_balance_entries_largest_first():
    mine, theirs = es._halves({"a": 10, "b": 7, "c": 5, "d": 2})
    assert (mine, theirs) == (["a", "d"], ["b", "c"])


def test_an_error_in_the_child_reaches_the_caller(counted_forks, monkeypatch):
    monkeypatch.setattr(es, "PARALLEL_MIN_ENTRIES", 0)
    todo = {"a": (0, (2, 2)), "b": (1, (2, 2))}  # "b" goes to the child

    def price(key):
        if key == "b":
            raise OptionError("edge b cannot be priced")
        return np.ones((2, 2))

    with pytest.raises(OptionError, match="edge b"):
        es.edge_sums(todo, price, 2)
    assert len(counted_forks) == 1
    out = es.edge_sums({"a": (0, (2, 3)), "b": (1, (2, 3))}, lambda k: np.full((2, 3), ord(k)), 2)
    assert list(out) == ["a", "b"] and out["b"][1, 2] == ord("b") and out["a"][0, 0] == ord("a")

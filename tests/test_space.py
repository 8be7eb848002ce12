import pytest

from pase.builder import GraphBuilder
from pase.errors import OptionError, StrategyError, TooLargeError
from pase.ir import Dim, Op
from pase.registry import MODELS
from pase.space import ConfigSpace, candidate_factors, enumerate_configs


def test_divisors_not_only_powers_of_two():
    # 147 = 3 * 7 * 7: factors e with 147 / e >= 4 are 1, 3, 7, 21 (49 leaves 3 < 4).
    assert candidate_factors(147, 64, 4) == [1, 3, 7, 21]
    assert candidate_factors(147, 64, 4, powers_of_two=True) == [1]
    assert candidate_factors(3, 8, 4) == [1]          # no divisor leaves >= 4
    assert candidate_factors(12, 8, 1) == [1, 2, 3, 4, 6]  # capped at p


def test_product_at_most_p_and_pinned_dims():
    op = Op("x", "T", (Dim("a", 4), Dim("b", 4), Dim("c", 4)), pinned=frozenset({"c"}))
    configs = enumerate_configs(op, 4, cutoff=1)
    # a, b in {1, 2, 4} with a*b <= 4; c pinned to 1:
    expected = [(1, 1, 1), (1, 2, 1), (1, 4, 1), (2, 1, 1), (2, 2, 1), (4, 1, 1)]
    assert [tuple(r) for r in configs] == expected


def test_contiguous_rule():
    op = Op("r", "Ravel", (Dim("a", 2), Dim("b", 4), Dim("c", 4)), contiguous=True)
    rows = {tuple(r) for r in enumerate_configs(op, 8, cutoff=1)}
    assert (2, 4, 1) in rows      # a split fully, b fully... then c whole
    assert (2, 2, 1) in rows      # a fully, b partially
    assert (1, 1, 1) in rows      # nothing split
    assert (1, 2, 1) not in rows  # b split while a is not fully split
    assert (1, 1, 2) not in rows  # c split while a is not fully split
    assert (1, 2, 2) not in rows


def test_devices_must_be_positive():
    g = MODELS.get("chain")()
    for bad in (0, -3, 2.5, True):
        with pytest.raises(OptionError, match="device count must be an integer >= 1"):
            ConfigSpace(g, bad)


def test_max_configs_guard_names_the_op():
    g = MODELS.get("alexnet")()
    with pytest.raises(TooLargeError, match="op 'conv2' \\(Conv.* 113 configs .* max_configs=100"):
        ConfigSpace(g, 64, max_configs=100)


def test_index_of_errors():
    g = MODELS.get("alexnet")()
    s = ConfigSpace(g, 8)
    assert s.config(0, s.index_of("conv1", {"b": 8})) == dict(b=8, c=1, h=1, w=1, r=1, s=1, n=1)
    with pytest.raises(StrategyError, match="unknown op 'nope'"):
        s.index_of("nope", {})
    with pytest.raises(StrategyError, match="unknown dim 'z'; dims: b, c, h, w, r, s, n"):
        s.index_of("conv1", {"z": 2})
    with pytest.raises(StrategyError, match="16 ways .* more than p=8"):
        s.index_of("conv1", {"b": 16})
    with pytest.raises(StrategyError, match="dim 'h' of op 'conv1' 5 ways, but that dim is pinned"):
        s.index_of("conv1", {"h": 5})


def test_builder_graph_cutoff_default():
    b = GraphBuilder("x", cutoff=1)
    b.fc(b.input((4, 4)), 4)
    assert ConfigSpace(b.build(), 4).cutoff == 1
    assert ConfigSpace(b.build(), 4, cutoff=2).cutoff == 2

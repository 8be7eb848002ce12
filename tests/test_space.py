import itertools
import math
import time

import numpy as np
import pytest

from pase.builder import GraphBuilder
from pase.errors import OptionError, StrategyError, TooLargeError
from pase.ir import Dim, Op
from pase.registry import MODELS
from pase.space import ConfigSpace, candidate_factors, count_configs, enumerate_configs


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


def brute_force_configs(op, devices, cutoff):
    """Every factor combination, filtered by the rules in the module docstring."""
    per_dim = [[1] if d.name in op.pinned else
               [e for e in range(1, d.size + 1) if d.size % e == 0 and d.size // e >= cutoff] or [1]
               for d in op.dims]
    rows = []
    for combo in itertools.product(*per_dim):
        if math.prod(combo) > devices:
            continue
        if op.contiguous:
            partial = next((i for i, (f, d) in enumerate(zip(combo, op.dims)) if f != d.size), len(combo))
            if any(f != 1 for f in combo[partial + 1:]):
                continue
        rows.append(combo)
    return sorted(rows)


@pytest.mark.parametrize("seed", range(6))
def test_enumeration_and_count_match_brute_force(seed):
    rng = np.random.default_rng(seed)
    ndims = int(rng.integers(1, 5))
    dims = tuple(Dim(f"d{i}", int(rng.choice([1, 2, 3, 4, 6, 8, 12, 16, 36]))) for i in range(ndims))
    pinned = frozenset(d.name for d in dims if rng.random() < 0.2)
    op = Op("x", "T", dims, pinned=pinned, contiguous=bool(seed % 2))
    for devices in (1, 5, 12, 64):
        for cutoff in (1, 2, 4):
            expected = brute_force_configs(op, devices, cutoff)
            configs = enumerate_configs(op, devices, cutoff)
            assert configs.dtype == np.int64 and configs.shape == (len(expected), ndims)
            assert [tuple(r) for r in configs] == expected  # lexicographic order
            assert count_configs(op, devices, cutoff) == len(expected)


def test_huge_spaces_are_refused_at_once_in_one_line():
    # 6 dims of 2^20 on 2^40 devices: millions of configs, never listed.
    b = GraphBuilder("huge", cutoff=1)
    x = b.input((2**20,) * 6)
    b.elementwise(x, x)
    start = time.process_time()  # CPU seconds: a busy machine does not fail it
    with pytest.raises(TooLargeError) as info:
        ConfigSpace(b.build(), 2**40)
    assert time.process_time() - start < 2.0
    message = str(info.value)
    assert "\n" not in message and "over max_configs=100000" in message and "fewer devices" in message
    count = int(message.split(" configs on ")[0].rsplit(" ", 1)[1])
    # Exponents 0..20 for 6 dims summing to at most 40: the coefficients of x^0..x^40
    # in (1 + x + ... + x^20)^6.
    poly = np.ones(1, dtype=np.int64)
    for _ in range(6):
        poly = np.convolve(poly, np.ones(21, dtype=np.int64))
    assert count == int(poly[:41].sum()) > 100_000


def test_candidate_factors_of_huge_sizes_are_fast():
    start = time.process_time()  # CPU seconds: a busy machine does not fail it
    assert candidate_factors(2**40, 2**40, 1) == [2**i for i in range(41)]
    assert candidate_factors(10**12 + 39, 10**15, 1) == [1, 10**12 + 39]  # a prime
    assert time.process_time() - start < 1.0


def test_max_configs_must_be_a_positive_integer():
    g = MODELS.get("chain")()
    for bad in (0, -1, 2.5, "many", True):
        with pytest.raises(OptionError, match="max_configs must be an integer >= 1"):
            ConfigSpace(g, 4, max_configs=bad)

"""Mesh-shaped configuration spaces: contents by hand and by brute force over axis
assignments, every config spanning the mesh, dp = exhaustive, and the divisor space's
optimum never above the mesh space's (the mesh space is a subset of it)."""
from __future__ import annotations

import itertools
import math
import subprocess
import sys

import numpy as np
import pytest

import pase
from pase.errors import OptionError, StrategyError
from pase.ir import Dim, Op
from pase.registry import MODELS
from pase.solvers import dp, exhaustive
from pase.space import ConfigSpace, candidate_factors, enumerate_mesh_configs, parse_mesh


def rows(configs: np.ndarray) -> list[tuple[int, ...]]:
    return [tuple(int(x) for x in r) for r in configs]


def by_assignment(op: Op, mesh: tuple[int, ...], cutoff: int) -> set[tuple[int, ...]]:
    """Brute force: every map of mesh axes to a dim or to none (replicated), kept when
    each dim's product of axes is a factor the divisor rules allow."""
    devices = math.prod(mesh)
    allowed = [[1] if d.name in op.pinned else candidate_factors(d.size, devices, cutoff)
               for d in op.dims]
    out = set()
    for owner in itertools.product(range(len(op.dims) + 1), repeat=len(mesh)):  # last: none
        factors = tuple(math.prod(a for a, o in zip(mesh, owner) if o == k)
                        for k in range(len(op.dims)))
        if all(f in ok for f, ok in zip(factors, allowed)):
            out.add(factors)
    return out


def test_hand_computed_two_axes():
    op = Op("m", "T", (Dim("a", 8), Dim("b", 8)))
    # axis 2 -> none, a or b; axis 4 -> none, a or b: nine distinct factor pairs.
    assert rows(enumerate_mesh_configs(op, (2, 4), cutoff=1)) == [
        (1, 1), (1, 2), (1, 4), (1, 8), (2, 1), (2, 4), (4, 1), (4, 2), (8, 1)]
    # 2x2: a split 2 on either axis is one config (costs read factors only).
    op4 = Op("m", "T", (Dim("a", 4), Dim("b", 4)))
    assert rows(enumerate_mesh_configs(op4, (2, 2), cutoff=1)) == [
        (1, 1), (1, 2), (1, 4), (2, 1), (2, 2), (4, 1)]
    # cutoff 2 on size-4 dims: factors 1 and 2 only, so 4 = 2*2 on one dim goes.
    assert rows(enumerate_mesh_configs(op4, (2, 2), cutoff=2)) == [(1, 1), (1, 2), (2, 1), (2, 2)]
    # a divisor-space factor that is no product of axes (3) never appears.
    op6 = Op("m", "T", (Dim("a", 12),))
    assert rows(enumerate_mesh_configs(op6, (2, 3), cutoff=1)) == [(1,), (2,), (3,), (6,)]
    assert rows(enumerate_mesh_configs(op6, (4, 2), cutoff=1)) == [(1,), (2,), (4,)]  # 8 !| 12


def test_pinned_and_contiguous():
    op = Op("x", "T", (Dim("a", 4), Dim("b", 4), Dim("c", 4)), pinned=frozenset({"c"}))
    assert rows(enumerate_mesh_configs(op, (2, 2), cutoff=1)) == [
        (1, 1, 1), (1, 2, 1), (1, 4, 1), (2, 1, 1), (2, 2, 1), (4, 1, 1)]
    r = Op("r", "Ravel", (Dim("a", 2), Dim("b", 4), Dim("c", 4)), contiguous=True)
    got = set(rows(enumerate_mesh_configs(r, (2, 2, 2), cutoff=1)))
    assert (2, 4, 1) in got and (2, 2, 1) in got and (1, 1, 1) in got and (2, 1, 1) in got
    assert (1, 2, 1) not in got and (1, 1, 2) not in got and (2, 1, 2) not in got


@pytest.mark.parametrize("mesh", [(2, 4), (4, 2), (2, 2, 2), (3, 4), (8,), (2, 3, 2)])
def test_matches_brute_force_over_axis_assignments(mesh):
    ops = [Op("a", "T", (Dim("b", 24), Dim("n", 12), Dim("k", 16))),
           Op("b", "T", (Dim("b", 8), Dim("h", 6)), pinned=frozenset({"h"})),
           Op("c", "T", (Dim("x", 5), Dim("y", 48)))]
    for op in ops:
        for cutoff in (1, 2, 4):
            got = rows(enumerate_mesh_configs(op, mesh, cutoff=cutoff))
            assert got == sorted(by_assignment(op, mesh, cutoff)), (op.name, cutoff)


@pytest.mark.parametrize("model,p,mesh", [("alexnet", 16, "4x4"), ("transformer", 64, "8x8"),
                                          ("gpt2", 32, "2x4x4"), ("rnnlm", 12, "3x4")])
def test_every_config_spans_the_mesh_and_is_a_divisor_config(model, p, mesh):
    g = MODELS.get(model)(**({"layers": 1} if model == "gpt2" else {}))
    space = ConfigSpace(g, p, mesh=mesh)
    plain = ConfigSpace(g, p)
    axes = parse_mesh(mesh, p)
    for i in range(len(g.ops)):
        mine = set(rows(space.configs[i]))
        assert mine <= set(rows(plain.configs[i]))
        for r in mine:
            # some assignment of disjoint axes gives these factors; the rest replicate
            assert any(tuple(math.prod(a for a, o in zip(axes, owner) if o == k)
                             for k in range(len(r))) == r
                       for owner in itertools.product(range(len(r) + 1), repeat=len(axes)))
            assert p % math.prod(r) == 0


def test_mesh_space_is_much_smaller_at_large_p():
    g = MODELS.get("transformer")()
    assert sum(ConfigSpace(g, 1024, mesh="32x32").sizes) < sum(ConfigSpace(g, 1024).sizes) / 50


@pytest.mark.parametrize("model,p,mesh,cost_model", [
    ("mlp", 8, "2x4", "paper"), ("diamond", 8, "2x2x2", "paper"), ("chain", 12, "3x4", "paper"),
    ("fork-join", 8, "4x2", "paper"), ("mlp", 16, "4x4", "alpha-beta")])
def test_dp_equals_exhaustive_in_the_mesh_space(model, p, mesh, cost_model):
    built = pase.build_problem(model, p, cost_model, mesh=mesh, memory_cap="none")
    ours = dp.solve(built.problem)
    brute = exhaustive.solve(built.problem)
    assert ours.cost == pytest.approx(brute.cost, rel=1e-12)


@pytest.mark.parametrize("model,p,mesh,options", [
    ("alexnet", 16, "4x4", {}), ("alexnet", 16, "2x2x2x2", {}), ("rnnlm", 8, "2x4", {}),
    ("transformer", 16, "4x4", {}), ("gpt2", 16, "2x8", {"layers": 2})])
def test_mesh_optimum_never_below_the_divisor_optimum(model, p, mesh, options):
    plain = pase.solve(model, p, model_options=options)
    meshed = pase.solve(model, p, mesh=mesh, model_options=options)
    assert meshed.total_cost >= plain.total_cost * (1 - 1e-12)
    # and the mesh optimum is a divisor-space strategy of that cost
    again = pase.evaluate(model, meshed.configs, p, model_options=options)
    assert again.total_cost == pytest.approx(meshed.total_cost, rel=1e-12)


def test_a_single_axis_of_p_is_the_divisor_space_restricted_to_divisors_of_p():
    g = MODELS.get("alexnet")()
    one, plain = ConfigSpace(g, 16, mesh=(16,)), ConfigSpace(g, 16)
    for a, b in zip(one.configs, plain.configs):
        # one axis of 16: one dim split, by 16 or not at all
        assert set(rows(a)) == {r for r in rows(b) if math.prod(r) in (1, 16) and
                                sum(f > 1 for f in r) <= 1}


@pytest.mark.parametrize("bad,match", [
    ("16x", "mesh must be axis sizes joined by 'x'"), ("a x b", "joined by 'x'"),
    ("4x4", "mesh 4x4 has 16 devices, but p=8"), ((2, 2), "has 4 devices, but p=8"),
    ((2, 0, 4), "integers >= 1"), (8, "sequence of axis sizes"), ((2.0, 4), "sequence of axis"),
    ("", "joined by 'x'")])
def test_bad_mesh_is_one_line(bad, match):
    with pytest.raises(OptionError, match=match) as info:
        ConfigSpace(MODELS.get("mlp")(), 8, mesh=bad)
    assert "\n" not in str(info.value)


def test_index_of_names_the_mesh():
    g = MODELS.get("mlp")()
    space = ConfigSpace(g, 8, mesh="2x4")
    op = g.ops[0]
    big = next(d for d in op.dims if d.size % 8 == 0 and d.name not in op.pinned)
    space.index_of(op.name, {big.name: 8})
    other = next(d for d in op.dims if d.name != big.name and d.size % 8 == 0
                 and d.name not in op.pinned)
    # 2 x 4 on two dims is on the mesh; 4 x 2 too; 8 x 1 too; but 1 x 3 never (3 !| 8 anyway)
    space.index_of(op.name, {big.name: 2, other.name: 4})
    with pytest.raises(StrategyError, match="mesh 4x4"):
        ConfigSpace(g, 16, mesh="4x4").index_of(op.name, {big.name: 2, other.name: 8})


def test_cli_refuses_a_bad_mesh_in_one_line():
    done = subprocess.run([sys.executable, "-m", "pase", "inspect", "mlp", "-p", "8",
                           "--mesh", "3x3"], capture_output=True, text=True)
    assert done.returncode == 2
    assert done.stderr.strip() == "pase: error: mesh 3x3 has 9 devices, but p=8; the axis sizes " \
                                  "must multiply to p"
    ok = subprocess.run([sys.executable, "-m", "pase", "inspect", "mlp", "-p", "8", "--mesh",
                         "2x4", "--format", "json"], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr

"""Exact solvers agree with brute force at every cost scale, with and without memory caps;
heuristics and baselines never beat them.

Costs of ~1e-9 (seconds, the alpha-beta model) and ~1e12 (FLOP, the paper model)
are where solvers with absolute tolerances go wrong, so every agreement test runs
at both. The oracle is a brute force over itertools.product, independent of every
solver under test (exhaustive included).
"""
import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pase
from pase.problem import COST_RTOL
from pase.registry import SOLVERS
from pase.testing import random_chain, random_dag, random_tree, scale_costs

EXACT = [e.name for e in SOLVERS.entries()
         if e.info.get("exact") and (e.info.get("available") is None or e.info["available"]())]
ILP = [n for n in EXACT if n.startswith("ilp-")]
HEURISTIC = {"greedy": {}, "mcmc": {"iterations": 300}}
BASELINES = ["data-parallel", "owt", "megatron"]
SCALES = [1e-9, 1e12]
SHAPES = {"chain": random_chain, "tree": random_tree,
          "dag": lambda n, k, seed, **kw: random_dag(n, k, 2, seed, **kw)}
AGREE = settings(max_examples=14, deadline=None, derandomize=True)


def brute_force(problem):
    """(cost, choice) of the cheapest strategy that fits, or (inf, None)."""
    best = (float("inf"), None)
    for choice in itertools.product(*(range(k) for k in problem.sizes)):
        if problem.fits(choice):
            cost = problem.evaluate(choice)
            if cost < best[0]:
                best = (cost, choice)
    return best


def magnitude(problem):
    return max(float(abs(a).max()) for a in problem.vertex_costs + problem.edge_costs)


def assert_agrees(name, sol, problem, truth):
    cost, choice = truth
    tol = COST_RTOL * max(abs(cost), problem.term_scale(choice)) if choice else 0.0
    if choice is None:
        assert sol.status is pase.Status.INFEASIBLE and sol.choice is None, name
        return
    assert sol.status is pase.Status.OPTIMAL, (name, sol.status)
    assert problem.fits(sol.choice), name
    assert abs(problem.evaluate(sol.choice) - cost) <= tol, (name, problem.evaluate(sol.choice), cost)
    if sol.lower_bound is not None:
        assert sol.lower_bound <= cost + tol, (name, sol.lower_bound, cost)


def assert_never_beats(name, sol, problem, truth):
    cost, choice = truth
    if sol.choice is None:
        return
    assert problem.fits(sol.choice), name
    if choice is not None:
        tol = COST_RTOL * max(abs(cost), problem.term_scale(choice), problem.term_scale(sol.choice))
        assert problem.evaluate(sol.choice) >= cost - tol, name


@AGREE
@given(shape=st.sampled_from(sorted(SHAPES)), n=st.integers(1, 5), k=st.integers(1, 4),
       seed=st.integers(0, 10_000), scale=st.sampled_from(SCALES),
       cap=st.sampled_from([None, 0.2, 0.6, -1.0]))
def test_exact_solvers_agree_at_every_scale_with_and_without_caps(shape, n, k, seed, scale, cap):
    problem = SHAPES[shape](n, k, seed, scale=scale, memory_scale=2.0**30, cap=cap)
    truth = brute_force(problem)
    for name in EXACT:
        assert_agrees(name, pase.run_solver(name, problem, seed=0), problem, truth)
    for name, options in HEURISTIC.items():
        assert_never_beats(name, pase.run_solver(name, problem, seed=0, **options), problem, truth)


@settings(max_examples=12, deadline=None, derandomize=True)
@given(shape=st.sampled_from(sorted(SHAPES)), n=st.integers(2, 5), k=st.integers(2, 4),
       seed=st.integers(0, 10_000), factor=st.sampled_from([1e6, 1e9, 1e12, 1e15]),
       scale=st.sampled_from([1e-9, 1.0, 1e12]), on_edge=st.booleans(), data=st.data())
def test_optimal_next_to_a_big_m_entry_is_the_optimum(shape, n, k, seed, factor, scale,
                                                       on_edge, data):
    """One entry ``factor`` times the others (a big-M penalty): every exact solver may
    lose precision there, but OPTIMAL must still be the optimum to 1e-9 of the terms
    the optimum pays, and no bound may pass it."""
    base = SHAPES[shape](n, k, seed, scale=scale)
    vertex_costs = [c.copy() for c in base.vertex_costs]
    edge_costs = [m.copy() for m in base.edge_costs]
    arrays = edge_costs if on_edge and edge_costs else vertex_costs
    target = arrays[data.draw(st.integers(0, len(arrays) - 1), label="array")]
    flat = data.draw(st.integers(0, target.size - 1), label="entry")
    target.flat[flat] = factor * magnitude(base)
    problem = pase.Problem(vertex_costs, base.edges, edge_costs)
    cost, choice = brute_force(problem)
    tol = COST_RTOL * max(abs(cost), problem.term_scale(choice))
    for name in EXACT:
        sol = pase.run_solver(name, problem)
        if sol.lower_bound is not None:
            assert sol.lower_bound <= cost + tol, (name, sol.lower_bound, cost)
        if sol.status is pase.Status.OPTIMAL:
            assert abs(sol.cost - cost) <= tol, (name, sol.cost, cost)
        else:
            assert name.startswith("ilp-") and sol.status is pase.Status.FEASIBLE, (name, sol.status)


@settings(max_examples=6, deadline=None, derandomize=True)
@given(size=st.integers(2, 5), seed=st.integers(0, 10_000), devices=st.sampled_from([2, 3, 4]),
       scale=st.sampled_from(SCALES))
def test_on_graph_problems_exact_agree_and_baselines_never_beat_them(size, seed, devices, scale):
    built = pase.build_problem("random", devices, model_options={"size": size, "seed": seed})
    problem = scale_costs(built.problem, scale / magnitude(built.problem) * 100)
    truth = brute_force(problem)
    for name in EXACT:
        assert_agrees(name, pase.run_solver(name, problem, seed=0), problem, truth)
    for name in BASELINES + list(HEURISTIC):
        sol = pase.run_solver(name, problem, seed=0, **HEURISTIC.get(name, {}))
        assert_never_beats(name, sol, problem, truth)


@pytest.mark.slow
@pytest.mark.parametrize("model", ["alexnet", "rnnlm"])
@pytest.mark.parametrize("backend", ILP)
def test_ilp_backends_prove_the_dp_optimum_on_paper_graphs(model, backend):
    built = pase.build_problem(model, 8)
    dp = pase.run_solver("dp", built.problem)
    sol = pase.run_solver(backend, built.problem, time_limit=120)
    assert sol.status is pase.Status.OPTIMAL
    assert sol.cost == pytest.approx(dp.cost, rel=1e-6)


def test_data_parallel_equals_the_hand_built_all_batch_strategy():
    graph = pase.load_graph("alexnet")
    by_hand = {op.name: {"b": 8} for op in graph.ops}  # every AlexNet op has a batch dim b
    expected = pase.evaluate("alexnet", by_hand, devices=8).total_cost
    assert pase.solve("alexnet", devices=8, solver="data-parallel").total_cost == expected


def test_owt_splits_fc_outputs_and_batches_the_rest():
    s = pase.solve("alexnet", devices=8, solver="owt")
    assert s.split("conv1") == {"b": 8} and s.split("pool5") == {"b": 8}
    assert s.split("fc6") == {"n": 8} and s.split("fc8") == {"n": 8}


def test_megatron_picks_the_best_grid():
    built = pase.build_problem("transformer", 8)
    sol = pase.run_solver("megatron", built.problem)
    m, n = sol.stats["data_parallel"], sol.stats["tensor_parallel"]
    assert m * n == 8
    assert sol.cost <= pase.run_solver("data-parallel", built.problem).cost


def test_baselines_refuse_a_bare_problem():
    with pytest.raises(pase.PaseError, match="needs a Problem made by a cost model"):
        pase.run_solver("owt", random_chain(3))


@pytest.mark.parametrize("backend", ILP)
def test_ilp_refuses_a_model_too_large_for_memory(backend):
    built = pase.build_problem("alexnet", 8)
    with pytest.raises(pase.PaseError, match=r"ILP would have [\d,]+ variables .* max_variables=1,000"):
        pase.run_solver(backend, built.problem, max_variables=1000)

"""Exact solvers agree with each other; heuristics and baselines never beat them."""
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pase
from pase.registry import SOLVERS

EXACT = [e.name for e in SOLVERS.entries()
         if e.info.get("exact") and (e.info.get("available") is None or e.info["available"]())]
HEURISTIC = ["greedy", "mcmc", "data-parallel", "owt", "megatron"]


@settings(max_examples=25, deadline=None)
@given(size=st.integers(2, 5), seed=st.integers(0, 10_000), devices=st.sampled_from([2, 3, 4]))
def test_exact_solvers_agree_and_heuristics_never_beat_them(size, seed, devices):
    built = pase.build_problem("random", devices, model_options={"size": size, "seed": seed})
    problem = built.problem
    optimum = pase.run_solver("exhaustive", problem).cost
    for name in EXACT:
        sol = pase.run_solver(name, problem, seed=0)
        assert sol.status is pase.Status.OPTIMAL, name
        assert sol.cost == pytest.approx(optimum, rel=1e-6), name
    for name in HEURISTIC:
        assert pase.run_solver(name, problem, seed=0).cost >= optimum * (1 - 1e-9), name


@pytest.mark.parametrize("model", ["alexnet", "rnnlm"])
@pytest.mark.parametrize("backend", [n for n in EXACT if n.startswith("ilp-")])
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
    from pase.testing import random_problem

    with pytest.raises(pase.PaseError, match="needs a Problem made by a cost model"):
        pase.run_solver("owt", random_problem(3))


@pytest.mark.parametrize("backend", [n for n in EXACT if n.startswith("ilp-")])
def test_ilp_refuses_a_model_too_large_for_memory(backend):
    built = pase.build_problem("alexnet", 8)
    with pytest.raises(pase.PaseError, match=r"ILP would have [\d,]+ variables .* max_variables=1,000"):
        pase.run_solver(backend, built.problem, max_variables=1000)


@settings(max_examples=30, deadline=None)
@given(size=st.integers(1, 7), seed=st.integers(0, 10_000), fraction=st.floats(-0.2, 1.0))
def test_memory_capped_dp_equals_capped_exhaustive_and_ilp(size, seed, fraction):
    from pase.testing import random_problem

    base = random_problem(size, 5, 2, seed=seed, with_memory=True)
    low = base.min_memory()
    high = sum(float(m.max()) for m in base.memory)
    problem = base.with_memory_cap(low + fraction * (high - low))
    truth = pase.run_solver("exhaustive", problem)
    for name in EXACT:
        sol = pase.run_solver(name, problem, seed=0)
        assert sol.status is truth.status, name
        if truth.status is pase.Status.OPTIMAL:
            assert sol.cost == pytest.approx(truth.cost, rel=1e-6), name
            assert problem.fits(sol.choice), name

"""``auto``: the dp where it fits, the decomposition where it does not, each answer
checked against exhaustive search and the ILPs (never against auto's own arithmetic)."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pase
from pase.errors import OptionError, TooLargeError
from pase.problem import COST_RTOL, Status
from pase.solvers import exhaustive
from pase.solvers.auto import solve
from pase.testing import random_dag, random_dense

# One kept edge per vertex (a spanning forest): the decomposition drops every other edge.
FOREST_ONLY = {"method": "decompose", "relaxed_entries": 1}


def _close(a, b, scale):
    return abs(a - b) <= COST_RTOL * max(abs(scale), 1.0)


def _check_against(answer, problem, optimum):
    """What the decomposition may claim, given the true optimum."""
    assert answer.choice is not None
    assert _close(problem.evaluate(answer.choice), answer.cost, answer.cost)
    assert answer.cost >= optimum - COST_RTOL * abs(optimum)       # never below the optimum
    assert answer.lower_bound <= optimum + COST_RTOL * abs(optimum)  # a bound, not a guess
    if answer.status is Status.OPTIMAL:
        assert _close(answer.cost, optimum, optimum)


@settings(max_examples=60, deadline=None)
@given(blocks=st.integers(1, 2), size=st.integers(2, 4), k=st.integers(2, 4),
       seed=st.integers(0, 10**6), scale=st.sampled_from([1e-9, 1.0, 1e15]))
def test_decomposition_is_honest_on_dense_blocks(blocks, size, k, seed, scale):
    problem = random_dense(blocks, size, k, seed=seed, scale=scale)
    optimum = exhaustive.solve(problem).cost
    _check_against(solve(problem, **FOREST_ONLY), problem, optimum)
    # auto itself takes the dp here (it fits) and is exact
    answer = solve(problem)
    assert answer.stats["method"] == "dp" and answer.status is Status.OPTIMAL
    assert _close(answer.cost, optimum, optimum)


@pytest.mark.slow  # 30 s on two cores: the fast suite keeps its ten-minute budget
@settings(max_examples=30, deadline=None)
@given(size=st.integers(3, 5), seed=st.integers(0, 10**6), cap=st.sampled_from([0.3, 0.7]))
def test_decomposition_under_a_cap(size, seed, cap):
    problem = random_dense(1, size, 3, seed=seed, with_memory=True, cap=cap)
    best = exhaustive.solve(problem)
    answer = solve(problem, **FOREST_ONLY)
    if best.status is Status.INFEASIBLE:
        assert answer.status is Status.INFEASIBLE and answer.choice is None
        return
    assert problem.fits(answer.choice)
    _check_against(answer, problem, best.cost)


def test_nothing_fits_is_infeasible():
    problem = random_dense(1, 4, 3, seed=1, with_memory=True, cap=-1)
    assert solve(problem, **FOREST_ONLY).status is Status.INFEASIBLE


@pytest.mark.parametrize("seed", range(4))
def test_decomposition_agrees_with_the_ilps(seed):
    """Two exact methods that both finish give one optimum (here 16-20 vertices)."""
    problem = random_dense(2, 8 + seed % 3, 4, seed=seed, scale=1e12)
    answer = solve(problem, method="decompose", relaxed_entries=200)
    for name in ("ilp-highs", "ilp-cpsat"):
        ilp = pase.run_solver(name, problem)
        assert ilp.status is Status.OPTIMAL
        _check_against(answer, problem, ilp.cost)


@pytest.mark.slow  # 13 s; CI runs it (the fast suite stays under 10 minutes on 2 cores)
def test_densenet_refused_by_the_dp_is_solved_with_a_proof():
    built = pase.build_problem("densenet121", 8)
    with pytest.raises(TooLargeError, match="GiB"):
        solve(built.problem, method="dp")
    answer = solve(built.problem)
    assert answer.stats["method"] == "decompose"
    assert answer.stats["why"].startswith("the dp does not fit")
    assert answer.status is Status.OPTIMAL and answer.gap == 0.0
    ilp = pase.run_solver("ilp-highs", built.problem)
    assert ilp.status is Status.OPTIMAL and _close(ilp.cost, answer.cost, answer.cost)


def test_deterministic():
    problem = random_dense(2, 6, 4, seed=7, scale=1e9)
    a = solve(problem, method="decompose", relaxed_entries=50)
    b = solve(problem, method="decompose", relaxed_entries=50)
    assert (a.choice, a.cost, a.lower_bound) == (b.choice, b.cost, b.lower_bound)


def test_time_limit_returns_the_best_so_far(monkeypatch):
    from pase.solvers.auto import dual

    # The ascent never gives up on a small step, so only a proof or the clock ends it,
    # however fast the machine (with the default it can stall out first, as feasible).
    monkeypatch.setattr(dual, "MIN_THETA", 0.0)
    problem = random_dense(3, 10, 6, seed=3, scale=1e12)
    answer = solve(problem, method="decompose", relaxed_entries=1, steps=10**6,
                   rounds=1, gap=0.0, time_limit=0.5)
    assert answer.status in (Status.TIME_LIMIT, Status.OPTIMAL)
    assert answer.choice is not None and answer.lower_bound <= answer.cost
    assert answer.wall_time < 5


@pytest.mark.parametrize("option, value, words", [
    ("method", "ilp", "choose from auto, dp, decompose"),
    ("steps", 0, "steps"), ("rounds", -1, "rounds"), ("gap", -0.1, "gap"),
    ("relaxed_entries", 0, "relaxed_entries"), ("ordering", "x", "ordering"),
])
def test_bad_options_are_named(option, value, words):
    with pytest.raises(OptionError, match=words):
        solve(random_dag(4, seed=0), **{option: value})


def test_listed_and_default():
    entry = pase.registry.SOLVERS.entry("auto")
    assert entry.info["exact"] is True
    assert pase.solve("mlp", 4).solution.solver == "auto"


def test_conformance_battery():
    pase.testing.check_solver("auto")


@pytest.mark.parametrize("model, devices", [("densenet121", 8), ("alexnet", 8), ("unet", 8),
                                            ("inception_v3", 8)])
def test_dry_run_names_the_method_solve_takes(model, devices):
    predicted = pase.dry_run(model, devices)["auto"]
    answer = pase.solve(model, devices).solution
    assert predicted["method"] == answer.stats["method"]
    if predicted["method"] == "decompose":
        assert predicted["estimated_seconds"] <= predicted["estimated_seconds_at_most"]
        assert predicted["kept_edges"] + predicted["dropped_edges"] == len(
            pase.build_problem(model, devices).problem.edges)


@pytest.fixture
def eager_probe(monkeypatch):
    """The probe on every dp, however short or narrow (it normally waits for a 10 s dp plan
    of a dependent set of 3 or more)."""
    from pase.solvers.auto import probe

    monkeypatch.setattr(probe, "MIN_DP_SECONDS", 0.0)
    monkeypatch.setattr(probe, "MAX_SHARE", 1e9)
    monkeypatch.setattr(probe, "MIN_WIDTH", 0)


def test_a_narrow_plan_is_not_probed(monkeypatch):
    # gpt2's chain of layers has a narrow dependent set: the dp folds its repeated blocks,
    # and a probe there only costs time (its proof fails), capped or not.
    from pase.solvers.auto import probe

    monkeypatch.setattr(probe, "MIN_DP_SECONDS", 0.0)
    monkeypatch.setattr(probe, "MAX_SHARE", 1e9)
    built = pase.build_problem(pase.load_graph("gpt2", layers=2), 64)
    answer = solve(built.problem)
    assert answer.stats["max_dependent_set"] < probe.MIN_WIDTH
    assert answer.stats["method"] == "dp" and "probe" not in answer.stats["why"]


@pytest.mark.parametrize("model, devices, options, proven", [
    ("transformer", 8, {}, True), ("transformer", 16, {}, True), ("gpt2", 64, {"layers": 2}, False)])
def test_a_probe_proves_or_hands_over_to_the_dp(eager_probe, model, devices, options, proven):
    built = pase.build_problem(pase.load_graph(model, **options), devices)
    reference = pase.run_solver("dp", built.problem)
    answer = solve(built.problem)
    assert answer.status is Status.OPTIMAL and _close(answer.cost, reference.cost, reference.cost)
    assert answer.stats["method"] == ("decompose" if proven else "dp")
    assert ("proved the optimum first" if proven else "found no proof") in answer.stats["why"]


def test_the_dry_run_announces_the_probe():
    probe = pase.dry_run("transformer", 1024)["auto"]["probe"]
    assert probe["steps"] == 2 and 0 < probe["estimated_seconds"] < probe["estimated_seconds_at_most"]
    capped = pase.dry_run("transformer", 1024, cluster="h100-sxm", cost_model="alpha-beta")
    assert "probe" in capped["auto"] and "when it fits the cap" in capped["auto"]["note"]


@pytest.mark.parametrize("binds", [False, True])
def test_under_a_cap_the_probe_keeps_only_an_optimum_that_fits(eager_probe, binds):
    """The probe solves without the cap (every capped plan is an uncapped one): its optimum
    is the capped optimum when it fits, and the dp runs when the cap binds."""
    built = pase.build_problem(pase.load_graph("transformer"), 8, cost_model="alpha-beta",
                               cluster="dgx-a100")
    free = built.problem.with_memory_cap(None)
    reference = pase.run_solver("dp", free)
    used = free.memory_of(reference.choice)
    cap = (used + free.min_memory()) / 2 if binds else used
    problem = free.with_memory_cap(cap)
    capped = pase.run_solver("dp", problem)
    answer = solve(problem)
    assert answer.status is Status.OPTIMAL and problem.fits(answer.choice)
    assert _close(answer.cost, capped.cost, capped.cost)
    assert answer.stats["method"] == ("dp" if binds else "decompose")
    assert ("does not fit it" if binds else "within the memory cap") in answer.stats["why"]
    if binds:
        assert capped.cost > reference.cost * (1 + 1e-9)  # the cap does bind


def test_the_probes_split_handed_to_the_decomposition_changes_nothing():
    from pase.deadline import Deadline
    from pase.solvers.auto.decompose import decompose
    from pase.solvers.auto.split import edge_weights, kept_edges

    problem = random_dense(3, 8, 5, seed=1)
    split = kept_edges(problem, edge_weights(problem), 40, 2**30)
    runs = [decompose(problem, entries=40, budget=2**30, steps=30, rounds=2, gap=0.0,
                      deadline=Deadline(None), split=s) for s in (None, split)]
    assert [(r.choice, r.cost, r.lower_bound, r.status) for r in runs[:1]] == \
        [(r.choice, r.cost, r.lower_bound, r.status) for r in runs[1:]]
    assert runs[0].stats["rounds"] == runs[1].stats["rounds"]

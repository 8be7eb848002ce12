"""A stage whose fastest plan is far over the memory cap still finds the plans that fit; one
too large for its solver is left out, and the answer then claims no bound."""
from __future__ import annotations

from pase.cluster import get_cluster
from pase.pipeline import solve_pipeline
from pase.pipeline.solve import _loader, with_defaults
from pase.pipeline.stages import StageOracle

CAP = 0.6 * 2**30  # gpt2 at two layers on 8 H100s: its fastest one-stage plan keeps 0.708 GiB


def test_a_stage_far_over_the_cap_finds_its_fitting_plans():
    # the room for the capped solve was cut by the free plan's overshoot (0.108 GiB) before
    # any capped plan was solved: at 0.492 GiB none fitted, so the stage had no plan, though
    # one keeps 0.598 GiB (`pase solve` then answered 3.043 ms, feasible, gap 1.9%,
    # against 2.983 ms, optimal)
    full, load = _loader("gpt2", 16, {"layers": 2})
    costs = with_defaults({"cluster": "h100-sxm"}, "calibrated", get_cluster("h100-sxm", 8))
    oracle = StageOracle(load, full, costs, CAP, {"powers_of_two": True},
                         cost_model="calibrated", devices=8)
    n = len(oracle.graph(1).ops)
    free = oracle.options(((0, n),), 8, 1, 1.0)
    uncapped = StageOracle(load, full, costs, None, {"powers_of_two": True},
                           cost_model="calibrated", devices=8).options(((0, n),), 8, 1, 1.0)
    assert min(r.memory for r in uncapped) > CAP  # the fastest plan does not fit
    assert free and all(r.memory <= CAP for r in free)
    plan = solve_pipeline("gpt2", 8, batch=16, cluster="h100-sxm", model_options={"layers": 2},
                          memory_cap=CAP, microbatches=[1], stage_sizes=[8])
    assert plan.fits_memory and plan.status == "optimal"


def test_a_stage_too_large_for_its_solver_is_left_out_and_the_answer_claims_no_bound():
    # the capped dp of a stage refused its Pareto fronts (over max_states): the whole
    # command failed with that message, though the layouts' start plan fitted; now the
    # stage has no plan and the search goes on, its answer without a proof
    from pase.errors import TooLargeError

    def refusing(problem):
        raise TooLargeError("dp under a memory cap would generate 66381789 (cost, memory) "
                            "points at once")

    full, load = _loader("gpt2", 16, {"layers": 2})
    costs = with_defaults({"cluster": "h100-sxm"}, "calibrated", get_cluster("h100-sxm", 8))
    said = []
    oracle = StageOracle(load, full, costs, CAP, {"powers_of_two": True}, solve=refusing,
                         cost_model="calibrated", devices=8, progress=said.append)
    n = len(oracle.graph(1).ops)
    assert not oracle.options(((0, n),), 8, 1, 1.0)
    assert not oracle.all_optimal
    assert any("too large for its solver" in line and "no bound" in line for line in said)

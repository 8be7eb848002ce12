"""pase.replan: its limits (N -> infinity is a fresh solve, N = 0 keeps the old layout), exact
solvers agreeing on the replan Problem, the baselines, and the three scenarios."""
from __future__ import annotations

import numpy as np
import pytest

import pase
from pase.api import run_solver
from pase.errors import OptionError, StrategyError
from pase.replan import break_even, prepare, replan, replan_problem
from pase.replan.result import Plan

pytest.importorskip("highspy")

# A GPT-2 shape small enough to build at 64 devices in about a second, large enough that its
# optimum splits weights (16 ways at 64 devices).
TINY = {"layers": 1, "width": 512, "heads": 8, "ff": 2048, "vocab": 4096, "seq": 128, "positions": 256,
        "batch": 256}
AB = {"cost_model": "alpha-beta", "cluster": "dgx-a100"}


def solved(devices: int, **options):
    return pase.solve("gpt2", devices, model_options={**TINY, **options}, **AB)


@pytest.fixture(scope="module")
def old16():
    return solved(16)


def test_many_steps_is_a_fresh_solve(old16):
    for devices in (8, 16, 32):
        fresh = solved(devices)
        got = replan("gpt2", old16, devices=devices, steps=1e12, model_options=TINY)
        assert got.chosen.step_seconds == pytest.approx(fresh.total_cost, rel=1e-9)
        assert got.strategy.total_cost == pytest.approx(fresh.total_cost, rel=1e-9)


@pytest.mark.parametrize("solver", ["dp", "data-parallel", "megatron"])
def test_no_steps_keeps_a_valid_old_layout(solver):
    # Same devices, a longer sequence: every old config is still a candidate, and moves nothing;
    # other layouts that move nothing tie with it (ops without parameters), and lose the tie.
    old = pase.solve("gpt2", 16, solver, model_options=TINY, **AB)
    got = replan("gpt2", old, devices=16, steps=0, model_options={**TINY, "seq": 256})
    assert dict(got.strategy.configs) == {op: dict(c) for op, c in old.configs.items()}
    assert got.chosen.migration_seconds == 0 and got.chosen.total_seconds == 0
    assert "keep" in got.baselines and got.baselines["keep"].choice == got.chosen.choice


def test_no_steps_moves_the_least(old16):
    # 16 -> 32: the new ranks must receive something; N = 0 moves the least possible, which
    # is each op's own least (the migration is a sum of per-op terms).
    got = replan("gpt2", old16, devices=32, steps=0, model_options=TINY)
    least = sum(float(m.min()) for m in got.problem.vertex_costs)
    assert got.chosen.migration_seconds == pytest.approx(least, rel=1e-12)
    assert got.chosen.migration_seconds > 0
    assert got.chosen.migration_seconds <= got.baselines["keep"].migration_seconds


@pytest.mark.parametrize("devices, steps", [(4, 3.0), (8, 0.5), (6, 10.0)])
def test_exact_solvers_agree_on_the_replan_problem(devices, steps):
    old = pase.solve("chain", 4, model_options={"length": 3}, **AB)
    got = replan("chain", old, devices=devices, steps=steps, model_options={"length": 3})
    costs = {s: run_solver(s, got.problem).cost for s in ("dp", "ilp-highs", "exhaustive")}
    assert costs["ilp-highs"] == pytest.approx(costs["dp"], rel=1e-7)
    assert costs["exhaustive"] == pytest.approx(costs["dp"], rel=1e-12)
    assert got.chosen.total_seconds == pytest.approx(costs["dp"], rel=1e-12)


def test_dp_equals_ilp_on_a_transformer_block(old16):
    got = replan("gpt2", old16, devices=8, steps=20, model_options=TINY)
    dp, ilp = (run_solver(s, got.problem) for s in ("dp", "ilp-highs"))
    assert dp.is_optimal and ilp.is_optimal
    assert ilp.cost == pytest.approx(dp.cost, rel=1e-7)


def test_one_build_answers_every_step_count(old16):
    prep = prepare("gpt2", old16, devices=32, model_options=TINY)
    for steps in (0.0, 3.0, 1e9):
        once, again = prep.replan(steps), replan("gpt2", old16, devices=32, steps=steps,
                                                 model_options=TINY)
        assert once.chosen.total_seconds == pytest.approx(again.chosen.total_seconds, rel=1e-12)
        assert once.baselines.keys() == again.baselines.keys()
        # min over strategies of (steps x step + migration) is below each baseline's line
        for plan in once.baselines.values():
            assert once.chosen.total_seconds <= steps * plan.step_seconds + plan.migration_seconds \
                * (1 + 1e-12) + 1e-15


def test_the_optimizer_sets_the_copies_moved(old16):
    # Adam moves the weight and two moments, SGD the weight alone: a third of the bytes.
    adam, sgd = (replan("gpt2", old16, devices=32, steps=0, model_options=TINY,
                        cost_options={"optimizer": o}) for o in ("adam", "sgd"))
    assert adam.chosen.choice == sgd.chosen.choice
    assert sgd.chosen.migration_bytes * 3 == pytest.approx(adam.chosen.migration_bytes, rel=1e-12)
    assert adam.chosen.migration_bytes > 0


def test_replan_problem_scales_steps_and_adds_migration():
    step = pase.build_problem("chain", 4, "alpha-beta", cluster="dgx-a100").problem
    mig = [np.arange(len(c), dtype=float) for c in step.vertex_costs]
    p = replan_problem(step, mig, 7.0)
    rng = np.random.default_rng(0)
    for _ in range(20):
        choice = [int(rng.integers(len(c))) for c in step.vertex_costs]
        assert p.evaluate(choice) == pytest.approx(7 * step.evaluate(choice) + sum(choice), rel=1e-12)


def test_break_even_by_hand():
    def plan(step, mig):
        return Plan("x", "", step, mig, 0.0, 0.0, 1.0)

    assert break_even(plan(1.0, 10.0), plan(3.0, 4.0)) == pytest.approx(3.0)  # (10-4)/(3-1)
    assert break_even(plan(1.0, 2.0), plan(3.0, 4.0)) == 0.0
    assert break_even(plan(3.0, 10.0), plan(3.0, 4.0)) is None
    assert break_even(plan(3.0, 1.0), plan(3.0, 4.0)) == 0.0
    # a slower step that migrates less wins only for few steps: never "after"
    assert break_even(plan(4.0, 1.0), plan(3.0, 4.0)) is None


def test_the_chosen_plan_is_no_worse_than_any_baseline(old16):
    got = replan("gpt2", old16, devices=32, steps=5, model_options=TINY)
    assert {"keep", "least", "fresh", "restart"} <= set(got.baselines)
    for plan in got.baselines.values():
        assert got.chosen.total_seconds <= plan.total_seconds * (1 + 1e-12)
    assert got.baselines["restart"].restored_bytes == got.baselines["restart"].migration_bytes > 0


# -- the three scenarios -------------------------------------------------------------------------

@pytest.fixture(scope="module")
def old64():
    return solved(64)


def test_a_node_fails(old64):
    got = replan("gpt2", old64, cluster="dgx-a100x7", steps=100, model_options=TINY)
    assert (got.devices, got.old_devices, got.survivors) == (56, 64, 56)
    assert got.cluster == "dgx-a100x7"
    assert got.chosen.step_seconds >= got.baselines["fresh"].step_seconds * (1 - 1e-12)
    data = got.to_dict()
    assert ("keep" in got.baselines) == (not data["notes"])
    if "keep" not in got.baselines:
        assert data["notes"][0].startswith("keep is not available: ")
    assert data["migration"]["seconds"] == pytest.approx(got.chosen.migration_seconds)
    assert all(ch["old"] != ch["new"] or ch["migration_seconds"] > 0 for ch in data["changed_ops"])


def test_the_job_grows():
    old = solved(32)
    got = replan("gpt2", old, devices=64, steps=100, model_options=TINY)
    assert (got.devices, got.old_devices, got.survivors) == (64, 32, 32)
    assert got.chosen.migration_bytes > 0  # ranks 32..63 start empty
    assert got.chosen.restored_bytes == 0  # nothing is lost when growing


def test_the_sequence_doubles():
    old = solved(8)
    got = replan("gpt2", old, devices=8, steps=100, model_options={**TINY, "seq": 256},
                 old_model_options={"seq": 128})
    assert got.baselines["least"].migration_seconds == 0  # the old layout moves nothing
    assert got.chosen.total_seconds <= got.baselines["keep"].total_seconds * (1 + 1e-12)


@pytest.mark.slow  # about 9 s: two builds on 32 mixed devices
def test_onto_a_mixed_cluster(old16):
    # 16 A100 -> 16 A100 + 16 V100: many steps give the fresh optimum of the mixed cluster
    # (both under the calibrated model, the default with a cluster, mixed ones too).
    cluster = "dgx-a100x2+dgx1-v100x2"
    fresh = pase.solve("gpt2", 32, model_options=TINY, cluster=cluster)
    got = replan("gpt2", old16, cluster=cluster, steps=1e12, model_options=TINY)
    assert (got.devices, got.survivors) == (32, 16)
    assert got.chosen.step_seconds == pytest.approx(fresh.total_cost, rel=1e-9)
    few = replan("gpt2", old16, cluster=cluster, steps=0, model_options=TINY)
    assert few.chosen.migration_seconds <= got.chosen.migration_seconds


@pytest.mark.slow  # about 5 s: builds on 16 and 24 mixed devices
def test_survivors_keep_their_device_type():
    # Ranks fill the fastest type first: 8 V100s joined by 8 A100s become ranks 8..15, so the
    # default survivors (ranks 0..7) would be the new A100s: refused by name, --survivors 0
    # restarts. From a mixed 8+8 cluster to 8 A100 + 16 V100, ranks 0..15 keep their type and,
    # with no steps left, nothing moves.
    mixed = "dgx-a100x1+dgx1-v100x1"
    v100 = pase.solve("gpt2", 8, model_options=TINY, cost_model="alpha-beta", cluster="dgx1-v100")
    with pytest.raises(OptionError, match=r"survivor rank 0: V100 SXM2 32GB on the old cluster, "
                                          r"A100 SXM4 40GB on the new one .* at most 0"):
        replan("gpt2", v100, cluster=mixed, steps=0, model_options=TINY, old_cluster="dgx1-v100")
    restart = replan("gpt2", v100, cluster=mixed, steps=0, model_options=TINY,
                     old_cluster="dgx1-v100", survivors=0)
    assert restart.chosen.restored_bytes == restart.chosen.migration_bytes > 0
    old = pase.solve("gpt2", 16, model_options=TINY, cost_model="alpha-beta", cluster=mixed)
    got = replan("gpt2", old, cluster="dgx-a100x1+dgx1-v100x2", steps=0, model_options=TINY,
                 old_cluster=mixed)
    assert got.survivors == 16 and got.chosen.migration_seconds == 0
    with pytest.raises(OptionError, match="survivor rank 8: V100"):
        replan("gpt2", old, cluster="dgx-a100x2+dgx1-v100x1", steps=0, model_options=TINY,
               old_cluster=mixed)


# -- bad input -----------------------------------------------------------------------------------

def test_refusals(old16):
    with pytest.raises(StrategyError, match="is for model 'gpt2', not 'chain'"):
        replan("chain", old16, devices=4)
    with pytest.raises(StrategyError, match="not valid on its own 4 devices"):
        replan("chain", {"fc1": {"n": 8}}, devices=8, old_devices=4)
    with pytest.raises(StrategyError, match="names op 'nope'"):
        replan("chain", {"nope": {"n": 2}}, devices=8, old_devices=4)
    with pytest.raises(OptionError, match="does not record its device count"):
        replan("chain", {"fc1": {"n": 2}}, devices=8)
    with pytest.raises(OptionError, match="survivors must be at most"):
        replan("chain", {"fc1": {"n": 2}}, devices=8, old_devices=4, survivors=5)
    with pytest.raises(OptionError, match="zero"):
        replan("chain", {"fc1": {"n": 2}}, devices=8, old_devices=4, cost_options={"zero": "3"})
    with pytest.raises(StrategyError, match="parameter has shape"):
        replan("gpt2", old16, devices=16, model_options=TINY, old_model_options={"vocab": 1024})
    with pytest.raises(OptionError, match="steps must be"):
        replan("chain", {"fc1": {"n": 2}}, devices=8, old_devices=4, steps=-1)


def test_the_tie_break_never_leaves_the_optimum():
    # Random small Problems with integer costs (many exact ties) and a memory cap: after
    # prefer(), the choice still fits and costs exactly the exhaustive optimum.
    from pase.problem import Problem
    from pase.replan import prefer

    rng = np.random.default_rng(7)
    moved = 0
    for _ in range(60):
        n = int(rng.integers(2, 6))
        sizes = rng.integers(1, 4, size=n)
        edges = [(u, v) for u in range(n) for v in range(u + 1, n) if rng.random() < 0.5]
        problem = Problem([rng.integers(0, 3, size=k).astype(float) for k in sizes], edges,
                          [rng.integers(0, 3, size=(sizes[u], sizes[v])).astype(float) for u, v in edges],
                          memory=[rng.integers(0, 3, size=k).astype(float) for k in sizes],
                          memory_cap=float(n))
        best = run_solver("exhaustive", problem)
        if best.choice is None:
            continue
        want = [None if rng.random() < 0.3 else int(rng.integers(k)) for k in sizes]
        got = prefer(problem, best, want)
        assert problem.fits(got.choice)
        assert problem.evaluate(got.choice) == got.cost == best.cost
        assert got.status == best.status
        moved += got.choice != best.choice
    assert moved > 0  # the pass did switch ties

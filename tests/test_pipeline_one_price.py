"""The pipeline search optimises the plan's one price: on a model small enough to list every
plan (every stage split, stage size, micro-batch count and every op's split in each stage),
the search's step is the least one price and its lower bound is at most that."""
from __future__ import annotations

import itertools
import math

import pytest

from pase import api
from pase.cluster import get_cluster
from pase.cost_models.calibrated_pipeline import stage_terms
from pase.pipeline import solve_pipeline
from pase.pipeline.sends import received
from pase.space import ConfigSpace

# two stages of two devices: the tails (gradient syncs, optimizer steps of 512 x 512
# matrices) are as long as the stages' work, so a stage's split trades one for the other
CLUSTER, DEVICES, BATCH = "dgx-a100", 4, 4
OPTS = {"length": 3, "width": 512}
COSTS = {"cluster": CLUSTER, "tp_overlap": True}


def _stage_prices(graph, first, end, devices, m):
    """(time per micro-batch with its sends both ways, tail) of every per-op split of ops
    ``first .. end-1`` on ``devices`` devices, by the one price's stage terms."""
    space = ConfigSpace(graph, devices, powers_of_two=True)
    whole = get_cluster(CLUSTER, DEVICES)
    out = []
    for pick in itertools.product(*[range(len(space.configs[i])) for i in range(first, end)]):
        configs = {graph.ops[i].name: dict(space.config(i, k))
                   for i, k in zip(range(first, end), pick)}
        work, tail, _, (bound, _, _) = stage_terms(graph, [(first, end)], devices, configs, {}, m,
                                                   COSTS)
        sends = received(graph, first, end, devices, whole, bound.bytes_per_element, bound.hw)
        out.append((work + 2 * sum(sends), sum(tail)))
    return out


def brute_force_one_price() -> float:
    """The least 1F1B step over every plan of two 2-device stages: sum t + (m - 1) max t +
    max tail, each stage's time with its sends, by the one price's stage terms."""
    best = math.inf
    for m in (1, 2, 4):
        graph = api.load_graph("chain", batch=BATCH // m, **OPTS)
        n = len(graph.ops)
        for split in range(1, n):
            stages = [(0, split, DEVICES // 2), (split, n, DEVICES // 2)]
            for pick in itertools.product(*[_stage_prices(graph, a, b, d, m)
                                            for a, b, d in stages]):
                times = [t for t, _ in pick]
                step = sum(times) + (m - 1) * max(times) + max(o for _, o in pick)
                best = min(best, step)
    return best


def test_the_search_finds_the_least_one_price_and_bounds_it():
    plan = solve_pipeline("chain", DEVICES, batch=BATCH, model_options=OPTS, cluster=CLUSTER,
                          memory_cap="none", stage_sizes=[2])
    want = brute_force_one_price()
    assert plan.step_time == pytest.approx(want, rel=1e-9)
    assert plan.search["search_step_seconds"] == pytest.approx(want, rel=1e-9)
    assert plan.lower_bound is not None and plan.lower_bound <= want * (1 + 1e-9)
    assert len(plan.stages) == 2 and min(st.tail_seconds for st in plan.stages) > 0
    assert plan.status in ("optimal", "feasible")
    if plan.status == "feasible":
        assert plan.gap > 1e-9

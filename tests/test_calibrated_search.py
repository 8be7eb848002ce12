"""The certified search's x = 1 solve in a second process: the same solves, the same answer."""
from __future__ import annotations

import json

import pytest

from pase import api
from pase.cluster import get_cluster
from pase.cost_models import calibrated_search

GPT2 = {"layers": 2, "vocab": 50304}


def slow_network(tmp_path) -> str:
    """h100-sxm nodes on a 5 Gb/s network: the gradient syncs cannot hide."""
    slow = get_cluster("h100-sxm").to_dict()
    slow.update(name="h100-slow-network", nodes=8, inter={"bandwidth_gbps": 5.0, "latency_us": 5.0})
    path = tmp_path / "slow.json"
    path.write_text(json.dumps(slow))
    return str(path)


def search(monkeypatch, cluster: str, parallel: bool):
    monkeypatch.setattr(calibrated_search, "PARALLEL_MIN_ENTRIES", 0 if parallel else None)
    monkeypatch.setattr(calibrated_search, "forked_available", lambda: True)
    return api.solve("gpt2", 16, "dp", "calibrated", cluster=cluster, batch=16, model_options=GPT2)


@pytest.mark.parametrize("cluster, solves", [("slow", 3), ("h100-sxm", 1)])
def test_the_solve_beside_finds_what_the_solves_in_turn_find(monkeypatch, tmp_path, cluster,
                                                             solves):
    """Three solves (x = 0, x = 1, the lines' crossing) on a slow network; one where the
    first plan proves itself (the solve beside is then cancelled)."""
    cluster = slow_network(tmp_path) if cluster == "slow" else cluster
    alone = search(monkeypatch, cluster, parallel=False)
    beside = search(monkeypatch, cluster, parallel=True)
    assert alone.solution.stats["bounding_solves"] == solves
    assert beside.solution.stats["bounding_solves"] == solves
    assert beside.configs == alone.configs
    for key in ("cost", "lower_bound", "status"):
        assert getattr(beside.solution, key) == getattr(alone.solution, key)
    assert beside.meta["step_seconds"] == alone.meta["step_seconds"]


def test_the_lift_shares_what_the_problem_shares():
    built = api.build_problem("gpt2", 8, "calibrated", cluster="h100-sxm", model_options=GPT2)
    problem = built.problem
    slack = calibrated_search.sync_slack(built.graph, built.cost_model, problem)
    lifted = calibrated_search._lifted(problem, slack, 0.5)
    for v, (a, d) in enumerate(zip(problem.vertex_costs, slack)):
        assert (lifted.vertex_costs[v] == a + 0.5 * d).all()
    pairs = {(id(a), id(d)) for a, d in zip(problem.vertex_costs, slack)}
    assert len({id(a) for a in lifted.vertex_costs}) == len(pairs) < problem.num_vertices

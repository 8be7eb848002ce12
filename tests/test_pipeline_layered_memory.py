"""The pipeline search's per-edge tails hold memory only where an edge has one.

A Problem shares one edge matrix among identical layers (GPT-3 175B at p = 1,024: 1,445
edges, 62 MB a matrix). The search kept a zero tail matrix per edge beside them, a copy
each: the whole-plan search of that run was killed at 23 GB of memory before its first
Problem was built. Only a tied matrix's edge has a tail (its sync, once a step)."""
from __future__ import annotations

import numpy as np

from pase import api
from pase.costing import tied_connections
from pase.pipeline.layered import build
from pase.pipeline.stage_model import stage_cost_model
from pase.space import ConfigSpace


def _layered(model: str, **options):
    graph = api.load_graph(model, batch=4, layers=2, **options)
    space = ConfigSpace(graph, 4, powers_of_two=True)
    costs = {"cluster": "h100-sxm", "zero": "auto", "recompute": "auto"}
    cost_model = stage_cost_model(costs, 2, "calibrated", apart=True)
    return graph, space, cost_model, build(graph, space, cost_model, 2)


def test_only_the_tied_edge_has_a_tail_and_it_is_the_sync_the_full_price_adds():
    graph, space, cost_model, lay = _layered("gpt2")  # wte's matrix is the head's
    (owner, _, user, _), = tied_connections(graph)
    kept = [e for e, tail in zip(lay.problem.edges, lay.edge_once) if tail is not None]
    assert kept == [(owner, user)]
    # the tail is what pricing the sync on the edge (once_share 1) adds, on every edge
    cost_model.once_share = 1.0
    full = cost_model.problem(graph, space)
    for edge, a, b, tail in zip(lay.problem.edges, full.edge_costs, lay.problem.edge_costs,
                                lay.edge_once):
        np.testing.assert_array_equal(a - b, 0.0 if tail is None else tail, err_msg=str(edge))
    assert lay.edge_once[lay.problem.edges.index((owner, user))].max() > 0


def test_a_model_without_tied_matrices_keeps_no_tail_matrix():
    _, _, _, lay = _layered("llama2-7b")
    assert lay.edge_once is None

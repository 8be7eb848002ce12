"""A plan priced on a space holding only its configs charges what the whole space charges it.

`pase evaluate --strategy` of a pipeline plan, and the pipeline search's final price, price
each stage with :func:`pase.cost_models.calibrated_pipeline.one_plan_problem`: a Problem
whose ops have one candidate each. Its vertex costs, memory and edge matrices must equal
the whole space's Problem's entries at the plan's choice, or a plan's price would depend
on which other candidates the space held."""
from __future__ import annotations

import numpy as np
import pytest

from pase import api
from pase.cost_models.calibrated_pipeline import one_plan_problem
from pase.errors import StrategyError
from pase.perf import make_layout
from pase.perf.plan import layout_configs, layout_variants
from pase.pipeline.stage_model import stage_cost_model
from pase.space import PADDED_ROLES, ConfigSpace

CASES = [  # (model, options, devices, layout): dense with a padded vocabulary, and MoE
    ("gpt2", {"layers": 1, "batch": 4}, 8, ("tp=2,dp=4", dict(zero=3, recompute="full"))),
    ("mixtral-8x7b", {"layers": 1, "batch": 8}, 8, ("dp=8,ep=4", dict(zero=1))),
]


@pytest.mark.parametrize("model, options, devices, layout", CASES, ids=[c[0] for c in CASES])
def test_each_entry_is_the_whole_space_entry_at_the_plan(model, options, devices, layout):
    graph = api.load_graph(model, **options)
    degrees, knobs = layout
    dp = int(degrees.split("dp=")[1].split(",")[0])
    lay = make_layout(degrees, devices=devices, micro_batch=options["batch"] // dp,
                      global_batch=options["batch"], **knobs)
    configs, variants = layout_configs(graph, lay, padded_roles=PADDED_ROLES), \
        layout_variants(graph, lay)
    costs = {"cluster": "h100-sxm", "zero": "auto", "recompute": "auto", "microbatches": 1}
    cost_model = stage_cost_model(costs, 1, "calibrated")
    whole = api.build_problem(graph, devices, cost_model, variants=variants)
    c = api.choice_of(whole, configs)
    assert any(k > 0 for k in c), "the plan must not be every op's first candidate"

    _, one, zeros = one_plan_problem(graph, devices, cost_model, configs, variants)
    assert all(v.size == 1 for v in one.vertex_costs) and not zeros.any()
    for v in range(len(graph.ops)):
        assert one.vertex_costs[v][0] == whole.problem.vertex_costs[v][c[v]]
        assert one.memory[v][0] == whole.problem.memory[v][c[v]]
    assert one.edges == whole.problem.edges
    for (u, v), mat, full in zip(one.edges, one.edge_costs, whole.problem.edge_costs):
        assert mat.shape == (1, 1) and mat[0, 0] == full[c[u], c[v]]


def test_a_config_outside_the_space_is_refused_by_name():
    graph = api.load_graph("gpt2", layers=1, batch=4)
    cost_model = stage_cost_model({"cluster": "h100-sxm", "microbatches": 1}, 1, "calibrated")
    op = graph.ops[0].name
    dim = graph.ops[0].dim_names[0]
    with pytest.raises(StrategyError, match=f"{op}"):
        one_plan_problem(graph, 8, cost_model, {op: {dim: 3}}, {})


def test_a_restricted_space_keeps_shared_rows_shared():
    graph = api.load_graph("gpt2", layers=2, batch=4)
    space = ConfigSpace(graph, 4)
    one = space.restricted([len(c) - 1 for c in space.configs])
    assert one.sizes == [1] * len(graph.ops)
    for i, c in enumerate(space.configs):
        assert np.array_equal(one.configs[i][0], c[-1]) and not one.configs[i].flags.writeable
    # the two layers' identical ops share their configs array, so their one row too
    shared = [(i, j) for i in range(len(graph.ops)) for j in range(i)
              if space.configs[i] is space.configs[j]]
    assert shared and all(one.configs[i] is one.configs[j] for i, j in shared)

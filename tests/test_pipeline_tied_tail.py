"""A pipeline stage's tied-matrix tail (pase.pipeline.layered.build) is the tied edge's
once-a-step sync: the edge priced by a model that charges that sync in full less the edge
priced without it, on one cluster and on a mixed one (whose prefixes price their own pairs)."""
import numpy as np
import pytest

from pase import api
from pase.pipeline.layered import build
from pase.pipeline.stage_model import stage_cost_model
from pase.space import ConfigSpace


@pytest.mark.parametrize("cluster, devices", [("h100-sxm", 8), ("dgx-a100x2+dgx1-v100x2", 32)])
def test_tied_tail_is_the_sync_alone(cluster, devices):
    graph = api.load_graph("gpt2", layers=1, batch=8)
    stage = stage_cost_model({"cluster": cluster}, 4, "calibrated", apart=True)
    space = ConfigSpace(graph, devices, padded_roles=stage.padded_roles)
    lay = build(graph, space, stage, 4)
    # a plain calibrated model charges the whole sync (m = 1), and none at share 0
    whole = stage_cost_model({"cluster": cluster}, 1, "calibrated").problem(graph, space)
    plain = stage_cost_model({"cluster": cluster}, 1, "calibrated")
    plain.once_share = 0.0
    none = plain.problem(graph, space)
    tied = [e for e, o in enumerate(lay.edge_once) if o is not None]
    assert [lay.problem.edges[e] for e in tied] == [(0, len(graph.ops) - 2)]  # wte, lm_head
    for e in tied:
        sync = whole.edge_costs[e] - none.edge_costs[e]
        assert sync.max() > 0
        np.testing.assert_allclose(lay.edge_once[e], sync, rtol=1e-12, atol=0)
        np.testing.assert_allclose(lay.problem.edge_costs[e], none.edge_costs[e], rtol=1e-12)

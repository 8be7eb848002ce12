"""Build once: identical ops and edges share their cost arrays, and the Problem is the
same, bit for bit, as one built op by op and edge by edge."""
import numpy as np
import pytest

from pase.builder import GraphBuilder
from pase.cost_models.alpha_beta import AlphaBetaCostModel
from pase.cost_models.paper import PaperCostModel
from pase.costing import op_signature, problem_shape
from pase.registry import MODELS
from pase.space import ConfigSpace, enumerate_configs
from pase.work.tiles import overlap_elements, port_factors


class OpByOp(PaperCostModel):
    """The paper model as it was built before sharing: every vertex and edge priced on
    its own, each edge matrix by the full (K_u, K_v, rank) broadcast."""

    def vertex_key(self, op, configs):
        return None

    def edge_key(self, *args):
        return None

    def edge_costs(self, producer, output, src_configs, consumer, input, dst_configs):
        src = port_factors(producer, output, src_configs)
        dst = port_factors(consumer, input, dst_configs)
        return self.r * 2.0 * overlap_elements(output.shape, src[:, None, :], dst[None, :, :])


CASES = [("alexnet", 64, {}), ("inception_v3", 16, {}), ("resnet101", 16, {}),
         ("rnnlm", 64, {}), ("transformer", 64, {}), ("gpt2", 64, {"layers": 2}),
         ("llama2-7b", 16, {"layers": 2}), ("mixtral-8x7b", 16, {"layers": 1})]


def _same_bits(a, b):
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


@pytest.mark.parametrize("model, devices, options", CASES)
def test_shared_problem_equals_the_op_by_op_one_bit_for_bit(model, devices, options):
    graph = MODELS.get(model)(**options)
    space = ConfigSpace(graph, devices)
    shared = PaperCostModel().problem(graph, space)
    alone = OpByOp().problem(graph, space)
    assert shared.names == alone.names and shared.edges == alone.edges
    for a, b in zip(shared.vertex_costs, alone.vertex_costs):
        assert _same_bits(a, b)
    for a, b in zip(shared.edge_costs, alone.edge_costs):
        assert _same_bits(a, b)
    # Configs shared between ops are the ones each op enumerates on its own.
    for op, configs in zip(graph.ops, space.configs):
        assert np.array_equal(configs, enumerate_configs(op, devices, space.cutoff))


class AlphaBetaOpByOp(AlphaBetaCostModel):
    def vertex_key(self, op, configs):
        return None


# mlp and chain: the first layer reads a graph input (no gradient to send back), the
# others the same shapes from a producer; sharing must tell them apart.
@pytest.mark.parametrize("model, devices, options", [("transformer", 16, {}), ("gpt2", 16, {"layers": 2}),
                                                     ("mixtral-8x7b", 8, {"layers": 1}),
                                                     ("mlp", 8, {}), ("chain", 4, {})])
def test_alpha_beta_shares_vertices_bit_for_bit(model, devices, options):
    graph = MODELS.get(model)(**options)
    space = ConfigSpace(graph, devices)
    shared = AlphaBetaCostModel().problem(graph, space)
    alone = AlphaBetaOpByOp().problem(graph, space)
    assert len({id(v) for v in shared.vertex_costs}) < len(graph.ops)  # something is shared
    for a, b in zip(shared.vertex_costs, alone.vertex_costs):
        assert _same_bits(a, b)
    for a, b in zip(shared.memory, alone.memory):
        assert _same_bits(a, b)


def test_alpha_beta_reduce_scatter_tells_apart_ops_with_one_and_two_readers():
    # "one" and "two" are the same layer on the same input; "one"'s output has two
    # readers (its all-reduce stays in the layer), "two"'s one (moved to the edge).
    b = GraphBuilder("fork")
    x = b.input((64, 64), names=("b", "k"), roles=("batch", "channel"))
    p = b.fc(x, 64, name="p")
    one, two = b.fc(p, 64, name="one"), b.fc(p, 64, name="two")
    j = b.elementwise(b.fc(one, 64, name="l1"), b.fc(one, 64, name="l2"), name="j")
    b.elementwise(j, b.fc(two, 64, name="r"), name="end")
    graph = b.build()
    space = ConfigSpace(graph, 8)
    shared = AlphaBetaCostModel(reduce_scatter=True).problem(graph, space)
    alone = AlphaBetaOpByOp(reduce_scatter=True).problem(graph, space)
    i, k = graph.index("one"), graph.index("two")
    assert not np.array_equal(alone.vertex_costs[i], alone.vertex_costs[k])
    for a, b in zip(shared.vertex_costs, alone.vertex_costs):
        assert _same_bits(a, b)


def test_repeated_layers_are_priced_once():
    graph = MODELS.get("transformer")()
    space = ConfigSpace(graph, 64)
    problem = PaperCostModel().problem(graph, space)
    # 12 identical layers (6 encoder, 6 decoder): far fewer distinct arrays than ops/edges.
    assert len({id(v) for v in problem.vertex_costs}) < len(graph.ops) / 4
    assert len({id(m) for m in problem.edge_costs}) < len(problem.edges) / 8
    shared = [a for a in problem.vertex_costs + problem.edge_costs
              if sum(x is a for x in problem.vertex_costs + problem.edge_costs) > 1]
    assert shared and all(not a.flags.writeable for a in shared)
    shape = problem_shape(graph, space, cost_model=PaperCostModel())
    held = {id(a): a.nbytes for a in problem.vertex_costs + problem.edge_costs}
    assert shape.array_bytes == sum(held.values())


def test_building_a_deeper_model_adds_no_new_arrays():
    sizes = {}
    for layers in (2, 8):
        graph = MODELS.get("gpt2")(layers=layers)
        problem = PaperCostModel().problem(graph, ConfigSpace(graph, 16))
        sizes[layers] = len({id(a) for a in problem.vertex_costs + problem.edge_costs})
    assert sizes[8] == sizes[2]


def test_the_signature_ignores_names_and_producers_only():
    graph = MODELS.get("gpt2")(layers=2)
    by_sig = {}
    for op in graph.ops:
        by_sig.setdefault(op_signature(op), []).append(op)
    for ops in by_sig.values():
        a = ops[0]
        for b in ops[1:]:  # equal signature: equal but for names and producers
            assert (a.kind, a.dims, a.attrs, a.pinned) == (b.kind, b.dims, b.attrs, b.pinned)
            assert [(p.shape, p.dims) for p in a.inputs] == [(p.shape, p.dims) for p in b.inputs]
    assert len(by_sig) < len(graph.ops)

"""The alpha-beta cost model against closed forms computed by hand."""
import math

import pytest

from pase.api import run_solver
from pase.cluster import get_cluster
from pase.cost_models.alpha_beta import AlphaBetaCostModel
from pase.errors import OptionError, UnknownNameError
from pase.registry import COST_MODELS, MODELS
from pase.solvers import dp
from pase.space import ConfigSpace
from pase.work import op_work


def build(model, devices, cluster="dgx-a100", **options):
    graph = MODELS.get(model)() if isinstance(model, str) else model
    space = ConfigSpace(graph, devices)
    cm = AlphaBetaCostModel(cluster, **options)
    return graph, space, cm, cm.problem(graph, space)


def test_registered_in_seconds():
    assert COST_MODELS.get("alpha-beta") is AlphaBetaCostModel
    assert AlphaBetaCostModel.unit == "s"


def test_one_device_is_the_sum_of_compute_times():
    graph, space, cm, problem = build("alexnet", 1, "gtx1080ti", efficiency=0.4)
    assert all(len(c) == 1 for c in space.configs)
    flop = sum(op_work(op, space.configs[i]).flop[0] for i, op in enumerate(graph.ops))
    assert problem.evaluate([0] * len(graph.ops)) == pytest.approx(flop / (11.3e12 * 0.4), rel=1e-12)


def mlp_data_parallel(devices, cluster):
    graph, space, cm, problem = build("mlp", devices, cluster)
    sol = run_solver("data-parallel", problem)
    assert all(space.config(i, c).get("b", 1) == devices for i, c in enumerate(sol.choice))
    return cm, sol.cost


def mlp_compute(devices):
    # mlp(): batch 64, three FC 1024 -> 1024 with pw 1, a classifier 1024 -> 10, the loss.
    # Three products each (forward, both gradients) at 2 FLOP per multiply-add; the
    # point-wise op is 1 FLOP per element, forward and twice backward.
    m = 64 / devices
    fc = 3 * (2 * m * 1024 * 1024 + m * 1024)
    classifier = 3 * 2 * m * 10 * 1024
    loss = 4 * m * 10 + 2 * m
    return 3 * fc + classifier + loss


WEIGHT_BYTES = [1024 * 1024 * 4] * 3 + [1024 * 10 * 4]
# All-reduced like the weight gradients: the loss mean, one fp32 scalar over the batch split.
SYNCED_BYTES = WEIGHT_BYTES + [4]


def all_reduce(n, ring_hops, tree_hops, bw):
    """NCCL's all-reduce at bus bandwidth ``bw`` (pase.perf.comms with the raw link figures):
    the ring ``2(q-1)/q n/bw`` plus its hops, or the tree ``2n/bw`` plus ``2 log2 q`` hops,
    whichever is faster; ``*_hops`` are each algorithm's summed hop latencies."""
    q_part, ring_lat = ring_hops
    return min(2 * q_part * n / bw + ring_lat, 2 * n / bw + tree_hops)


def test_data_parallel_mlp_on_one_node_by_hand():
    cm, cost = mlp_data_parallel(8, "dgx-a100")
    a, bw = 3e-6, 300e9  # NVLink on dgx-a100: 3 us, 300 GB/s
    compute = mlp_compute(8) / (312e12 * 0.5)
    # 8 ranks: the ring's 14 hops, or the tree's 2 log2(8) = 6
    synced = sum(all_reduce(n, (7 / 8, 14 * a), 6 * a, bw) for n in SYNCED_BYTES)
    assert cost == pytest.approx(compute + synced, rel=1e-12)


def test_two_node_all_reduce_runs_at_eight_nics():
    cm8, cost8 = mlp_data_parallel(8, "dgx-a100")
    cm16, cost16 = mlp_data_parallel(16, "dgx-a100")
    assert cm16.for_devices(16).cluster.nodes == 2
    a_i, a_e = 3e-6, 5e-6
    # 16 = 2 nodes x 8: the bus bandwidth is the 8 NICs' 8 x 25 GB/s (under NVLink's 300);
    # the ring pays 7 hops inside and 1 across per round, the tree 2 log2(16) across.
    one = sum(all_reduce(n, (7 / 8, 14 * a_i), 6 * a_i, 300e9) for n in SYNCED_BYTES)
    two = sum(all_reduce(n, (15 / 16, 2 * (7 * a_i + a_e)), 8 * a_e, 200e9) for n in SYNCED_BYTES)
    synced8 = cost8 - mlp_compute(8) / (312e12 * 0.5)
    synced16 = cost16 - mlp_compute(16) / (312e12 * 0.5)
    assert synced8 == pytest.approx(one, rel=1e-9)
    assert synced16 == pytest.approx(two, rel=1e-9)
    assert synced16 > synced8


def test_memory_vectors_of_an_fc_layer_by_hand():
    graph, space, cm, problem = build("mlp", 4, "dgx-a100")
    fc1 = graph.index("fc1")  # dims (b, n, k): 64 x 1024 x 1024
    for j, row in enumerate(space.configs[fc1]):
        b, n, k = (int(f) for f in row)
        weights = 1024 * 1024 / (n * k) * 4
        out = 64 * 1024 / (b * n) * 4
        assert problem.memory[fc1][j] == 4 * weights + out  # weights, grads, 2 Adam moments
    assert problem.memory_cap is None


def test_dp_agrees_with_exhaustive_on_the_diamond():
    _, _, _, problem = build("diamond", 4, "dgx-a100")
    best = dp.solve(problem)
    brute = run_solver("exhaustive", problem)
    assert best.cost == pytest.approx(brute.cost, rel=1e-12)


def test_dp_solves_the_paper_graphs_and_beats_data_parallel():
    for model in ("alexnet", "rnnlm"):
        _, _, _, problem = build(model, 8, "gtx1080ti")
        assert dp.solve(problem).cost <= run_solver("data-parallel", problem).cost


def test_cluster_grows_to_the_device_count():
    cm = AlphaBetaCostModel("dgx-a100")
    assert cm.for_devices(16).cluster.name == "dgx-a100x2"
    assert cm.for_devices(8).cluster.name == "dgx-a100"
    with pytest.raises(OptionError, match="16 requested"):
        build("mlp", 16, get_cluster("dgx-a100"))


def test_building_a_problem_leaves_the_model_unchanged():
    cm = AlphaBetaCostModel("dgx-a100")
    cluster, before = cm.cluster, dict(vars(cm))
    graph = MODELS.get("mlp")()
    cm.problem(graph, ConfigSpace(graph, 16))  # needs 2 nodes of dgx-a100
    assert cm.cluster is cluster and cm.cluster.nodes == 1
    assert vars(cm) == before
    # A fixed cluster that is too small is refused, and the model is still unchanged.
    small = AlphaBetaCostModel(get_cluster("dgx-a100"))
    with pytest.raises(OptionError, match="16 requested"):
        small.problem(graph, ConfigSpace(graph, 16))
    assert small.cluster == get_cluster("dgx-a100")


def test_edges_price_bytes_on_the_slowest_link():
    graph = MODELS.get("chain")(length=2, batch=128, width=64)
    graph, space, cm, _ = build(graph, 16, "dgx-a100", bytes_per_element=2)
    cm = cm.for_devices(16)  # 2 nodes of 8: mesh axes x0 (the node) x1 x2 x3
    fc1, fc2 = graph.ops  # fc1 writes (128, 128); fc2 reads it
    m = cm.edge_costs(fc1, fc1.outputs[0], space.configs[0], fc2, fc2.inputs[0], space.configs[1])
    src16, src8 = space.index_of("fc1", {"b": 16}), space.index_of("fc1", {"b": 8})
    inter, intra = cm.cluster.inter, cm.cluster.intra

    def cost(elements, link):  # one direction
        return link.latency_s + elements * 2 / link.bytes_per_second

    # b=16 -> n=16: forward, each device needs all 128 x 128 and holds 8 x 128 rows
    # (an all-gather over every axis, x0 included: inter-node); backward the replicated
    # gradient is only sliced.
    assert m[src16, space.index_of("fc2", {"n": 16})] == pytest.approx(cost(128 * 128 - 8 * 128, inter))
    # b=16 (x0 x1 x2 x3) -> b=8 (x0 x1 x2: batch splits take the first axes, replicated over
    # x3): a device holds 8 rows and needs the 16 of its pair, which contain them: the other
    # 8 rows from the device differing only in x3 (its own node); backward a slice.
    assert m[src16, space.index_of("fc2", {"b": 8})] == pytest.approx(cost(8 * 128, intra))
    # b=8 (x0 x1 x2) -> n=8 (x1 x2 x3, model splits take the last axes): an all-gather over
    # the data-parallel group, which spans the two nodes (x0); nothing back.
    assert m[src8, space.index_of("fc2", {"n": 8})] == pytest.approx(cost(128 * 128 - 16 * 128, inter))
    assert m[src8, space.index_of("fc2", {"b": 8})] == 0.0
    # n=8 -> b=8: the producer's output is split by columns (x1 x2 x3, replicated over x0),
    # the consumer wants rows (x0 x1 x2): each device holds a 128 x 16 column block and
    # needs a 16 x 128 row block, sharing 16 x 16. Forward every column block is on its own
    # node (the replicas over x0); backward the rows of the other half (x0) are only on the
    # other node.
    n8 = space.index_of("fc1", {"n": 8})
    assert m[n8, space.index_of("fc2", {"b": 8})] == pytest.approx(
        cost(16 * 128 - 16 * 16, intra) + cost(16 * 128 - 16 * 16, inter))


def test_a_tied_table_is_an_edge_priced_like_a_re_layout():
    """GPT-2's LM head reads the embedding's table: an edge of the Problem between the
    two (the paper model has none). Vocabulary-split 8 ways to unsplit, each device
    gathers 7/8 of the 64 x 32 table forward (4 bytes each, inside one node) and
    slices it backward; both unsplit move nothing."""
    opts = dict(MODELS.entry("gpt2").info["tiny"], layers=1)
    graph = MODELS.get("gpt2")(**opts)
    space = ConfigSpace(graph, 8)
    cm = AlphaBetaCostModel("dgx-a100")
    problem = cm.problem(graph, space)
    wte, head = graph.index("wte"), graph.index("lm_head")
    assert (wte, head) in problem.edges
    assert (wte, head) not in COST_MODELS.get("paper")().problem(graph, space).edges
    bound = cm.for_devices(8)
    m = bound.edge_costs(graph.ops[wte], graph.ops[wte].weights[1], space.configs[wte],
                         graph.ops[head], graph.ops[head].weights[0], space.configs[head])
    link = bound.cluster.intra
    whole, split = space.index_of("wte", {}), space.index_of("wte", {"c": 8})
    assert m[split, space.index_of("lm_head", {})] == pytest.approx(
        link.latency_s + 64 * 32 * 7 / 8 * 4 / link.bytes_per_second)
    assert m[whole, space.index_of("lm_head", {})] == 0.0


def test_bad_options_name_the_allowed_values():
    with pytest.raises(OptionError, match="efficiency"):
        AlphaBetaCostModel(efficiency=1.5)
    with pytest.raises(OptionError, match="adam"):
        AlphaBetaCostModel(optimizer="lamb")
    with pytest.raises(UnknownNameError, match="presets"):
        AlphaBetaCostModel("tpu-v9")


def _two_layer_mlp():
    from pase.builder import GraphBuilder

    b = GraphBuilder("mlp2")
    x = b.input((1024, 1024), names=("b", "k"), roles=("batch", "channel"))
    b.fc(b.fc(x, 1024, name="fc1"), 1536, name="fc2")
    return b.build()


@pytest.mark.parametrize("first, second, group", [
    ({"k": 8}, {"b": 8}, 8),    # fc1's output all-reduce over 8, then sliced by rows
    ({"n": 8}, {"n": 8}, 8),    # fc2's input-gradient all-reduce, then sliced by fc1's columns
    ({"k": 2}, {"b": 8}, 2),    # fc1's group is x2; fc2's rows use x0 x1 x2, x2 included
    ({"k": 8}, {"n": 8}, 0),    # fc2 needs the whole output: the all-reduce stays
    ({"k": 8}, {"b": 2}, 0),    # fc2's rows use x2 only, the group is x0 x1 x2: stays
    ({"b": 8}, {"b": 8}, 0),    # no in-layer all-reduce at all
])
def test_reduce_scatter_prices_a_sliced_all_reduce_as_one(first, second, group):
    graph = _two_layer_mlp()
    space = ConfigSpace(graph, 8)
    choice = [space.index_of("fc1", first), space.index_of("fc2", second)]
    plain = AlphaBetaCostModel("dgx-a100").problem(graph, space).evaluate(choice)
    cm = AlphaBetaCostModel("dgx-a100", reduce_scatter=True)
    cost = cm.problem(graph, space).evaluate(choice)
    intra = cm.for_devices(8).cluster.intra
    n = 1024 * 1024 * 4  # the 4 MiB activation (or its gradient), one group inside a node
    # the all-reduce (ring or tree, the faster) less the reduce-scatter (q-1)/q n/B + (q-1) a,
    # by hand; nothing when there is no group
    q = max(group, 1)
    a, bw = intra.latency_s, intra.bytes_per_second
    ar = all_reduce(n, ((q - 1) / q, 2 * (q - 1) * a), 2 * math.ceil(math.log2(q)) * a, bw)
    saved = ar - ((q - 1) / q * n / bw + (q - 1) * a) if q > 1 else 0.0
    assert plain - cost == pytest.approx(saved, rel=1e-9, abs=1e-15)


def test_reduce_scatter_keeps_the_all_reduce_of_an_output_read_twice():
    from pase.builder import GraphBuilder

    b = GraphBuilder("fork")
    x = b.input((64, 64), names=("b", "k"), roles=("batch", "channel"))
    h = b.fc(x, 64, name="fc1")
    b.elementwise(b.fc(h, 64, name="left"), b.fc(h, 64, name="right"), name="join")
    graph = b.build()
    space = ConfigSpace(graph, 8)
    choice = [0] * len(graph.ops)
    choice[graph.index("fc1")] = space.index_of("fc1", {"k": 8})
    for name in ("left", "right"):
        choice[graph.index(name)] = space.index_of(name, {"b": 8})
    plain = AlphaBetaCostModel("dgx-a100").problem(graph, space).evaluate(choice)
    assert AlphaBetaCostModel("dgx-a100", reduce_scatter=True).problem(graph, space).evaluate(choice) \
        == pytest.approx(plain, rel=1e-12)


def test_reduce_scatter_option_from_the_command_line(capsys):
    from pase.cli import main

    assert main(["solve", "mlp", "-p", "8", "--cost-model", "alpha-beta",
                 "--cost-option", "reduce_scatter=true", "--format", "json"]) == 0
    with pytest.raises(OptionError, match="reduce_scatter"):
        AlphaBetaCostModel(reduce_scatter="maybe")

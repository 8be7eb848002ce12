"""pase.work: per-op FLOP, collectives, memory and the device mapping, by hand."""
import numpy as np
import pytest

from pase.builder import GraphBuilder
from pase.cluster import get_cluster
from pase.cost_models.paper import PaperCostModel
from pase.errors import GraphError, OptionError
from pase.ir import Dim, Op
from pase.perf.comms import collective_phases, collective_seconds
from pase.perf.hardware import IDEAL
from pase.registry import MODELS
from pase.work import (
    device_coords,
    group_members,
    group_topology,
    mesh_order,
    op_work,
    overlap_elements,
    port_blocks,
)


def fc_op(batch=64, k=512, n=1024):
    """The second of two FC layers (its input is made by an op, so it gets a gradient)."""
    b = GraphBuilder("two")
    x = b.fc(b.input((batch, 16), names=("b", "k")), k, name="fc0")
    b.fc(x, n, name="fc")
    return b.build().ops[1]  # dims (b, n, k)


@pytest.mark.parametrize("model", ["alexnet", "rnnlm", "transformer", "inception_v3"])
def test_flop_on_one_device_are_the_paper_compute_in_standard_units(model):
    """The paper counts a multiply-add as one FLOP, pase.work as two: each of a GEMM's
    three products (forward, both gradients) adds its ``m n k`` again, 3 x matmul / 2
    in all; bias, point-wise tails and the other ops are the paper's counts. An
    Embedding is the exception: the paper prices its one-hot product, pase.work a
    gather (no FLOP, memory traffic)."""
    paper = PaperCostModel()
    for op in MODELS.get(model)().ops:
        one = np.ones((1, len(op.dims)), dtype=np.int64)
        w = op_work(op, one)
        if op.kind == "Embedding":
            assert paper.layer_costs(op, one)[0] > 0 and w.flop[0] == 0 and w.traffic[0] > 0
            continue
        assert w.traffic[0] == 0, op.name
        expected = paper.layer_costs(op, one)[0] + 3 * w.matmul_flop[0] / 2
        assert w.flop[0] == pytest.approx(expected, rel=1e-12), op.name
        assert w.backward_flop[0] == pytest.approx(2 * w.forward_flop[0])
        assert (w.matmul_flop[0] > 0) == (op.kind in ("Conv", "FC", "Einsum", "LSTM"))


def test_gemm_flop_by_hand():
    """2 FLOP per multiply-add forward, twice that backward; pw and bias 1 per element."""
    b = GraphBuilder("fc")
    x = b.fc(b.input((8, 16), names=("b", "k")), 32, name="fc0")
    b.fc(x, 64, name="fc", pw=2, bias=True)
    op = b.build().op("fc")  # b=8, n=64, k=32
    w = op_work(op, np.array([[2, 4, 1]]))  # per device m'=4, n'=16, k'=32
    assert w.matmul_flop[0] == 2 * 4 * 16 * 32
    assert w.forward_flop[0] == 2 * 4 * 16 * 32 + 2 * 4 * 16 + 4 * 16  # + pw=2 + bias
    assert w.backward_flop[0] == 4 * 4 * 16 * 32 + 2 * 2 * 4 * 16 + 2 * 4 * 16


def test_lstm_flop_by_hand():
    """The paper's GEMM per layer (m = s b, n = 4e, k = 2e) at 2 FLOP per multiply-add,
    plus its 3 point-wise ops per gate element."""
    op = MODELS.get("rnnlm")().ops[1]
    assert op.kind == "LSTM"
    size = dict(zip(op.dim_names, op.shape))
    layers, s, bt, e = size["l"], size["s"], size["b"], size["n"]
    w = op_work(op, np.ones((1, len(op.dims)), dtype=np.int64))
    assert w.matmul_flop[0] == 2 * layers * (s * bt) * (4 * e) * (2 * e)
    assert w.forward_flop[0] == (2 * layers * (s * bt) * (4 * e) * (2 * e)
                                 + 3 * layers * (s * bt) * (4 * e))
    assert w.backward_flop[0] == 2 * w.forward_flop[0]


def test_moe_flop_by_hand():
    """GShard's k-sparse einsums: ``b l k e`` multiply-adds, 2 FLOP each; dispatch has one
    gradient (the tokens'), combine two (expert outputs and gates)."""
    b = GraphBuilder("moe", cutoff=1)
    x = b.fc(b.input((2, 8, 4), names=("b", "l", "k")), 4, name="x")
    gates = b.top_k(b.fc(x, 4, name="router"), k=2, axis=2, name="gates")
    buf = b.moe_dispatch(x, gates, capacity=4, k=2, name="dispatch")
    b.moe_combine(buf, gates, k=2, name="combine")
    g = b.build()
    dispatch, combine = g.op("dispatch"), g.op("combine")
    # b l k e = 2*8*2*4 = 128 multiply-adds; dispatch config x=2, l=2: 128/4 per device.
    w = op_work(dispatch, np.array([[2, 1, 1, 1, 2]]))
    assert (w.matmul_flop[0], w.forward_flop[0], w.backward_flop[0]) == (2 * 32, 2 * 32, 2 * 32)
    # combine config x=4: 128/4 per device.
    w = op_work(combine, np.array([[1, 1, 1, 4, 1]]))
    assert (w.matmul_flop[0], w.forward_flop[0], w.backward_flop[0]) == (2 * 32, 2 * 32, 4 * 32)


def test_fc_collectives_by_hand():
    op = fc_op()
    w = op_work(op, np.array([[2, 2, 2]]))  # b, n, k each split 2
    by = {(c.phase, c.label): c for c in w.collectives}
    out = by[("forward", "output")]
    assert out.nbytes[0] == 32 * 512 * 4 and out.dims == (op.dim_index("k"),)
    da = by[("backward", "dA")]
    assert da.nbytes[0] == 32 * 256 * 4 and da.dims == (op.dim_index("n"),)
    dw = by[("gradient", "dB (weights)")]
    assert dw.nbytes[0] == 256 * 512 * 4 and dw.dims == (op.dim_index("b"),)
    assert w.forward_flop[0] == 2 * 32 * 512 * 256  # 2 FLOP per multiply-add
    assert all(w.group_size(c)[0] == 2 for c in w.collectives)


def test_fc_memory_by_hand():
    op = fc_op()
    w = op_work(op, np.array([[1, 4, 2], [8, 1, 1]]), bytes_per_element=4, optimizer="adam")
    # (b=1, n=4, k=2): weight tile 256 x 256 fp32, x4 for weights+grads+2 moments;
    # output tile 64 x 256.
    assert w.parameter_bytes[0] == 256 * 256 * 4
    assert w.state_bytes[0] == 4 * 256 * 256 * 4
    assert w.activation_bytes[0] == 64 * 256 * 4
    assert w.memory[1] == 4 * 512 * 1024 * 4 + 8 * 1024 * 4
    sgd = op_work(op, np.array([[1, 1, 1]]), optimizer="sgd")
    assert sgd.state_bytes[0] == 2 * 512 * 1024 * 4


def test_embedding_ids_are_not_parameters_and_get_no_gradient():
    op = MODELS.get("rnnlm")().ops[0]
    w = op_work(op, np.ones((1, len(op.dims)), dtype=np.int64))
    assert w.parameter_bytes[0] == 100_000 * 2048 * 4
    # the table's gradient is summed over a and b (the batch-like dims), one dim at a time
    names = op.dim_names
    assert [(c.label, [names[d] for d in c.dims]) for c in w.collectives] == [
        ("output", ["c"]), ("dB (weights)", ["a"]), ("dB (weights)", ["b"])]


def test_an_all_reduce_over_two_split_dims_is_two_all_reduces_in_turn():
    """XLA reduces a partial sum one sharded dim at a time: a weight gradient summed over
    b (2 ways) and l (2 ways) moves 2 x 2(2-1)/2 = 2 tiles per device, not 2(4-1)/4."""
    from pase.builder import GraphBuilder
    from pase.work import collective_bytes

    g = GraphBuilder("fc")
    g.fc(g.input((4, 8, 16), ("b", "l", "k")), 32, name="fc")
    op = g.build().op("fc")
    cfg = np.array([[2 if n in ("b", "l") else 1 for n in op.dim_names]], dtype=np.int64)
    w = op_work(op, cfg)
    tile = 16 * 32 * 4
    moved = sum(collective_bytes(c.kind, float(c.nbytes[0]), int(w.group_size(c)[0]))
                for c in w.collectives if c.label == "dB (weights)")
    assert moved == 2 * tile


def test_unknown_kind_and_bad_options():
    op = Op("x", "Mystery", (Dim("a", 4),))
    with pytest.raises(GraphError, match="Mystery.*known kinds"):
        op_work(op, np.ones((1, 1), dtype=np.int64))
    with pytest.raises(OptionError, match="adam"):
        op_work(fc_op(), np.ones((1, 3), dtype=np.int64), optimizer="lamb")


def test_mesh_puts_batch_dims_outermost():
    op = fc_op()  # dims b (batch), n, k
    assert mesh_order(op) == (0, 1, 2)
    coords = device_coords(op, [2, 4, 1])
    assert coords.tolist()[:5] == [[0, 0, 0], [0, 1, 0], [0, 2, 0], [0, 3, 0], [1, 0, 0]]
    # model-parallel groups are consecutive ranks, data-parallel ones strided
    assert [g.tolist() for g in group_members(op, [2, 4, 1], [1])] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert [g.tolist() for g in group_members(op, [2, 4, 1], [0])] == [[0, 4], [1, 5], [2, 6], [3, 7]]
    op2 = Op("x", "Elementwise", (Dim("c", 8, "channel"), Dim("b", 8, "batch")))
    assert mesh_order(op2) == (1, 0)


def test_group_topology_across_nodes():
    op = fc_op()
    cfg = np.array([[2, 8, 1], [1, 8, 1], [16, 1, 1]])
    cluster = get_cluster("dgx-a100x2")  # 8 devices per node
    nodes, local = group_topology(op, cfg, [0], cluster)   # over b
    assert nodes.tolist() == [2, 1, 2] and local.tolist() == [1, 1, 8]
    nodes, local = group_topology(op, cfg, [1], cluster)   # over n
    assert nodes.tolist() == [1, 1, 1] and local.tolist() == [8, 8, 1]


def test_collective_formulas():
    """The alpha-beta teaching model's collectives: pase.perf.comms at the raw link figures
    (IDEAL), by hand. Across N nodes with L ranks on each the bus bandwidth is L NICs',
    capped by the intra link; a ring pays L-1 intra hops and N-1 inter hops per round."""
    cl = get_cluster("dgx-a100x2")  # 8 per node, 300 GB/s 3 us inside, 25 GB/s 5 us across
    a_i, b_i = 3e-6, 300e9
    a_e, b_e = 5e-6, 25e9

    def t(kind, n, q, nodes):
        return collective_seconds(kind, n, q, nodes, cl, IDEAL)
    n = 1e8
    assert t("all-reduce", n, 8, 1) == pytest.approx(2 * 7 / 8 * n / b_i + 14 * a_i)
    assert t("all-reduce", n, 4, 4) == pytest.approx(2 * 3 / 4 * n / b_e + 6 * a_e)
    # 8 NICs per node carry the 16-rank ring: 200 GB/s, under the 300 GB/s of NVLink
    assert t("all-reduce", n, 16, 2) == pytest.approx(2 * 15 / 16 * n / 200e9 + 2 * (7 * a_i + a_e))
    assert t("all-gather", n, 4, 1) == pytest.approx(3 / 4 * n / b_i + 3 * a_i)
    assert t("reduce-scatter", n, 2, 2) == pytest.approx(n / 2 / b_e + a_e)
    assert t("exchange", n, 8, 2) == pytest.approx(a_e + n / (4 * b_e))  # 4 NICs a node
    assert t("exchange", n, 4, 1) == pytest.approx(a_i + n / b_i)
    assert t("exchange", n, 1, 1) == 0.0
    assert t("all-reduce", n, 1, 1) == 0.0
    # a small buffer takes the tree: 2 n / B plus 2 log2(16) hops across nodes
    assert t("all-reduce", 1e3, 16, 2) == pytest.approx(2e3 / 200e9 + 8 * a_e)
    with pytest.raises(OptionError, match="all-reduce"):
        collective_seconds("broadcast", n, 2, 1, cl, IDEAL)


def test_collective_phases_take_the_collectives_seconds():
    """The simulator's phases: the hops by link class, the bandwidth term on the link
    that bounds it (16 ranks on 2 nodes: the NICs), as the bytes it moves meanwhile."""
    cl = get_cluster("dgx-a100x2")
    n = 1e8
    intra, inter = collective_phases("all-reduce", n, 16, 2, cl, IDEAL)
    assert (intra.link, intra.steps, intra.volume) == ("intra", 14.0, 0.0)
    assert (inter.link, inter.steps) == ("inter", 2.0)
    assert inter.volume == pytest.approx(2 * 15 / 16 * n / 200e9 * 25e9)
    inside = collective_phases("all-gather", n, 8, 1, cl, IDEAL)
    assert inside[0].steps == 7.0 and inside[0].volume == pytest.approx(7 / 8 * n)
    assert inside[1].steps == 0.0 and inside[1].volume == 0.0


def test_overlap_rule_and_ravel_blocks():
    assert overlap_elements((8, 8), np.array([2, 1]), np.array([2, 1])) == 0
    assert overlap_elements((8, 8), np.array([2, 1]), np.array([1, 2])) == 32 - 16
    assert overlap_elements((8, 8), np.array([1, 1]), np.array([2, 2])) == 16  # more devices: no credit
    b = GraphBuilder("r")
    b.reshape(b.input((4, 6), names=("b", "c")), (24,), names=("f",))
    ravel = b.build().ops[0]
    blocks = port_blocks(ravel, ravel.outputs[0], [4, 2])
    assert blocks[:, 0].tolist() == list(range(8))

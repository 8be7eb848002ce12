"""The paper cost model against costs computed by hand (arithmetic in the comments)."""
import numpy as np
import pytest

from pase.builder import GraphBuilder
from pase.cost_models.paper import PaperCostModel, flop_per_word
from pase.errors import GraphError, OptionError
from pase.ir import Dim, Op
from pase.registry import MODELS

MODEL = PaperCostModel()


def cost(op, config, model=MODEL):
    return model.layer_costs(op, np.array([config]))[0]


def test_flop_per_word():
    assert flop_per_word(10, 16) == 5000.0          # 10e12 FLOP/s / (16e9 B/s / 8 B)
    assert flop_per_word(20, 8) == 20000.0


def test_r_scales_communication_only():
    g = MODELS.get("resnet101")()
    op = g.ops[242]  # ReduceMean: communication only
    slow = PaperCostModel(tflops=20, bandwidth=8)
    assert cost(op, (1, 2, 2, 2), slow) == 4 * cost(op, (1, 2, 2, 2))


def test_lstm_cell_relayout_by_hand():
    g = MODELS.get("rnnlm")()
    lstm = g.ops[1]  # domain (l=2, s=256, b=128, n=2048, k=2048)
    # config l=1, s=1, b=2, n=1, k=2. GEMM: batch l/cl = 2; m = s*b = 32768 over cm = 2
    # -> 16384; n = 4e = 8192 over 1; k = 2e = 4096 over 2 -> 2048.
    # compute = 3*16384*8192*2048 + 3*3*16384*8192 = 825841680384
    # comm = allreduce(16384*8192, 2) = 5000*67108864*2 = 671088640000
    #      + allreduce(16384*2048, 1) = 0 + allreduce(8192*2048, 2) = 5000*8388608*2 = 83886080000
    # GEMM total = 2 * (825841680384 + 671088640000 + 83886080000) = 3161632800768
    # Re-layout: cell output tile (128/2, 2048/1) on 2 devices, input tile (64, 1024) on 4:
    # more devices -> no overlap credit; words = 64*1024 = 65536; cost = 2*256*5000*65536
    # = 167772160000. Total 3329404960768.
    assert cost(lstm, (1, 1, 2, 1, 2)) == 3329404960768


def test_edge_with_partial_overlap_by_hand():
    b = GraphBuilder("two", cutoff=1)
    x = b.fc(b.input((8, 4), names=("b", "k")), 4, name="fc1")
    b.fc(x, 4, name="fc2")
    g = b.build()
    p, c = g.ops
    # Tensor (8, 4): producer split (b=2, n=1) -> tiles (4, 4); consumer split (b=1, k=2)
    # -> tiles (8, 2). Both use 2 devices, so the overlap min(4,8)*min(4,2) = 8 counts:
    # words = 2 * (16 - 8) = 16; cost = 5000 * 16 = 80000.
    m = MODEL.edge_costs(p, p.outputs[0], np.array([[2, 1, 1]]), c, c.inputs[0], np.array([[1, 1, 2]]))
    assert m[0, 0] == 80000.0
    # Same split on both sides: nothing moves.
    m = MODEL.edge_costs(p, p.outputs[0], np.array([[2, 1, 1]]), c, c.inputs[0], np.array([[2, 1, 1]]))
    assert m[0, 0] == 0.0


def test_small_conv_by_hand():
    b = GraphBuilder("c")
    op_out = b.conv(b.input((8, 4, 6, 6)), (16, 4, 3, 3), pw=1, name="conv")
    op = b.build().ops[0]
    assert op_out.shape == (8, 16, 4, 4)
    # cfg b=2, n=2, c=2: m = 8*4*4 = 128 / 2 = 64; n = 16/2 = 8; k = 4*3*3 = 36 / 2 = 18
    # compute = 3*64*8*18 + 3*1*64*8 = 27648 + 1536 = 29184
    # comm = allreduce(64*8, 2) + allreduce(64*18, 2) + allreduce(8*18, 2)
    #      = 5000*(256 + 576 + 72)*2 = 9040000
    assert cost(op, (2, 2, 1, 1, 1, 1, 2)) == 29184 + 9040000


def test_layout_ops_are_free_and_elementwise_counts_pointwise_ops():
    b = GraphBuilder("e")
    x = b.fc(b.input((8, 4), names=("b", "k")), 4)
    y = b.fc(x, 4)
    b.concat([x, y], axis=1)
    b.elementwise(x, y, pw=2)
    g = b.build()
    concat, elementwise = g.ops[2], g.ops[3]
    assert cost(concat, (2, 1)) == 0.0
    assert cost(elementwise, (2, 2)) == 3 * (8 / 2) * (4 / 2)


def test_unknown_kind_and_bad_parameters():
    op = Op("mystery", "Gelu", (Dim("b", 4),))
    with pytest.raises(GraphError, match="no formula for op 'mystery' of kind 'Gelu'; known kinds: "):
        cost(op, (1,))
    for bad in (0, -1, float("nan"), float("inf"), "fast"):
        with pytest.raises(OptionError, match="tflops must be a positive number"):
            PaperCostModel(tflops=bad)


def test_einsum_by_hand_whatever_the_operand_order():
    b = GraphBuilder("e", cutoff=1)
    x = b.fc(b.input((8, 4), names=("b", "k")), 4, name="fc")
    w = b.input((4, 16), names=("k", "n"))
    b.einsum("bk,kn->bn", x, w, pw=2, name="mm")
    b.einsum("kn,bk->bn", w, x, pw=2, name="nm")  # same product, operands swapped
    g = b.build()
    # dims (b, n, k) = (8, 16, 4), config (2, 1, 2): m' = 4, n' = 16, k' = 2.
    # compute = 3*4*16*2 + 3*2*4*16 = 768; all-reduces: m'n' = 64 words over k (2 devices)
    # = 5000*32*2 = 320000, m'k' over n (1 device) = 0, n'k' = 32 over m (2) = 160000.
    assert cost(g.op("mm"), (2, 1, 2)) == 768 + 320000 + 160000
    assert g.op("nm").dim_names == ("b", "n", "k")
    assert cost(g.op("nm"), (2, 1, 2)) == 768 + 320000 + 160000


def test_absent_pw_is_zero():
    # pw is read through the op schema: absent means the schema's default, 0.
    b = GraphBuilder("e")
    x = b.fc(b.input((8, 4), names=("b", "k")), 4, name="fc")
    b.elementwise(x, x, name="add")
    op = b.build().op("add")
    bare = Op(op.name, op.kind, op.dims, op.inputs, op.outputs)
    assert cost(bare, (1, 1)) == cost(op, (1, 1)) == 8 * 4


# -- the zoo's kinds and attributes (r = 5000 FLOP per word at the defaults) ---------------

def _op(build):
    b = GraphBuilder("t", cutoff=1)
    build(b)
    return b.build().ops[-1]


def test_bias_by_hand():
    op = _op(lambda b: b.einsum("ble,ef->blf", b.fc(b.input((4, 2, 8), names=("b", "l", "k")), 8),
                                b.input((8, 6), names=("e", "f")), bias="f", name="proj"))
    # dims (b=4, l=2, f=6, e=8), config b=2, f=3: tiles m = 2*2 = 4, n = 2, k = 8.
    # GEMM: compute 3*4*2*8 = 192; allreduce(m*k=32, cn=3) = 5000*32/3*2*2 = 213333.33;
    # allreduce(n*k=16, cm=2) = 5000*16/2*2*1 = 80000.
    # bias: 3 * output tile (2*2*2 = 8) = 24; its gradient tile (2) all-reduced over b, l
    # splits (2): 5000*2/2*2 = 10000.
    assert cost(op, (2, 1, 3, 1)) == pytest.approx(192 + 640000 / 3 + 80000 + 24 + 10000)


def test_rmsnorm_causal_softmax_and_topk_by_hand():
    rms = _op(lambda b: b.norm(b.fc(b.input((4, 8), names=("b", "k")), 8), weights=1, rms=True))
    # dims (b=4, n=8), axis 1, config (2, 2): tile (2, 4), elems 8.
    # 12*8 + 2*allreduce(rows 2, q 2) + 2*allreduce(tile[axis] 4, others 2)
    # = 96 + 2*5000*2/2*2 + 2*5000*4/2*2 = 96 + 20000 + 40000
    assert cost(rms, (2, 2)) == 60096
    soft = _op(lambda b: b.softmax(b.fc(b.input((2, 4, 8), names=("b", "l", "k")), 4),
                                   axis=2, causal=True))
    # dims (b=2, l=4, m=4), config (1, 2, 1): tile (2, 2, 4), elems 16, rows 4, full 4:
    # 4*16 + 16*4 + (q = 1: no all-reduces) + 16 for the mask = 144
    assert cost(soft, (1, 2, 1)) == 144
    top = _op(lambda b: b.top_k(b.fc(b.input((4, 8), names=("b", "k")), 8), k=2, axis=1))
    # config (2, 1): elems 16: k * (3*16 + allreduce(rows, 1) = 0) = 96
    assert cost(top, (2, 1)) == 96


def test_moe_dispatch_and_combine_by_hand():
    b = GraphBuilder("moe", cutoff=1)
    x = b.fc(b.input((2, 8, 4), names=("b", "l", "k")), 4, name="x")
    gates = b.top_k(b.fc(x, 4, name="router"), k=2, axis=2, name="gates")
    buf = b.moe_dispatch(x, gates, capacity=4, k=2, name="dispatch")
    b.moe_combine(buf, gates, k=2, name="combine")
    g = b.build()
    dispatch, combine = g.op("dispatch"), g.op("combine")
    # b l k e = 2*8*2*4 = 128 multiply-adds in all. Dispatch dims (x=4, b=2, c=4, e=4, l=8),
    # config x=2, l=2: 128/4 = 32 per device; 2*32 = 64; buffers tile (2*2*4*4 = 64)
    # all-reduced over l (2): 5000*64/2*2 = 320000; token tile (2*4*4 = 32) over x*c (2):
    # 5000*32/2*2 = 160000.
    assert cost(dispatch, (2, 1, 1, 1, 2)) == 64 + 320000 + 160000
    # Combine dims (b=2, l=8, e=4, x=4, c=4), config x=4: 128/4 = 32: 3*32 = 96; output tile
    # (2*8*4 = 64) over x*c (4): 5000*64/4*2*3 = 480000; experts over l (1) and gates over e
    # (1): 0.
    assert cost(combine, (1, 1, 1, 4, 1)) == 96 + 480000


def test_parameter_operands_sync_their_gradients():
    add = _op(lambda b: b.elementwise(b.fc(b.input((4, 2, 8), names=("b", "l", "k")), 8),
                                      weights=[(2, 8)]))
    # dims (b=4, l=2, n=8) with a weight (2, 8) on (l, n); config b=2: elems 4*2*8/2 = 32,
    # weight tile 16 all-reduced over b (2): 5000*16/2*2 = 80000.
    assert cost(add, (2, 1, 1)) == 32 + 80000
    cls = _op(lambda b: b.concat([b.fc(b.input((4, 3, 8), names=("b", "l", "k")), 8)], axis=1,
                                 weights=[(1, 1, 8)]))
    # a class token (1, 1, 8) concatenated: free, but its gradient (8) is all-reduced over
    # b (4): 5000*8/4*2*3 = 60000.
    assert cost(cls, (4, 1, 1)) == 60000


def test_the_paper_graphs_have_none_of_the_new_attributes():
    """The paper's results stay exact: its five graphs use none of the zoo's additions."""
    new = {"bias", "act", "tied", "fn", "rms", "causal"}
    for name in ("alexnet", "resnet101", "inception_v3", "rnnlm", "transformer"):
        for op in MODELS.get(name)().ops:
            assert not new & set(op.attrs) and not (op.weights and op.kind in
                                                    ("Elementwise", "Norm", "BatchNorm", "Concat"))

"""The one placement (pase.work.layout) and its re-distribution bytes (pase.work.relayout).

Expected values are worked out by hand in the comments, or by an enumeration over
devices written here from the mesh's definition (not from pase's own block code).
"""
from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest

from pase.builder import GraphBuilder
from pase.cluster import Cluster, Device, Link
from pase.costing import connection_ports
from pase.errors import OptionError
from pase.registry import MODELS
from pase.sim import tasks
from pase.space import ConfigSpace
from pase.work import collective_bytes, edge_bytes, op_work
from pase.work.layout import (
    assign_axes,
    device_coords,
    mesh_axes,
    mesh_order,
    port_blocks,
)
from pase.work.relayout import relayout_matrix

MiB = 2**20


def two_layer_mlp(batch=1024, width=1024, hidden=1024, out=1536):
    b = GraphBuilder("mlp2")
    x = b.input((batch, width), names=("b", "k"), roles=("batch", "channel"))
    b.fc(b.fc(x, hidden, name="fc1"), out, name="fc2")
    return b.build()


def per_device_total(graph, configs, p, bpe=4):
    """Bytes one device moves in a step: every in-layer collective (group sizes from
    the configs) plus both directions of every edge."""
    total = 0.0
    for op in graph.ops:
        cfg = np.array([[configs.get(op.name, {}).get(n, 1) for n in op.dim_names]])
        work = op_work(op, cfg, bpe)
        for c in work.collectives:
            total += float(c.rounds[0]) * collective_bytes(c.kind, c.nbytes[0], work.group_size(c)[0])
    for conn in graph.connections:
        pu, pv = graph.ops[graph.index(conn.src)], graph.ops[graph.index(conn.dst)]
        fwd, bwd = edge_bytes(pu, pu.outputs[conn.src_output], configs.get(pu.name, {}),
                              pv, pv.inputs[conn.dst_input], configs.get(pv.name, {}), p, bpe)
        total += fwd + bwd
    return total


# -- the two-layer MLP -----------------------------------------------------------

def test_mlp_n_then_n_moves_10_5_mib():
    # h = 1024 x 1024 fp32 = 4 MiB. Forward: fc2 needs all of h, holds 1/8: 3.5 MiB
    # (an all-gather). Backward: fc2's input gradient is all-reduced over its 8 n-devices
    # (2 x 7/8 x 4 = 7 MiB, in-layer) and fc1 only slices it: 0. Total 10.5 MiB
    # (the old rule charged the edge twice: 14.0).
    g = two_layer_mlp()
    fc1, fc2 = g.ops
    assert edge_bytes(fc1, fc1.outputs[0], {"n": 8}, fc2, fc2.inputs[0], {"n": 8}, 8) == (3.5 * MiB, 0.0)
    assert per_device_total(g, {"fc1": {"n": 8}, "fc2": {"n": 8}}, 8) == pytest.approx(10.5 * MiB)


def test_mlp_k_then_b_moves_21_mib():
    # fc1 split k: its output is all-reduced (7 MiB) and replicated; fc2 split b only
    # slices it forward (0). Backward fc2's input gradient is split by rows and fc1 needs
    # all of it: 7/8 x 4 = 3.5 MiB. fc2's weight gradient (1024 x 1536 = 6 MiB) is
    # all-reduced over the 8 batch devices: 10.5 MiB. Total 21.0 (the old rule: 18.5).
    g = two_layer_mlp()
    fc1, fc2 = g.ops
    assert edge_bytes(fc1, fc1.outputs[0], {"k": 8}, fc2, fc2.inputs[0], {"b": 8}, 8) == (0.0, 3.5 * MiB)
    assert per_device_total(g, {"fc1": {"k": 8}, "fc2": {"b": 8}}, 8) == pytest.approx(21.0 * MiB)


# -- hand cases -----------------------------------------------------------------------------

def chain_ops(batch=64, width=64):
    g = two_layer_mlp(batch, width, width, width)
    return g.ops[0], g.ops[1]


@pytest.mark.parametrize("src", [{}, {"k": 8}, {"k": 2}])
@pytest.mark.parametrize("dst", [{"b": 8}, {"n": 4, "k": 2}, {"k": 8}, {"b": 2}, {}])
def test_a_replicated_source_is_only_sliced(src, dst):
    # An output never split, or reduced over k (all-reduced in the layer), is whole on
    # every device: any consumer tile is a local slice, forward.
    fc1, fc2 = chain_ops()
    fwd, _ = edge_bytes(fc1, fc1.outputs[0], src, fc2, fc2.inputs[0], dst, 8)
    assert fwd == 0.0


def test_all_gather_all_to_all_and_permute_volumes():
    fc1, fc2 = chain_ops()  # the activation is 64 x 64 = 4096 elements, 16 KiB in fp32
    n = 64 * 64 * 4
    out, inp = fc1.outputs[0], fc2.inputs[0]
    # columns over 8 -> replicated: all-gather, (q-1)/q of the gathered result; back: slice.
    assert edge_bytes(fc1, out, {"n": 8}, fc2, inp, {}, 8) == (collective_bytes("all-gather", n, 8), 0.0)
    # columns over 8 -> rows over 8 (same mesh axes): all-to-all on an 8th of the tensor.
    a2a = collective_bytes("all-to-all", n / 8, 8)
    assert edge_bytes(fc1, out, {"n": 8}, fc2, inp, {"b": 8}, 8) == (a2a, a2a)
    # rows over x0 (fc1: b=2, k=2 takes the first axis x0 for the batch, the last, x2, for
    # k; output reduced over k) -> rows over x0 (fc2: b=2, batch on the first axis too):
    # a batch split keeps its rows on the devices its neighbour uses, nothing moves.
    assert edge_bytes(fc1, out, {"b": 2, "k": 2}, fc2, inp, {"b": 2}, 8) == (0.0, 0.0)


def test_batch_splits_on_fewer_devices_nest():
    fc1, fc2 = chain_ops()
    out, inp = fc1.outputs[0], fc2.inputs[0]
    n = 64 * 64 * 4
    # Batch splits take the first mesh axes: b=2 x0, b=4 (x0, x1), b=8 (x0, x1, x2), so
    # each tile lies inside the coarser one (replicas over the last axes, where model
    # splits go: Megatron-LM's tensor groups inside a node, data parallelism across).
    # b=4 -> b=2: a device holds quarter 2 x0 + x1 and needs half x0, which contains
    # it: the other quarter forward; backward the half gradient is only sliced.
    assert edge_bytes(fc1, out, {"b": 4}, fc2, inp, {"b": 2}, 8) == (n / 4, 0.0)
    # b=2 -> b=4: the quarter is a slice of the half; backward, the other quarter.
    assert edge_bytes(fc1, out, {"b": 2}, fc2, inp, {"b": 4}, 8) == (0.0, n / 4)
    # b=8 -> b=4: one more eighth forward, a slice backward.
    assert edge_bytes(fc1, out, {"b": 8}, fc2, inp, {"b": 4}, 8) == (n / 8, 0.0)
    assert edge_bytes(fc1, out, {"b": 2}, fc2, inp, {"b": 2}, 8) == (0.0, 0.0)


def test_p12_places_three_way_splits_on_the_last_axis():
    fc1, fc2 = chain_ops(batch=96, width=96)
    axes = mesh_axes(12)
    assert axes == (("x0", 2), ("x1", 2), ("x2", 3))
    assert assign_axes(fc1, {"b": 3}, axes) == {"b": ("x2",)}
    assert assign_axes(fc1, {"b": 6}, axes) == {"b": ("x0", "x2")}  # batch from the front
    assert assign_axes(fc1, {"b": 2, "n": 6}, axes) == {"b": ("x0",), "n": ("x1", "x2")}
    n = 96 * 96 * 4
    out, inp = fc1.outputs[0], fc2.inputs[0]
    # rows over 3 (x2) -> rows over 6 (x0 x2): x2 is not a prefix of (x0, x2): the device
    # (x0, x2) = (0, 1) holds rows 32..63 and needs rows 16..31; backward it holds rows
    # 16..31 and needs 32..63.
    assert edge_bytes(fc1, out, {"b": 3}, fc2, inp, {"b": 6}, 12) == (n / 6, n / 3)
    # rows over 2 (x0) -> rows over 6 (x0 x2) is nested: the 6th (3 x0 + x2) lies inside
    # half x0.
    assert edge_bytes(fc1, out, {"b": 2}, fc2, inp, {"b": 6}, 12) == (0.0, n / 2 - n / 6)
    assert edge_bytes(fc1, out, {"b": 12}, fc2, inp, {"b": 6}, 12) == (n / 6, n / 12)


def test_off_mesh_configs_run_on_the_first_ranks():
    fc1, fc2 = chain_ops(batch=24, width=64)
    out, inp = fc1.outputs[0], fc2.inputs[0]
    n = 24 * 64 * 4
    coords = device_coords(fc1, [3, 1, 1], 8)  # 3 does not divide 8: ranks 0..2, the rest idle
    assert coords[:, 0].tolist() == [0, 1, 2, -1, -1, -1, -1, -1]
    # into an op on every device: device 7 holds nothing and needs its whole tile.
    assert edge_bytes(fc1, out, {"b": 3}, fc2, inp, {}, 8) == (n, 0.0)
    # b=3 -> b=3: the same ranks hold the same rows.
    assert edge_bytes(fc1, out, {"b": 3}, fc2, inp, {"b": 3}, 8) == (0.0, 0.0)
    # replicated -> b=3: ranks 0..2 slice; back, device 7 needs all and holds nothing.
    assert edge_bytes(fc1, out, {}, fc2, inp, {"b": 3}, 8) == (0.0, n)


def test_bad_configs_are_one_line_errors():
    fc1, fc2 = chain_ops()
    with pytest.raises(OptionError, match="'fc1'.*16 devices, more than p=8"):
        edge_bytes(fc1, fc1.outputs[0], {"b": 16}, fc2, fc2.inputs[0], {}, 8)
    with pytest.raises(OptionError, match="no dim 'q'"):
        edge_bytes(fc1, fc1.outputs[0], {"q": 2}, fc2, fc2.inputs[0], {}, 8)
    with pytest.raises(OptionError, match="unknown collective kind"):
        collective_bytes("broadcast", 1, 2)


def test_collective_bytes_convention():
    assert collective_bytes("all-reduce", 800, 8) == 1400
    assert collective_bytes("all-gather", 800, 8) == 700
    assert collective_bytes("reduce-scatter", 800, 8) == 700
    assert collective_bytes("all-to-all", 800, 4) == 600
    assert collective_bytes("collective-permute", 800, 2) == 800
    assert collective_bytes("exchange", 800, 4) == 800
    assert collective_bytes("all-reduce", 800, 1) == 0


# -- brute force over devices --------------------------------------------------------------

def _blocks_by_definition(op, port, config, p):
    """Per device, its block along each port axis, from the mesh's definition: device
    ids row-major over prime axes, the op's axes from assign_axes (or ranks 0..P-1 in
    mesh order when P does not divide p); None for idle devices."""
    cfg = dict(zip(op.dim_names, (int(f) for f in config)))
    axes = mesh_axes(p)
    sizes = [s for _, s in axes]
    P = math.prod(cfg.values())
    out = []
    if p % P == 0:
        assigned = assign_axes(op, cfg, axes)
        for ids in itertools.product(*[range(s) for s in sizes]):
            at = dict(zip([a for a, _ in axes], ids))
            row = []
            for dims in op.port_axes(port):
                blk = 0
                for d in dims:
                    for a in assigned.get(op.dim_names[d], ()):
                        blk = blk * sizes[[x for x, _ in axes].index(a)] + at[a]
                row.append(blk)
            out.append(row)
        return out
    order = mesh_order(op)
    factors = [cfg[op.dim_names[d]] for d in order]
    for r in range(p):
        if r >= P:
            out.append(None)
            continue
        coord, rest = {}, r
        for d, f in zip(reversed(order), reversed(factors)):
            coord[d], rest = rest % f, rest // f
        row = []
        for dims in op.port_axes(port):
            blk = 0
            for d in dims:
                blk = blk * cfg[op.dim_names[d]] + coord[d]
            row.append(blk)
        out.append(row)
    return out


def _brute(shape, src_blocks, src_f, dst_blocks, dst_f):
    """Most elements one device lacks (exact fractions)."""
    worst = Fraction(0)
    for s, d in zip(src_blocks, dst_blocks):
        if d is None:
            continue
        need = math.prod(Fraction(t, f) for t, f in zip(shape, dst_f))
        have = Fraction(0)
        if s is not None:
            have = Fraction(1)
            for t, fs, fd, bs, bd in zip(shape, src_f, dst_f, s, d):
                ts, td = Fraction(t, fs), Fraction(t, fd)
                have *= max(Fraction(0), min((bs + 1) * ts, (bd + 1) * td) - max(bs * ts, bd * td))
        worst = max(worst, need - have)
    return worst


def _factors(op, port, config):
    return [math.prod(int(config[d]) for d in dims) for dims in op.port_axes(port)]


def _graphs():
    b = GraphBuilder("mixed")
    x = b.input((24, 8, 36), names=("b", "l", "k"), roles=("batch", "sequence", "channel"))
    h = b.fc(x, 48, name="fc")
    h = b.elementwise(h, name="act")
    r = b.reshape(h, (24, 8 * 48), names=("b", "f"))
    b.fc(r, 12, name="out")
    gpt2 = MODELS.get("gpt2")(**dict(MODELS.entry("gpt2").info["tiny"], layers=1))  # a tied table
    return [b.build(), MODELS.get("chain")(length=3, batch=48, width=24), two_layer_mlp(48, 36, 24, 12),
            gpt2]


@pytest.mark.parametrize("p", [8, 12, 16])
def test_closed_form_equals_enumeration_over_devices(p):
    rng = np.random.default_rng(p)
    checked = 0
    for g in _graphs():
        space = ConfigSpace(g, p, cutoff=1)
        for conn in g.connections:
            u, v = g.index(conn.src), g.index(conn.dst)
            pu, pv = g.ops[u], g.ops[v]
            out, inp = pu.outputs[conn.src_output], pv.inputs[conn.dst_input]
            fwd, bwd, _, _ = relayout_matrix(pu, out, space.configs[u], pv, inp, space.configs[v], p)
            for _ in range(25):
                i, j = rng.integers(space.sizes[u]), rng.integers(space.sizes[v])
                cu, cv = space.configs[u][i], space.configs[v][j]
                bu, bv = _blocks_by_definition(pu, out, cu, p), _blocks_by_definition(pv, inp, cv, p)
                fu, fv = _factors(pu, out, cu), _factors(pv, inp, cv)
                assert fwd[i, j] == pytest.approx(float(_brute(out.shape, bu, fu, bv, fv)), abs=1e-9), \
                    (pu.name, cu, pv.name, cv)
                assert bwd[i, j] == pytest.approx(float(_brute(out.shape, bv, fv, bu, fu)), abs=1e-9), \
                    (pu.name, cu, pv.name, cv)
                checked += 1
    assert checked == 25 * sum(len(g.connections) for g in _graphs())


@pytest.mark.parametrize("p", [8, 12])
def test_port_blocks_follow_the_mesh_definition(p):
    g = _graphs()[0]
    space = ConfigSpace(g, p, cutoff=1)
    rng = np.random.default_rng(1)
    for i, op in enumerate(g.ops):
        for k in rng.integers(space.sizes[i], size=10):
            cfg = space.configs[i][k]
            for port in op.inputs + op.outputs:
                expected = _blocks_by_definition(op, port, cfg, p)
                got = port_blocks(op, port, cfg, p).tolist()
                assert [row if e is not None else None for row, e in zip(got, expected)] == expected


# -- the simulator moves what the model prices -----------------------------------------------

@pytest.mark.parametrize("p", [8, 12])
def test_simulator_transfers_equal_edge_bytes(p):
    cluster = Cluster("lab", 4, 4, Device("toy", 1.0, 8.0), Link(10, 1), Link(1, 10))
    rng = np.random.default_rng(7 + p)
    for g in _graphs():
        space = ConfigSpace(g, p, cutoff=1)
        for _ in range(6):
            configs = [c[rng.integers(len(c))] for c in space.configs]
            for conn, forward, backward in tasks.connection_plans(g, configs, cluster, p):
                u, _, v, _ = conn
                pu, out, pv, inp = connection_ports(g, conn)
                fwd, bwd = edge_bytes(pu, out, configs[u], pv, inp, configs[v], p, 1)

                def most(sends):
                    got: dict[int, float] = {}
                    for (_, d), e in sends.items():
                        got[d] = got.get(d, 0.0) + e
                    return max(got.values(), default=0.0)

                assert most(forward[0]) == pytest.approx(fwd, abs=1e-9)
                assert most(backward[0]) == pytest.approx(bwd, abs=1e-9)


def test_reduce_scatters_names_the_sliced_all_reduces():
    from pase.work.relayout import reduce_scatters

    g = two_layer_mlp()
    fc1, fc2 = g.ops
    out, inp = fc1.outputs[0], fc2.inputs[0]
    # (k | b): fc1's output all-reduce over x0 x1 x2 is sliced by rows over x0 x1 x2.
    assert reduce_scatters(fc1, out, {"k": 8}, fc2, inp, {"b": 8}, 8) == (True, False)
    # (n | n): fc2's input gradient, all-reduced over its n devices, is sliced by fc1's columns.
    assert reduce_scatters(fc1, out, {"n": 8}, fc2, inp, {"n": 8}, 8) == (False, True)
    # (k | n): fc2 needs the whole output; (k=8 | b=2): sliced over x2 only.
    assert reduce_scatters(fc1, out, {"k": 8}, fc2, inp, {"n": 8}, 8) == (False, False)
    assert reduce_scatters(fc1, out, {"k": 8}, fc2, inp, {"b": 2}, 8) == (False, False)

"""Off-mesh re-layouts from per-axis tables equal the device-by-device count, bit for bit."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pase.builder import GraphBuilder
from pase.space import ConfigSpace
from pase.work.axis_blocks import rank_blocks, side_patterns
from pase.work.layout import active_devices, axis_sizes, port_blocks
from pase.work.offmesh import by_device, worst_received
from pase.work.relayout import placement_rows


def _placements(op, port, configs, p):
    """Blocks ``(K, p, rank)``, holding masks ``(K, p)`` and split factors of each config,
    device by device from pase.work.layout."""
    blocks = np.stack([port_blocks(op, port, c, p) for c in configs])
    held = np.zeros((len(configs), p), dtype=bool)
    for k, c in enumerate(configs):
        held[k, active_devices(op, c, p)] = True
    factors = np.array([[np.prod([c[d] for d in dims]) if dims else 1 for dims in op.port_axes(port)]
                        for c in configs], dtype=np.float64)
    return np.maximum(blocks, 0), held, factors


def _graph():
    # dims of 2, 3 and 5 so that splits straddle the prime mesh axes of p = 12, 24, 30
    b = GraphBuilder("straddle")
    x = b.input((60, 12, 30), names=("b", "l", "k"), roles=("batch", "sequence", "channel"))
    h = b.fc(x, 20, name="fc")
    h = b.elementwise(h, name="act")
    b.fc(h, 15, name="out")
    return b.build()


@pytest.mark.parametrize("p", [8, 12, 24, 30])
def test_placements_off_the_mesh_match_the_device_count(p):
    g = _graph()
    space = ConfigSpace(g, p, cutoff=1)
    checked = 0
    for conn in g.connections:
        u, v = g.index(conn.src), g.index(conn.dst)
        pu, pv = g.ops[u], g.ops[v]
        out, inp = pu.outputs[conn.src_output], pv.inputs[conn.dst_input]
        sb, sh, sf = _placements(pu, out, space.configs[u], p)
        db, dh, df = _placements(pv, inp, space.configs[v], p)
        for args in ((sb, sf, sh, db, df, dh), (db, df, dh, sb, sf, sh)):  # forward, backward
            want = by_device(out.shape, *args)
            got = worst_received(out.shape, *args)
            assert np.array_equal(got, want)
            checked += int((~args[2]).any(axis=1).sum() + (~args[5]).any(axis=1).sum())
    assert checked > 0  # some placements were off the mesh


@st.composite
def _rows(draw):
    rank = draw(st.integers(0, 4))
    n = draw(st.integers(1, 24))
    shape = [draw(st.sampled_from([1, 2, 3, 6, 7.5, 12, 30, 1e-200])) for _ in range(rank)]
    # A point per device and axis; blocks holding it make every overlap positive, so the
    # least product over devices is not the product of per-axis leasts (the joint case).
    points = np.array([[draw(st.integers(0, 59)) / 60 for _ in range(rank)] for _ in range(n)])
    aligned = draw(st.booleans())

    def side():
        k = draw(st.integers(1, 5))
        f = np.array([[draw(st.sampled_from([1, 2, 3, 4, 5])) for _ in range(rank)] for _ in range(k)],
                     dtype=np.float64).reshape(k, rank)
        if aligned:
            blocks = np.floor(points[None, :, :] * f[:, None, :]).astype(np.int64)
            held = np.ones((k, n), dtype=bool)
        else:
            blocks = np.array([[[draw(st.integers(0, int(f[i, a]) - 1)) for a in range(rank)]
                                for _ in range(n)] for i in range(k)], dtype=np.int64).reshape(k, n, rank)
            held = np.array([[draw(st.booleans()) for _ in range(n)] for _ in range(k)]).reshape(k, n)
        return blocks, f, held

    return shape, side(), side()


def test_two_varying_axes_take_the_least_product_not_the_product_of_leasts():
    # device 0 overlaps (2, 1) on the two axes, device 1 (1, 2): least product 2, not 1
    shape = [6.0, 6.0]
    sb = np.array([[[0, 1], [1, 0]]])  # source tiles of 3 (factor 2): [0, 3) or [3, 6)
    db = np.array([[[0, 1], [1, 0]]])  # destination tiles of 2 (factor 3): [0, 2), [2, 4)
    sf, df = np.array([[2.0, 2.0]]), np.array([[3.0, 3.0]])
    held = np.ones((1, 2), dtype=bool)
    want = by_device(shape, sb, sf, held, db, df, held)
    assert want[0, 0] == 4 - 2
    assert np.array_equal(worst_received(shape, sb, sf, held, db, df, held), want)


@settings(max_examples=200, deadline=None)
@given(_rows())
def test_any_blocks_match_the_device_count(case):
    shape, (sb, sf, sh), (db, df, dh) = case
    assert np.array_equal(worst_received(shape, sb, sf, sh, db, df, dh),
                          by_device(shape, sb, sf, sh, db, df, dh))


@pytest.mark.parametrize("p", [12, 30])
def test_rank_blocks_are_port_blocks_off_the_mesh(p):
    g = _graph()
    space = ConfigSpace(g, p, cutoff=1)
    for i, op in enumerate(g.ops):
        off = [c for c in space.configs[i] if p % int(np.prod(c))]
        assert off
        for port in op.inputs + op.outputs:
            blocks, held = rank_blocks(op, port, np.array(off), p)
            for k, c in enumerate(off):
                assert np.array_equal(blocks[k], port_blocks(op, port, c, p))
                assert np.array_equal(np.flatnonzero(held[k]), active_devices(op, c, p))


@pytest.mark.parametrize("p", [12, 16, 30])
def test_pattern_runs_hold_on_every_device(p):
    # grain: blocks constant on aligned runs; period: blocks repeat on the holders
    g = _graph()
    space = ConfigSpace(g, p, cutoff=1)
    L = len(axis_sizes(p))
    for i, op in enumerate(g.ops):
        for port in op.inputs + op.outputs:
            rows = placement_rows(op, port, space.configs[i], p)
            for receiving in (False, True):
                axes, held = side_patterns(op, port, space.configs[i], rows, p, p, receiving)
                for pat in axes:
                    for b, grain, period, length in zip(pat.blocks, *pat.runs()):
                        r = np.arange(length if receiving else p)
                        holders = r[b[r] >= 0]
                        assert np.array_equal(b[holders], b[holders - holders % grain])
                        assert np.array_equal(b[holders], b[holders % period])
                assert np.array_equal(held, np.where(rows[:, len(port.shape) * (L + 1)] > 0,
                                                     np.minimum(np.prod(space.configs[i], axis=1), p), p))

"""The migration rule of pase.replan: hand-computed bytes and seconds, and an element-by-element
brute force (sets of held elements per device) on small tensors."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from pase.api import load_graph
from pase.cluster import Cluster, Device, Link, compose, get_cluster
from pase.replan.migration import Setting, op_migration
from pase.work.layout import port_blocks

ADAM_COPIES = 3  # weights + two moments move; gradients are made again by the next step
BPE = 4.0
VALUE = BPE * ADAM_COPIES  # bytes per parameter element moved
A100 = get_cluster("dgx-a100")
INTRA_A, INTRA_B = 3e-6, 300e9  # dgx-a100 NVLink
INTER_A, INTER_B = 5e-6, 25e9   # dgx-a100 InfiniBand per GPU


@pytest.fixture(scope="module")
def fc1():
    op = load_graph("chain", length=2).ops[0]  # dims (b, n, k); weight (k=64, n=128)
    assert op.weights[0].shape == (64, 128) and op.dim_names == ("b", "n", "k")
    return op


def one(op, old, p_old, new, p_new, cluster=A100, survivors=None):
    s = Setting.make(p_old, p_new, get_cluster(cluster, p_new) if isinstance(cluster, str) else cluster,
                     survivors=survivors, bytes_per_element=BPE, copies=ADAM_COPIES)
    m = op_migration(op, np.array(old), op, np.array([new]), s)
    return float(m.seconds[0]), float(m.max_bytes[0]), float(m.total_bytes[0]), float(m.restored_bytes[0])


def test_grow_replicated_to_split(fc1):
    # 4 -> 8 devices, a replicated weight becomes split n=2. Ranks 0..3 hold the whole weight;
    # ranks 4..7 each need half of it (64 x 64 elements) from a neighbour on their node.
    seconds, most, total, restored = one(fc1, [1, 1, 1], 4, [1, 2, 1], 8)
    half = 64 * 64 * VALUE
    assert most == half and total == 4 * half and restored == 0
    assert seconds == pytest.approx(INTRA_A + half / INTRA_B, rel=1e-12)


def test_same_layout_moves_nothing(fc1):
    for cfg in ([1, 2, 1], [2, 1, 4], [4, 2, 1], [1, 1, 8]):
        assert one(fc1, cfg, 8, cfg, 8) == (0.0, 0.0, 0.0, 0.0)


def test_shrink_loses_blocks(fc1):
    # 8 -> 6, the weight split n=8 (device d holds columns 16d..16d+15) becomes replicated.
    # Each survivor has its 1/8, fetches 5/8 from survivors on its node, reads the 2/8 that
    # ranks 6 and 7 held from the checkpoint (over the inter-node link by default).
    seconds, most, total, restored = one(fc1, [1, 8, 1], 8, [1, 1, 1], 6)
    eighth = 64 * 16 * VALUE
    assert most == 7 * eighth and total == 6 * 7 * eighth and restored == 6 * 2 * eighth
    want = (INTRA_A + 5 * eighth / INTRA_B) + (INTER_A + 2 * eighth / INTER_B)
    assert seconds == pytest.approx(want, rel=1e-12)


TWO_PER_NODE = Cluster("two-per-node", 4, 2, Device("t", 100.0, 16.0), intra=Link(100.0, 2.0),
                       inter=Link(10.0, 7.0))


def test_new_ranks_fetch_across_nodes(fc1):
    # 4 -> 4 devices with only ranks 0, 1 (node 0) surviving; split n=2 kept. Ranks 2, 3 (node 1)
    # need columns block d % 2 = 0, 1, held only on node 0: inter-node.
    seconds, most, total, restored = one(fc1, [1, 2, 1], 4, [1, 2, 1], 4, TWO_PER_NODE, survivors=2)
    half = 64 * 64 * VALUE
    assert most == half and total == 2 * half and restored == 0
    assert seconds == pytest.approx(7e-6 + half / 10e9, rel=1e-12)


def test_split_rows_from_split_columns(fc1):
    # 4 -> 4, columns split n=2 (block d % 2) become rows split k=2 (block d % 2): each device
    # keeps the quarter its column block shares with its row block and fetches the other
    # quarter from the device on its node holding the other column block.
    seconds, most, total, _ = one(fc1, [1, 2, 1], 4, [1, 1, 2], 4, TWO_PER_NODE)
    quarter = 32 * 64 * VALUE
    assert most == quarter and total == 4 * quarter
    assert seconds == pytest.approx(2e-6 + quarter / 100e9, rel=1e-12)


def test_restart_reads_everything_from_the_checkpoint(fc1):
    seconds, most, total, restored = one(fc1, [1, 2, 1], 8, [1, 2, 1], 8, survivors=0)
    half = 64 * 64 * VALUE
    assert most == half and total == restored == 8 * half
    assert seconds == pytest.approx(INTER_A + half / INTER_B, rel=1e-12)


def test_op_without_parameters_moves_nothing():
    loss = load_graph("mlp").ops[-1]
    s = Setting.make(8, 4, A100, survivors=None, bytes_per_element=BPE, copies=ADAM_COPIES)
    m = op_migration(loss, np.array([8, 1]), loss, np.array([[4, 1], [1, 1]]), s)
    assert not m.seconds.any() and not m.total_bytes.any()


# -- brute force: sets of elements per device -------------------------------------------------

def tiles(op, port, config, p, placed=None):
    """Per device the set of (row, column) elements it holds (empty when idle); the op on
    ranks ``0 .. placed - 1`` (default all ``p``)."""
    placed = p if placed is None else placed
    blocks = np.full((p, len(port.shape)), -1)
    blocks[:placed] = port_blocks(op, port, config, placed)
    factors = [math.prod(config[d] for d in axis) for axis in op.port_axes(port)]
    ext = [s // f for s, f in zip(port.shape, factors)]
    out = []
    for row in blocks:
        if (row < 0).any():
            out.append(set())
            continue
        out.append(set(itertools.product(*[range(b * e, (b + 1) * e) for b, e in zip(row, ext)])))
    return out


def brute(op, old, p_old, new, p_new, cluster, survivors, placed=None):
    port = op.weights[0]
    held, need = tiles(op, port, old, p_old), tiles(op, port, new, p_new, placed)
    node = [cluster.node_of(d) for d in range(p_new)]
    alive = range(survivors)
    seconds = most = total = restored = 0.0
    for d in range(p_new):
        own = held[d] if d < survivors else set()
        counts = [0, 0, 0]
        for e in need[d] - own:
            holders = [s for s in alive if e in held[s]]
            counts[0 if any(node[s] == node[d] for s in holders) else 1 if holders else 2] += 1
        nbytes = [c * VALUE for c in counts]
        group = cluster.groups[int(cluster.group_of(d))] if cluster.groups else cluster
        links = (group.intra, group.inter, group.inter)
        t = sum(link.latency_s + b / link.bytes_per_second for b, link in zip(nbytes, links) if b)
        seconds, most = max(seconds, t), max(most, sum(nbytes))
        total += sum(nbytes)
        restored += nbytes[2]
    return seconds, most, total, restored


CASES = [  # (old config, p_old, new config, p_new, survivors); factors divide 64, 128
    ([2, 2, 1], 4, [1, 4, 1], 8, 4),
    ([1, 2, 2], 8, [2, 1, 2], 6, 6),
    ([1, 4, 2], 8, [1, 2, 1], 4, 4),
    ([1, 1, 4], 4, [1, 2, 1], 6, 2),  # on p = 6 (mesh 2 x 3) n takes the slow axis: block d // 3
    ([1, 2, 1], 6, [1, 2, 4], 8, 6),
    ([1, 8, 1], 8, [1, 1, 2], 8, 5),
    ([1, 2, 1], 3, [1, 4, 1], 8, 3),  # off the mesh before (2 does not divide 3)
]


@pytest.mark.parametrize("old, p_old, new, p_new, survivors", CASES)
def test_matches_brute_force(fc1, old, p_old, new, p_new, survivors):
    got = one(fc1, old, p_old, new, p_new, TWO_PER_NODE, survivors)
    want = brute(fc1, old, p_old, new, p_new, TWO_PER_NODE, survivors)
    assert got == pytest.approx(want, rel=1e-12, abs=0.0)


SLOW = Cluster("slow", 2, 2, Device("s", 100.0, 16.0), intra=Link(50.0, 3.0), inter=Link(5.0, 9.0))
FAST = Cluster("fast", 2, 2, Device("f", 200.0, 16.0), intra=Link(100.0, 2.0), inter=Link(10.0, 7.0))
MIXED = compose([SLOW, FAST])  # ordered fastest first: fast ranks 0..3, then slow 4..7


@pytest.mark.parametrize("old, p_old, new, survivors", [
    ([1, 2, 1], 4, [1, 2, 2], 4),   # 4 ways: on the fast prefix 0..3 only, ranks 4..7 idle
    ([1, 2, 1], 4, [1, 4, 2], 4),   # 8 ways: every rank, the slow ones receive over slow links
    ([1, 4, 1], 4, [1, 1, 2], 2),
])
def test_mixed_cluster_places_on_the_group_prefix(fc1, old, p_old, new, survivors):
    assert MIXED.prefixes(8) == (4,) and MIXED.groups[0].device.name == "f"
    placed = 4 if math.prod(new) <= 4 else 8
    got = one(fc1, old, p_old, new, 8, MIXED, survivors)
    assert got == pytest.approx(brute(fc1, old, p_old, new, 8, MIXED, survivors, placed), rel=1e-12)

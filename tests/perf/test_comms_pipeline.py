"""Collective times (NCCL's bus-bandwidth convention) and pipeline schedules (Narayanan et al.)."""
from __future__ import annotations

import pytest

from pase.cluster import get_cluster
from pase.perf.comms import collective_seconds
from pase.perf.hardware import A100
from pase.perf.layout import make_layout
from pase.perf.pipeline import chunk_sizes, in_flight, pipeline_seconds

DGX = get_cluster("dgx-a100-80gb", 64)
NVLINK = 300e9 * A100.nvlink
NIC = 25e9 * A100.network
HOP, NET_HOP = 3e-6, 5e-6


def test_all_reduce_inside_a_node_is_the_ring_at_nvlink_bus_bandwidth():
    S = 1e9
    ring = 2 * 7 / 8 * S / NVLINK + 2 * 7 * HOP
    assert collective_seconds("all-reduce", S, 8, 1, DGX, A100) == pytest.approx(ring)


def test_small_all_reduce_takes_the_tree():
    S = 1e3
    tree = 2 * S / NVLINK + 2 * 3 * HOP
    assert collective_seconds("all-reduce", S, 8, 1, DGX, A100) == pytest.approx(tree)


def test_across_nodes_every_nic_of_a_node_carries_the_group():
    S = 1e9  # 64 ranks on 8 nodes: the bus runs at 8 NICs; 8 ranks on 8 nodes at one
    full = 63 / 64 * S / min(8 * NIC, NVLINK) + (7 * HOP + 7 * NET_HOP)
    assert collective_seconds("all-gather", S, 64, 8, DGX, A100) == pytest.approx(full)
    rail = 7 / 8 * S / NIC + 7 * NET_HOP
    assert collective_seconds("reduce-scatter", S, 8, 8, DGX, A100) == pytest.approx(rail)


def test_one_rank_moves_nothing_and_unknown_kinds_are_refused():
    assert collective_seconds("all-reduce", 1e9, 1, 1, DGX, A100) == 0.0
    with pytest.raises(ValueError, match="unknown collective 'broadcast'"):
        collective_seconds("broadcast", 1.0, 2, 1, DGX, A100)


def layout(schedule="1f1b", pp=4, m=8):
    return make_layout(f"pp={pp}", devices=pp, micro_batch=1, global_batch=m, schedule=schedule)


@pytest.mark.parametrize("schedule", ["1f1b", "gpipe"])
def test_equal_stages_take_m_plus_p_minus_1_periods(schedule):
    assert pipeline_seconds(layout(schedule), [2.0] * 4) == pytest.approx((8 + 4 - 1) * 2.0)


def test_interleaving_divides_the_bubble_by_v():
    assert pipeline_seconds(layout("interleaved:2"), [2.0] * 4) == pytest.approx((8 + 3 / 2) * 2.0)


def test_in_flight_micro_batches():
    assert in_flight(layout("1f1b"), 0) == 4 and in_flight(layout("1f1b"), 3) == 1
    assert in_flight(layout("gpipe"), 0) == 8
    assert in_flight(layout("interleaved:2"), 0) == pytest.approx(4 * (1 + 3 / 8))
    assert in_flight(layout("1f1b", pp=1, m=8), 0) == 1  # accumulation holds one at a time


def test_uneven_layers_leave_the_ends_lighter():
    assert chunk_sizes(126, 16) == [7] + [8] * 14 + [7]
    assert chunk_sizes(96, 8) == [12] * 8
    assert sum(chunk_sizes(5, 3)) == 5

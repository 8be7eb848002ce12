"""Nodes a layout's group spans, counted without listing millions of ranks."""
import time

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from pase.cluster import get_cluster
from pase.perf import comms


def listed(devices_per_node, terms):
    ranks = np.zeros(1, dtype=np.int64)
    for size, stride in terms:
        ranks = (ranks[:, None] + np.arange(size, dtype=np.int64)[None, :] * stride).ravel()
    return int(np.unique(ranks // devices_per_node).size)


TERM = st.tuples(st.sampled_from([1, 2, 3, 4, 5, 8, 16, 100]),
                 st.sampled_from([1, 2, 3, 4, 5, 7, 8, 12, 16, 24, 32, 64, 128, 256]))


@settings(max_examples=300, deadline=None)
@given(st.lists(TERM, min_size=1, max_size=3), st.sampled_from([4, 8]))
def test_the_count_equals_the_listed_ranks(terms, per_node):
    base = get_cluster("dgx-a100", 8)
    cluster = type(base)(base.name, 1, per_node, base.device, base.intra, base.inter)
    old = comms.ENUMERATED_RANKS
    comms.ENUMERATED_RANKS = 4  # take the counting path on small groups too
    try:
        assert comms.group_nodes(cluster, terms) == listed(per_node, terms)
    finally:
        comms.ENUMERATED_RANKS = old


def test_a_data_parallel_group_of_16_million_ranks_is_counted_at_once():
    cluster = get_cluster("h100-sxm", 1 << 24)
    start = time.process_time()
    assert comms.group_nodes(cluster, [(1, 1), (1 << 24, 1)]) == (1 << 24) // 8
    assert comms.group_nodes(cluster, [(2, 8), (1 << 22, 32)]) == 1 << 23  # cp over nodes
    assert comms.group_nodes(cluster, [(2, 4), (1 << 21, 8)]) == 1 << 21  # inside nodes
    assert time.process_time() - start < 1.0  # listing them took seconds each


def test_the_layout_family_on_16_million_devices_is_searched_whole():
    """The reliability round's reproduction: `--layouts -p 16777216 --global-batch 16777216`
    priced one layout in 6 CPU s (its groups listed rank by rank), 1.5 hours in all."""
    import pase

    start = time.process_time()
    found = pase.search_layouts("gpt2", 1 << 24, cluster="h100-sxm", global_batch=1 << 24)
    # 864 before ZB-H1, DualPipe and every V up to the layers per stage joined the family
    assert found.exhaustive and found.family == 1332 and found.best is not None
    assert time.process_time() - start < 60  # about 2 CPU s here

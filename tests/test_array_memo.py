"""What is derived from a read-only array is kept while it lives, views included."""
from __future__ import annotations

import gc

import numpy as np

from pase.array_memo import kept, known


def test_views_of_a_read_only_array_share_one_entry_dropped_with_it():
    m = np.arange(6.0).reshape(2, 3)
    m.flags.writeable = False
    memo: dict = {}
    calls: list[int] = []

    def derive():
        calls.append(1)
        return len(calls)

    assert kept(memo, m.T, "k", derive) == 1
    assert known(memo, m.T, "k") and kept(memo, m.T, "k", derive) == 1  # another view object
    assert kept(memo, m, "k", derive) == 2  # the array itself lies otherwise: its own entry
    assert kept(memo, m[:, 1:], "k", derive) == 3  # another part of it: another entry
    del m
    gc.collect()
    assert memo == {}  # dropped with the owner, whose id may be reused


def test_a_writeable_array_is_derived_each_time():
    w = np.zeros((2, 3))
    memo: dict = {}
    assert kept(memo, w.T, "k", lambda: w.sum()) == 0.0
    w[0, 0] = 5.0
    assert kept(memo, w.T, "k", lambda: w.sum()) == 5.0 and memo == {}

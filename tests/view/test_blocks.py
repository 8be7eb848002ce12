"""Folding repeated blocks: by hand on short key lists, and on GPT-3 175B's 96 layers."""
import re

import pytest

from pase.viewer.blocks import fold


def expand(segments):
    return [i for start, period, count in segments for i in range(start, start + period * count)]


@pytest.mark.parametrize("keys, expected", [
    ("", []),
    ("a", [(0, 1, 1)]),
    ("abc", [(0, 1, 1), (1, 1, 1), (2, 1, 1)]),
    ("aaaa", [(0, 1, 4)]),
    ("xababab", [(0, 1, 1), (1, 2, 3)]),
    ("abcabcz", [(0, 3, 2), (6, 1, 1)]),
    ("abab" + "c" + "dd", [(0, 2, 2), (4, 1, 1), (5, 1, 2)]),
])
def test_fold_by_hand(keys, expected):
    assert fold(list(keys)) == expected


def test_only_exact_repeats_fold():
    keys = list("abcabdabc")  # the second block differs in its last row
    segments = fold(keys)
    for start, period, count in segments:
        for k in range(1, count):
            assert keys[start:start + period] == keys[start + k * period:start + (k + 1) * period]
    assert expand(segments) == list(range(len(keys)))


def test_block_starts_break_ties_for_aligned_blocks():
    # Three blocks 'n a b' after 'e': the rotation 'a b n' covers as many rows only when a
    # fourth 'n' follows; here the aligned fold is the longest, and named starts agree.
    keys = ["e", "n", "a", "b", "n", "a", "b", "n", "a", "b", "t"]
    starts = [True, True, False, False, True, False, False, True, False, False, True]
    assert (1, 3, 3) in fold(keys, starts)


def test_gpt3_175b_folds_its_96_layers():
    import pase
    from pase.api import load_graph
    from pase.viewer.build import folds, op_rows
    from pase.viewer.write import planned

    strategy = pase.solve("gpt3-175b", 16)
    graph = load_graph("gpt3-175b")
    layers = {m.group(1) for op in graph.ops if (m := re.match(r"(h\d+)\.", op.name))}
    p = planned(strategy)
    rows = op_rows(p)
    segments = folds(rows, [[] for _ in rows])
    assert len(rows) == len(graph.ops) == 1157
    assert len(segments) <= 20
    biggest = max(segments, key=lambda s: s[1] * s[2])
    assert biggest[2] >= len(layers) - 1 and biggest[1] * len(layers) <= len(graph.ops)
    assert expand(segments) == list(range(len(rows)))

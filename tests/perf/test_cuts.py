"""A graph's cuts placed from its layers (pase.perf.cuts) are pase.perf.pipeline's: the same
unit per op, the same layers and chunks per stage, the same bytes received, to the bit."""
from __future__ import annotations

from dataclasses import replace

import pytest

from pase.api import load_graph
from pase.errors import OptionError
from pase.perf import make_layout
from pase.perf.cuts import Frame
from pase.perf.pipeline import crossing_bytes, placement


@pytest.mark.parametrize("model,options", [
    ("gpt3", dict(layers=7, width=128, heads=4, vocab=512, seq=128)),  # 7 layers: uneven cuts
    ("deepseek-v3", dict(layers=5, seq=256)),
])
def test_a_cut_from_the_frame_is_the_placement(model, options):
    graph = load_graph(model, batch=2, **options)
    frame = Frame(graph)
    base = make_layout(dict(tp=2, dp=1), devices=2, micro_batch=2, global_batch=2,
                       sequence_parallel=True)
    checked = 0
    for pp, virtual in ((1, 1), (2, 1), (3, 1), (2, 2), (5, 1)):
        lay = replace(base, pp=pp, virtual=virtual)  # placement reads pp and V alone
        cut = frame.cut(lay)
        stages, units, chunks = placement(graph, lay)
        assert cut.units == units
        for s in range(pp):
            mine = [u for u, x in zip(units, stages) if x == s]
            assert cut.layers[s] == list(dict.fromkeys(mine))
            assert cut.held[s] == sorted({c for c, x in zip(chunks, stages) if x == s})
        for scale, element in ((2, 2.0), (6, 1.0), (1, 4.0)):
            lay_s = replace(lay, tp=scale, cp=1)
            want = crossing_bytes(graph, chunks, lay_s, element)
            assert cut.received(scale, element) == [[want[c] for c in held if c in want]
                                                    for held in cut.held]
        checked += 1
    assert checked == 5
    with pytest.raises(OptionError, match="numbered layers to cut"):
        frame.cut(replace(base, pp=8, virtual=1))

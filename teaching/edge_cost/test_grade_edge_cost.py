"""Autograder for assignment 2 (the paper's edge cost, by hand).

    pytest teaching/edge_cost                            # grades edge_cost.py here
    PASE_SUBMISSION=teaching/edge_cost/solution/edge_cost.py pytest teaching/edge_cost

Parts 1 to 3 are checked on cases worked by hand (the arithmetic is in the
comments); Part 4 against pase's ``paper`` cost model on real edges.
"""
from pathlib import Path

import numpy as np
import pytest

import pase
from pase.builder import GraphBuilder
from pase.registry import COST_MODELS
from pase.space import ConfigSpace
from pase.testing.grading import load_submission

submission = load_submission(Path(__file__).with_name("edge_cost.py"))


def two_fc_layers():
    """fc1 (dims b, n, k) writes an (8, 4) tensor split (b, n); fc2 reads it split (b, k)."""
    b = GraphBuilder("two-fc")
    b.fc(b.fc(b.input((8, 4), names=("b", "k")), 4, name="fc1"), 4, name="fc2")
    return b.build().ops


# -- Part 1 ---------------------------------------------------------------------------------

@pytest.mark.parametrize("tflops, bandwidth, expected", [
    (10, 16, 5000.0),     # 1e13 FLOP/s over 2e9 words/s
    (312, 600, 4160.0),   # 3.12e14 over 7.5e10
    (1, 8, 1000.0),       # 1e12 over 1e9
])
def test_part1_flop_per_word(tflops, bandwidth, expected):
    assert submission.flop_per_word(tflops, bandwidth) == pytest.approx(expected, rel=1e-12)


# -- Part 2 ---------------------------------------------------------------------------------

def test_part2_fc_output_and_input():
    fc1, fc2 = two_fc_layers()
    assert tuple(submission.tensor_split(fc1, fc1.outputs[0], (2, 4, 1))) == (2, 4)
    assert tuple(submission.tensor_split(fc2, fc2.inputs[0], (2, 4, 1))) == (2, 1)
    assert tuple(submission.tensor_split(fc2, fc2.inputs[0], (1, 1, 8))) == (1, 8)


def test_part2_conv_input_is_split_by_the_output_spatial_dims():
    b = GraphBuilder("conv")
    b.conv(b.input((8, 3, 16, 16)), (4, 3, 3, 3), pad=1, name="conv")
    conv = b.build().ops[0]  # dims b, c, h, w, r, s, n; the input (b, c, h, w)
    config = (2, 3, 1, 1, 1, 1, 4)
    assert tuple(submission.tensor_split(conv, conv.inputs[0], config)) == (2, 3, 1, 1)
    assert tuple(submission.tensor_split(conv, conv.outputs[0], config)) == (2, 4, 1, 1)


def test_part2_a_flattened_axis_is_split_by_every_dim():
    b = GraphBuilder("flat")
    b.reshape(b.input((8, 4, 16, 16)), (8, 1024), names=("b", "k"))
    ravel = b.build().ops[0]  # dims b, c, h, w; one output axis split by all four
    assert tuple(submission.tensor_split(ravel, ravel.outputs[0], (2, 2, 1, 1))) == (4,)
    assert tuple(submission.tensor_split(ravel, ravel.outputs[0], (8, 2, 2, 1))) == (32,)


# -- Part 3 ---------------------------------------------------------------------------------

@pytest.mark.parametrize("shape, src, dst, expected", [
    # tiles 4x4 -> 8x2: need 16, hold min(4,8)*min(4,2) = 8 (2 devices each): 2*(16-8)
    ((8, 4), (2, 1), (1, 2), 16.0),
    # 1 device -> 4 devices: no credit, need 4*2 = 8: 2*8
    ((8, 4), (1, 1), (2, 2), 16.0),
    # the same split: need 16, hold 16
    ((8, 4), (2, 1), (2, 1), 0.0),
    # tiles 4x2 -> 2x4 on 4 devices each: need 8, hold 2*2 = 4: 2*4
    ((8, 4), (2, 2), (4, 1), 8.0),
    # tiles 4x64 -> 32x32, 8 devices -> 2: need 1024, hold min(4,32)*min(64,32) = 128: 2*896
    ((32, 64), (8, 1), (1, 2), 1792.0),
    # extents that do not divide evenly stay real numbers: need 3*3.5 = 10.5, no credit
    ((3, 7), (1, 1), (1, 2), 21.0),
])
def test_part3_words_moved(shape, src, dst, expected):
    assert submission.words_moved(shape, src, dst) == pytest.approx(expected, rel=1e-12, abs=1e-12)


# -- Part 4 ---------------------------------------------------------------------------------

def test_part4_the_worked_example():
    fc1, fc2 = two_fc_layers()
    # fc1 at (b=2, n=1, k=1) leaves (2, 1); fc2 at (1, 1, 2) wants (1, 2): 16 words * 5000
    cost = submission.edge_cost(fc1, fc1.outputs[0], (2, 1, 1), fc2, fc2.inputs[0], (1, 1, 2))
    assert cost == pytest.approx(80000.0, rel=1e-12)


@pytest.mark.parametrize("tflops, bandwidth", [(10.0, 16.0), (125.0, 300.0)])
@pytest.mark.parametrize("model, devices", [("mlp", 4), ("alexnet", 8), ("inception_v3", 8),
                                            ("transformer", 4)])
def test_part4_matches_the_paper_cost_model(model, devices, tflops, bandwidth):
    graph = pase.load_graph(model)
    space = ConfigSpace(graph, devices)
    paper = COST_MODELS.get("paper")(tflops=tflops, bandwidth=bandwidth)
    rng = np.random.default_rng(len(model) * devices)
    edges = paper.edges(graph)
    for e in rng.choice(len(edges), size=min(12, len(edges)), replace=False):
        u, out, v, inp = edges[int(e)]
        producer, consumer = graph.ops[u], graph.ops[v]
        for _ in range(3):
            i, j = int(rng.integers(len(space.configs[u]))), int(rng.integers(len(space.configs[v])))
            src, dst = space.configs[u][i], space.configs[v][j]
            expected = paper.edge_costs(producer, producer.outputs[out], src[None, :],
                                        consumer, consumer.inputs[inp], dst[None, :])[0, 0]
            got = submission.edge_cost(producer, producer.outputs[out], tuple(src),
                                       consumer, consumer.inputs[inp], tuple(dst),
                                       tflops=tflops, bandwidth=bandwidth)
            assert got == pytest.approx(expected, rel=1e-9, abs=1e-9), (
                f"{producer.name} {tuple(src)} -> {consumer.name} {tuple(dst)}")

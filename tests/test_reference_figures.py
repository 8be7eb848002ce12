"""The five paper graphs and the paper cost model against the reference figures.

Every reference number below comes from the paper's reference prototype and is typed
in, not computed here; docs/cost-model.md ("Reference figures") lists them all with
the graphs, ops and configurations they belong to.
"""
from __future__ import annotations

import functools

import numpy as np
import pytest

from pase.cost_models.paper import PaperCostModel
from pase.graphs.alexnet import alexnet
from pase.graphs.inception import inception_v3
from pase.graphs.resnet import resnet101
from pase.graphs.rnnlm import rnnlm
from pase.graphs.transformer import transformer
from pase.ir import Graph
from pase.registry import MODELS
from pase.space import ConfigSpace

BUILDERS = {"alexnet": alexnet, "rnnlm": rnnlm, "resnet101": resnet101, "inception_v3": inception_v3, "transformer": transformer}


@functools.lru_cache(maxsize=None)
def graph(name: str) -> Graph:
    return BUILDERS[name]()


# (graph, p) -> vertices, edges, sum of configs, largest config count
STRUCTURE = {
    ("alexnet", 8): (14, 13, 234, 28),
    ("alexnet", 64): (14, 13, 1026, 163),
    ("rnnlm", 8): (4, 3, 123, 36),
    ("rnnlm", 64): (4, 3, 745, 249),
    ("resnet101", 8): (245, 277, 4360, 35),
    ("resnet101", 64): (245, 277, 17142, 184),
    ("inception_v3", 8): (219, 253, 4299, 30),
    ("inception_v3", 64): (219, 253, 20248, 176),
    ("transformer", 8): (204, 256, 7729, 62),
    ("transformer", 64): (204, 256, 52613, 566),
}


@pytest.mark.parametrize("name,p", sorted(STRUCTURE))
def test_structure_matches_reference(name, p):
    g = graph(name)
    sizes = ConfigSpace(g, p).sizes
    assert (len(g.ops), len(g.vertex_pairs()), sum(sizes), max(sizes)) == STRUCTURE[(name, p)]


# graph, op index, kind, domain, config, reference cost (FLOP) at p = 8
LAYER_SPOTS = [
    ("alexnet", 0, "Conv", (128, 3, 55, 55, 11, 11, 96), (1, 1, 1, 1, 1, 1, 1), 40590950400),
    ("alexnet", 0, "Conv", (128, 3, 55, 55, 11, 11, 96), (2, 1, 1, 1, 1, 1, 2), 361618857600),
    ("alexnet", 1, "Pooling", (128, 96, 27, 27), (1, 2, 1, 3), 5070292992),
    ("alexnet", 10, "FC", (128, 4096, 9216), (1, 2, 2), 7884505088),
    ("alexnet", 13, "SoftmaxCrossEntropy", (128, 1024), (2, 4), 705664),
    ("rnnlm", 0, "Embedding", (128, 256, 2048, 100000), (1, 2, 2, 2), 6952468480000),
    ("rnnlm", 1, "LSTM", (2, 256, 128, 2048, 2048), (2, 1, 1, 2, 2), 1832474640384),
    ("rnnlm", 3, "SoftmaxCrossEntropy", (128, 256, 100000), (2, 2, 2), 1720336384),
    ("resnet101", 1, "BatchNorm", (128, 64, 114, 114), (1, 2, 2, 2), 217406464),
    ("resnet101", 11, "Elementwise", (128, 256, 57, 57), (1, 1, 1, 1), 212926464),
    ("resnet101", 242, "ReduceMean", (128, 2048, 8, 8), (1, 2, 2, 2), 15728640000),
    ("resnet101", 243, "FC", (128, 1000, 2048), (1, 2, 2), 1171968000),
    ("inception_v3", 1, "BatchNorm", (128, 32, 149, 149), (2, 2, 1, 1), 7469341184),
    ("inception_v3", 6, "Pooling", (128, 64, 73, 73), (2, 4, 1, 1), 5456896),
    ("transformer", 0, "Embedding", (128, 256, 512, 50000), (1, 2, 2, 2), 2415544320000),
    ("transformer", 5, "Softmax", (128, 8, 256, 256), (1, 2, 2, 2), 86722478080),
    ("transformer", 9, "Norm", (128, 256, 512), (2, 2, 2), 205074432),
]


@pytest.mark.parametrize("name,n,kind,domain,config,cost", LAYER_SPOTS)
def test_layer_cost_spot_values(name, n, kind, domain, config, cost):
    op = graph(name).ops[n]
    assert op.kind == kind
    assert op.shape == domain
    got = PaperCostModel().layer_costs(op, np.array([config]))[0]
    assert got == pytest.approx(cost, rel=1e-12)


# graph, producer index, consumer index, kinds, producer config, consumer config, cost
EDGE_SPOTS = [
    ("alexnet", 9, 10, ("Unravel", "FC"), (8, 1), (4, 1, 2), 737280000),
    ("alexnet", 10, 11, ("FC", "FC"), (1, 2, 4), (2, 2, 2), 1310720000),
    ("transformer", 3, 4, ("Unstack", "Einsum"), (1, 1, 2, 2, 2), (2, 1, 1, 1, 2), 31457280000),
    ("transformer", 73, 84, ("Norm", "Stack"), (2, 2, 1), (1, 1, 1, 8), 20971520000),
    ("inception_v3", 26, 27, ("BatchNorm", "Concat"), (4, 2, 1, 1), (1, 1, 1, 5), 8780800000),
]


@pytest.mark.parametrize("name,u,v,kinds,cu,cv,cost", EDGE_SPOTS)
def test_edge_cost_spot_values(name, u, v, kinds, cu, cv, cost):
    g = graph(name)
    pu, pv = g.ops[u], g.ops[v]
    assert (pu.kind, pv.kind) == kinds
    # The paper costs only the last connection between two ops.
    c = [c for c in g.connections if (c.src, c.dst) == (pu.name, pv.name)][-1]
    got = PaperCostModel().edge_costs(pu, pu.outputs[c.src_output], np.array([cu]),
                                      pv, pv.inputs[c.dst_input], np.array([cv]))[0, 0]
    assert got == pytest.approx(cost, rel=1e-12)


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_json_round_trip(name):
    g = graph(name)
    assert Graph.from_json(g.to_json()).to_dict() == g.to_dict()


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_registered_and_names_unique(name):
    assert MODELS.get(name) is BUILDERS[name]
    names = [op.name for op in graph(name).ops]
    assert len(set(names)) == len(names)


def test_op_names_follow_the_module_layout():
    r, i, t = graph("resnet101"), graph("inception_v3"), graph("transformer")
    assert [op.name for op in r.ops[:12]] == [
        "conv1", "bn1", "maxpool",
        "layer1.0.conv1", "layer1.0.bn1", "layer1.0.conv2", "layer1.0.bn2",
        "layer1.0.conv3", "layer1.0.bn3", "layer1.0.downsample.0", "layer1.0.downsample.1",
        "layer1.0.add"]
    assert [op.name for op in r.ops[-3:]] == ["avgpool", "fc", "loss"]
    assert i.ops[6].name == "maxpool1"
    assert [op.name for op in i.ops[24:28]] == [
        "Mixed_5b.avg_pool", "Mixed_5b.branch_pool.conv", "Mixed_5b.branch_pool.bn",
        "Mixed_5b.concat"]
    assert [op.name for op in i.ops[-3:]] == ["avgpool", "fc", "loss"]
    assert [op.name for op in t.ops[:14]] == [
        "enc.embedding", "enc.positional", "enc0.attn.qkv", "enc0.attn.unstack",
        "enc0.attn.scores", "enc0.attn.softmax", "enc0.attn.context", "enc0.attn.out",
        "enc0.attn.residual", "enc0.attn.norm", "enc0.ffn.fc1", "enc0.ffn.fc2",
        "enc0.ffn.residual", "enc0.ffn.norm"]
    assert t.ops[84].name == "dec0.cross_attn.stack"
    assert t.ops[-1].name == "loss" and t.ops[-2].name == "projection"


def test_transformer_dim_roles():
    t = graph("transformer")
    roles = {d.name: d.role for d in t.op("enc0.attn.qkv").dims}
    assert roles == {"s": "other", "b": "batch", "h": "heads", "l": "sequence", "k": "channel",
                     "e": "channel"}
    assert {d.name: d.role for d in t.op("dec0.ffn.fc1").dims}["f"] == "parameter"
    assert {d.name: d.role for d in t.op("projection").dims}["v"] == "vocabulary"
    # Cross-attention stacks [query, encoder output, encoder output].
    stack = t.op("dec0.cross_attn.stack")
    assert [p.source for p in stack.inputs] == [
        ("dec0.self_attn.norm", 0), ("enc5.ffn.norm", 0), ("enc5.ffn.norm", 0)]
    assert t.op("dec0.cross_attn.qkv").attrs["eq"] == "sble,shek->sbhlk"
    assert t.op("enc0.attn.qkv").attrs["eq"] == "ble,shek->sbhlk"


def test_resnet_blocks_option():
    g = resnet101(batch=32, blocks=(1, 1, 1, 1))
    # 3 stem ops + 4 blocks of 7 ops + 4 projections of 2 ops + 3 tail ops
    assert len(g.ops) == 3 + 4 * 7 + 4 * 2 + 3

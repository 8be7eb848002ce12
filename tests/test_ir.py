import json

import pytest

from pase.builder import GraphBuilder
from pase.errors import GraphError
from pase.ir import Dim, Graph, Op, Port
from pase.registry import MODELS


def _fc(name, source=None, shape=(8, 4)):
    return Op(name, "FC", (Dim("b", 8, "batch"), Dim("n", 4, "parameter"), Dim("k", 4, "reduction")),
              inputs=(Port(shape, (("b",), ("k",)), source),),
              outputs=(Port((8, 4), (("b",), ("n",))),))


def test_valid_chain():
    g = Graph("g", [_fc("a"), _fc("b", ("a", 0))])
    assert g.vertex_pairs() == [(0, 1)]
    assert g.connections[0].dst == "b"


@pytest.mark.parametrize("ops, message", [
    ([_fc("a"), _fc("a", ("a", 0))], "duplicate op name 'a'"),
    ([_fc("a"), _fc("b", ("zzz", 0))], "reads unknown op 'zzz'"),
    ([_fc("a"), _fc("b", ("a", 3))], "reads output 3 of 'a'"),
    ([_fc("a"), _fc("b", ("a", 0), shape=(8, 5))], "shape mismatch"),
    ([_fc("a"), _fc("b")], "not connected"),
    ([_fc("a", ("b", 0)), _fc("b", ("a", 0))], "cycle"),
])
def test_malformed_graphs_are_refused(ops, message):
    with pytest.raises(GraphError, match=message):
        Graph("g", ops)


def test_bad_dims_are_refused():
    bad = Op("x", "FC", (Dim("b", 0),), outputs=(Port((1,), (("b",),)),))
    with pytest.raises(GraphError, match="dim 'b' has size 0"):
        Graph("g", [bad])
    unknown_role = Op("x", "FC", (Dim("b", 2, "bogus"),))
    with pytest.raises(GraphError, match="role 'bogus'; allowed: batch"):
        Graph("g", [unknown_role])
    unknown_map = Op("x", "FC", (Dim("b", 2),), outputs=(Port((2,), (("q",),)),))
    with pytest.raises(GraphError, match="unknown dim 'q'"):
        Graph("g", [unknown_map])


@pytest.mark.parametrize("name", ["alexnet", "rnnlm", "resnet101", "inception_v3", "transformer",
                                  "mlp", "chain", "diamond", "fork-join", "random"])
def test_json_round_trip_of_every_builtin_graph(name):
    g = MODELS.get(name)()
    again = Graph.from_json(g.to_json())
    assert again.to_dict() == g.to_dict()
    assert [op.name for op in again.ops] == [op.name for op in g.ops]
    assert again.ops == g.ops


def test_json_errors_are_clear(tmp_path):
    with pytest.raises(GraphError, match="not valid JSON"):
        Graph.from_json("{nope")
    with pytest.raises(GraphError, match="not a pase graph"):
        Graph.from_json(json.dumps({"ops": []}))
    with pytest.raises(GraphError, match="version 99 is not supported"):
        Graph.from_json(json.dumps({"schema": "pase.graph", "version": 99}))
    with pytest.raises(GraphError, match="malformed graph JSON"):
        Graph.from_json(json.dumps({"schema": "pase.graph", "version": 1, "name": "x",
                                    "ops": [{"name": "a"}]}))
    with pytest.raises(GraphError, match="cannot read graph file"):
        Graph.from_json(tmp_path / "missing.json")


def test_cyclic_graph_json_is_refused():
    g = Graph("g", [_fc("a"), _fc("b", ("a", 0))]).to_dict()
    g["ops"][0]["inputs"][0]["source"] = {"op": "b", "output": 0}
    with pytest.raises(GraphError, match="cycle: "):
        Graph.from_dict(g)


def test_builder_shapes():
    b = GraphBuilder("t")
    x = b.input((2, 3, 227, 227))
    y = b.conv(x, (96, 3, 11, 11), stride=4)
    assert y.shape == (2, 96, 55, 55)
    z = b.pool(y, 3, 2)
    assert z.shape == (2, 96, 27, 27)
    with pytest.raises(GraphError, match="filter expects 4 input channels"):
        b.conv(z, (8, 4, 3, 3))
    with pytest.raises(GraphError, match="elements"):
        b.reshape(z, (2, 5))

"""The IR: validation of graphs, immutable ops and graphs, the JSON file reader."""
import copy
import json
import pickle

import pytest

import pase
from pase.builder import GraphBuilder
from pase.errors import GraphError
from pase.ir import MAX_GRAPH_FILE_BYTES, Dim, FrozenDict, Graph, Op, Port, read_graph_file
from pase.registry import MODELS


def _fc(name, source=None, shape=(8, 4), pw=0):
    return Op(name, "FC", (Dim("b", 8, "batch"), Dim("n", 4, "parameter"), Dim("k", 4, "reduction")),
              inputs=(Port(shape, (("b",), ("k",)), source),),
              outputs=(Port((8, 4), (("b",), ("n",))),),
              weights=(Port((4, 4), (("k",), ("n",))),), attrs={"pw": pw})


def test_valid_chain():
    g = Graph("g", [_fc("a"), _fc("b", ("a", 0))])
    assert g.vertex_pairs() == [(0, 1)]
    assert g.connections[0].dst == "b"


@pytest.mark.parametrize("ops, message", [
    ([_fc("a"), _fc("a", ("a", 0))], "duplicate op name 'a'"),
    ([_fc("a"), _fc("b", ("zzz", 0))], "reads unknown op 'zzz'"),
    ([_fc("a"), _fc("b", ("a", 3))], "reads output 3 of 'a'"),
    ([_fc("a"), _fc("b", ("a", 0), shape=(8, 5))], "axis 1 has size 5 but dim 'k' has size 4"),
    ([_fc("a"), _fc("b")], "not connected"),
    ([_fc("a", ("b", 0)), _fc("b", ("a", 0))], "cycle"),
    ([], "a graph needs at least one op"),
    ([_fc("a"), "b"], "item 1 is a str, not an Op"),
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


@pytest.mark.parametrize("size", [True, 2.0, "8", 2**53 + 1, 10**30])
def test_dim_sizes_must_be_integers_in_range(size):
    op = Op("x", "Softmax", (Dim("b", size),), inputs=(Port((8,), (("b",),)),),
            outputs=(Port((8,), (("b",),)),), attrs={"axis": 0})
    with pytest.raises(GraphError, match=r"op 'x' \(Softmax\) dim 'b' has size .*; sizes must be "
                                         r"integers in 1\.\.2\*\*53"):
        Graph("g", [op])


def test_a_dim_splits_at_most_one_axis_of_a_port():
    op = Op("x", "Elementwise", (Dim("b", 8),), inputs=(Port((8, 8), (("b",), ("b",))),),
            outputs=(Port((8,), (("b",),)),))
    with pytest.raises(GraphError, match="input 0 maps dim 'b' onto two axes"):
        Graph("g", [op])


def test_numpy_sizes_are_plain_ints():
    np = pytest.importorskip("numpy")
    d = Dim("b", np.int64(8))
    p = Port((np.int64(8),), (("b",),), ("a", np.int64(0)))
    assert type(d.size) is int and type(p.shape[0]) is int and type(p.source[1]) is int


# -- immutability --------------------------------------------------------------------

def test_op_attrs_are_read_only_and_ops_hash():
    attrs = {"pw": 1}
    op = _fc("a", pw=1)
    op2 = Op(op.name, op.kind, op.dims, op.inputs, op.outputs, op.weights, attrs=attrs)
    attrs["pw"] = 99  # the caller's dict is copied, not kept
    assert op2.attrs["pw"] == 1
    with pytest.raises(TypeError):
        op.attrs["pw"] = 2
    with pytest.raises(AttributeError):
        op.attrs.update(pw=2)
    with pytest.raises(AttributeError):
        op.name = "b"
    assert op == op2 and hash(op) == hash(op2)
    assert op.attrs == {"pw": 1}
    assert len({op, op2, _fc("a", pw=2)}) == 2


def test_nested_attr_values_are_frozen():
    op = Op("x", "Einsum", (), attrs={"eq": "a,a->a", "extra": [1, [2, 3]], "m": {"k": [4]}})
    assert op.attrs["extra"] == (1, (2, 3))
    assert isinstance(op.attrs["m"], FrozenDict) and op.attrs["m"]["k"] == (4,)
    hash(op)
    with pytest.raises(GraphError, match="non-string key"):
        Op("x", "FC", (), attrs={"m": {1: 2}})
    with pytest.raises(GraphError, match="more than 16 levels"):
        deep: list = []
        for _ in range(40):
            deep = [deep]
        Op("x", "FC", (), attrs={"pw": deep})


def test_graph_is_immutable():
    g = Graph("g", [_fc("a"), _fc("b", ("a", 0))], {"cutoff": 4})
    assert isinstance(g.ops, tuple)
    with pytest.raises(AttributeError, match="immutable"):
        g.name = "h"
    with pytest.raises(AttributeError, match="immutable"):
        g.ops = ()
    with pytest.raises(TypeError):
        g.attrs["cutoff"] = 1
    g.connections.clear()   # a copy: the graph keeps its own
    g.vertex_pairs().clear()
    assert g.vertex_pairs() == [(0, 1)] and len(g.connections) == 1


def test_graph_equality_hash_pickle_and_copy():
    g = MODELS.get("diamond")()
    again = MODELS.get("diamond")()
    assert g is not again and g == again and hash(g) == hash(again)
    assert g != MODELS.get("diamond")(width=32)
    assert pickle.loads(pickle.dumps(g)) == g
    assert copy.deepcopy(g) == g
    assert len({g: 1, again: 2}) == 1


def test_builder_keeps_building_after_build():
    b = GraphBuilder("t")
    x = b.fc(b.input((8, 4), names=("b", "k")), 4, name="fc1")
    first = b.build()
    b.fc(x, 4, name="fc2")
    second = b.build()
    assert len(first) == 1 and len(second) == 2  # the built graph did not change


# -- JSON ------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["alexnet", "rnnlm", "resnet101", "inception_v3", "transformer",
                                  "mlp", "chain", "diamond", "fork-join", "random"])
def test_json_round_trip_of_every_builtin_graph(name, tmp_path):
    g = MODELS.get(name)()
    again = Graph.from_json(g.to_json())
    assert again.to_dict() == g.to_dict()
    assert [op.name for op in again.ops] == [op.name for op in g.ops]
    assert again.ops == g.ops and again == g and hash(again) == hash(g)
    path = tmp_path / f"{name}.json"
    g.to_json(path)
    assert pase.load_graph(str(path)) == g


def test_json_errors_are_clear(tmp_path):
    with pytest.raises(GraphError, match="not valid JSON"):
        Graph.from_json("{nope")
    with pytest.raises(GraphError, match="not a pase graph"):
        Graph.from_json(json.dumps({"ops": []}))
    with pytest.raises(GraphError, match="version 99 is not supported"):
        Graph.from_json(json.dumps({"schema": "pase.graph", "version": 99}))
    with pytest.raises(GraphError, match="version True is not supported"):
        Graph.from_json(json.dumps({"schema": "pase.graph", "version": True}))
    with pytest.raises(GraphError, match=r"op 'a' \(ops\[0\]\) \"kind\" must be a string"):
        Graph.from_json(json.dumps({"schema": "pase.graph", "version": 1, "name": "x",
                                    "ops": [{"name": "a"}]}))
    with pytest.raises(GraphError, match="cannot read graph file"):
        Graph.from_json(tmp_path / "missing.json")


def _two_fc() -> dict:
    return Graph("g", [_fc("a"), _fc("b", ("a", 0))]).to_dict()


def _set(path, value):
    def mutate(d):
        target = d
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
    return mutate


@pytest.mark.parametrize("mutate, message", [
    (_set(("name",), 5), "the graph's \"name\" must be a string"),
    (_set(("ops",), {}), "\"ops\" must be a list"),
    (_set(("atrs",), {}), "the graph has unknown field 'atrs'; allowed: schema, version, name"),
    (_set(("attrs",), []), "\"attrs\" must be an object"),
    (_set(("attrs", "cutoff"), 0), "attribute 'cutoff' is 0; allowed: an integer >= 1"),
    (_set(("attrs", "cutoff"), True), "attribute 'cutoff' is True; allowed: an integer >= 1"),
    (_set(("ops", 0), "fc"), r"ops\[0\] must be an object"),
    (_set(("ops", 0, "atrs"), {}), r"op 'a' \(ops\[0\]\) has unknown field 'atrs'; allowed: name"),
    (_set(("ops", 0, "dims"), "bnk"), r"op 'a' \(ops\[0\]\) \"dims\" must be a list"),
    (_set(("ops", 0, "dims", 0, "sise"), 8), r"dims\[0\] has unknown field 'sise'"),
    (_set(("ops", 0, "dims", 0, "name"), 1), r"dims\[0\] \"name\" must be a string"),
    (_set(("ops", 0, "pinned"), "b"), "\"pinned\" must be a list"),
    (_set(("ops", 0, "contiguous"), "no"), "\"contiguous\" must be true or false"),
    (_set(("ops", 0, "inputs", 0, "dims"), ["b", "k"]), r"\"dims\"\[0\] must be a list"),
    (_set(("ops", 0, "inputs", 0, "shape"), 8), "\"shape\" must be a list"),
    (_set(("ops", 0, "inputs", 0, "shape"), [8, "4"]), r"input 0 has shape \(8, '4'\); sizes must be"),
    (_set(("ops", 1, "inputs", 0, "source", "output"), -1), "\"output\" must be an integer >= 0"),
    (_set(("ops", 1, "inputs", 0, "source", "output"), "0"), "\"output\" must be an integer >= 0"),
    (_set(("ops", 1, "inputs", 0, "source"), "a"), "\"source\" must be an object"),
    (_set(("ops", 0, "attrs"), [1]), "\"attrs\" must be an object"),
])
def test_malformed_fields_name_what_is_wrong(mutate, message):
    data = _two_fc()
    mutate(data)
    with pytest.raises(GraphError, match=message) as info:
        Graph.from_dict(data)
    assert "\n" not in str(info.value)


def test_cyclic_graph_json_is_refused():
    g = _two_fc()
    g["ops"][0]["inputs"][0]["source"] = {"op": "b", "output": 0}
    with pytest.raises(GraphError, match="cycle: "):
        Graph.from_dict(g)


# -- the file reader ---------------------------------------------------------------------

def _one_line_naming(exc_info, path):
    text = str(exc_info.value)
    assert "\n" not in text and str(path) in text, text
    return text


def test_file_that_is_not_utf8(tmp_path):
    path = tmp_path / "latin1.json"
    raw = b'{"schema": "pase.graph", "name": "caf\xe9"}'
    path.write_bytes(raw)
    with pytest.raises(GraphError) as info:
        read_graph_file(path)
    offset = raw.index(b"\xe9")  # 37: the latin-1 e-acute
    assert f"not UTF-8 text: byte 0xe9 at offset {offset}" in _one_line_naming(info, path)


def test_file_nested_too_deeply(tmp_path):
    path = tmp_path / "deep.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(GraphError) as info:
        pase.load_graph(str(path))
    assert "nests lists or objects too deeply" in _one_line_naming(info, path)


def test_file_over_the_size_limit(tmp_path):
    assert MAX_GRAPH_FILE_BYTES == 64 * 2**20
    path = tmp_path / "huge.json"
    with open(path, "wb") as f:  # sparse: no 64 MiB written
        f.truncate(MAX_GRAPH_FILE_BYTES + 1)
    with pytest.raises(GraphError) as info:
        pase.load_graph(str(path))
    text = _one_line_naming(info, path)
    assert f"{MAX_GRAPH_FILE_BYTES + 1} bytes, more than the 64 MiB allowed" in text


def test_file_limit_also_holds_for_streams(tmp_path, monkeypatch):
    # A file whose size the OS does not report (a pipe, /dev/zero) is cut at the limit.
    monkeypatch.setattr("pase.ir.MAX_GRAPH_FILE_BYTES", 100)
    monkeypatch.setattr("pase.ir.os.path.getsize", lambda p: 0)
    path = tmp_path / "g.json"
    path.write_text(json.dumps(_two_fc()))
    with pytest.raises(GraphError, match="is larger than the 0 MiB allowed"):
        read_graph_file(path)


def test_file_errors_name_the_file(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text("{nope")
    with pytest.raises(GraphError) as info:
        read_graph_file(path)
    assert "is not valid JSON" in _one_line_naming(info, path)
    with pytest.raises(GraphError) as info:
        read_graph_file(tmp_path)
    assert "cannot read graph file" in _one_line_naming(info, tmp_path)


def test_file_with_byte_order_mark_reads(tmp_path):
    path = tmp_path / "bom.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(_two_fc()).encode())
    assert len(read_graph_file(path)) == 2


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


"""Op schemas: bad graphs are refused on load with one-line messages; docs agree with the table."""
import copy
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import pase
from pase.builder import GraphBuilder
from pase.errors import GraphError
from pase.ir import Dim, Graph, Op, Port
from pase.registry import MODELS
from pase.schema import OP_SCHEMAS, attr, parse_einsum

DOCS = Path(__file__).resolve().parents[1] / "docs"


# -- small graphs to break --------------------------------------------------------------

def _cnn() -> Graph:
    b = GraphBuilder("cnn", cutoff=1)
    x = b.input((4, 3, 16, 16))
    x = b.conv(x, (8, 3, 3, 3), pad=1, pw=1, name="conv")
    x = b.batch_norm(x, name="bn")
    x = b.pool(x, 2, 2, name="pool")
    y = b.conv(x, (8, 8, 1, 1), name="conv2")
    x = b.concat([x, y], axis=1, name="concat")
    x = b.reduce_mean(x, (2, 3), name="mean")
    x = b.fc(x, 10, name="fc")
    b.softmax_cross_entropy(x, name="loss")
    return b.build()


def _rnn() -> Graph:
    b = GraphBuilder("rnn", cutoff=1)
    x = b.embedding(b.input((4, 8), names=("b", "l")), 100, 16, name="embedding")
    x = b.lstm(x, 16, 2, name="lstm")
    b.reshape(x, (4, 128), names=("b", "k"), name="flat")
    return b.build()


def _transformer() -> Graph:
    # q, k: (b=4, h=2, l=8, k=4); scores: (4, 2, 8, 8)
    return MODELS.get("transformer")(batch=4, seq=8, vocab=10, width=8, heads=2, d_k=4, ff=16,
                                     layers=1)


BASES = {"cnn": _cnn, "rnn": _rnn, "transformer": _transformer}
_DICTS: dict = {}


def _base(name: str) -> dict:
    if name not in _DICTS:
        _DICTS[name] = BASES[name]().to_dict()
    return copy.deepcopy(_DICTS[name])


def _op(data: dict, name: str) -> dict:
    return next(o for o in data["ops"] if o["name"] == name)


def attrs(op: str, **values):
    def mutate(d):
        _op(d, op)["attrs"].update(values)
    return mutate


def drop_attr(op: str, key: str):
    def mutate(d):
        del _op(d, op)["attrs"][key]
    return mutate


def dim_size(op: str, dim: str, size):
    def mutate(d):
        next(x for x in _op(d, op)["dims"] if x["name"] == dim)["size"] = size
    return mutate


def op_field(op: str, key: str, value):
    def mutate(d):
        _op(d, op)[key] = value
    return mutate


def port_dims(op: str, which: str, i: int, dims):
    def mutate(d):
        _op(d, op)[which][i]["dims"] = dims
    return mutate


def port_shape_axis(op: str, which: str, i: int, axis: int, size: int):
    def mutate(d):
        _op(d, op)[which][i]["shape"][axis] = size
    return mutate


def graph_field(key: str, value):
    def mutate(d):
        d[key] = value
    return mutate


SCORES, SOFTMAX, FC1 = "enc0.attn.scores", "enc0.attn.softmax", "enc0.ffn.fc1"

# (id, base graph, mutation, words the one-line message must contain)
BAD_GRAPHS = [
    ("einsum letters are not the dims", "transformer", attrs(SCORES, eq="bhlq,bhmq->bhlm"),
     ["op 'enc0.attn.scores' (Einsum)", "eq 'bhlq,bhmq->bhlm'", "letters that are no dim: q",
      "dims that are no letter: k"]),
    ("einsum without eq", "transformer", drop_attr(SCORES, "eq"),
     [SCORES, "lacks attribute 'eq'", "allowed: a two-operand einsum"]),
    ("einsum eq not a string", "transformer", attrs(SCORES, eq=5),
     [SCORES, "attribute 'eq' is 5 (not a string)", "allowed:"]),
    ("einsum eq malformed", "transformer", attrs(SCORES, eq="bhlk->bhlk"),
     [SCORES, "attribute 'eq'", "not of the form 'ab,bc->ac'", "allowed:"]),
    ("einsum letter twice", "transformer", attrs(SCORES, eq="bhlkk,bhmk->bhlm"),
     [SCORES, "letter 'k' appears twice in operand 1"]),
    ("einsum lonely letter", "transformer", attrs(SCORES, eq="bhlk,bhmk->bhl"),
     [SCORES, "letter 'm' appears only in operand 2 and not in the output"]),
    ("einsum ports do not follow eq", "transformer",
     port_dims(SCORES, "inputs", 0, [["b"], ["h"], ["m"], ["k"]]),
     [SCORES, "operands map their axes to [[b], [h], [m], [k]] and [[b], [h], [m], [k]]",
      "needs one tensor mapped to [[b], [h], [l], [k]]"]),
    ("softmax axis 7", "transformer", attrs(SOFTMAX, axis=7),
     ["op 'enc0.attn.softmax' (Softmax)", "attribute 'axis' is 7",
      "allowed: an integer axis in 0..3"]),
    ("softmax axis negative", "transformer", attrs(SOFTMAX, axis=-1),
     [SOFTMAX, "attribute 'axis' is -1", "0..3"]),
    ("softmax axis a boolean", "transformer", attrs(SOFTMAX, axis=True),
     [SOFTMAX, "attribute 'axis' is True", "0..3"]),
    ("softmax axis missing", "transformer", drop_attr(SOFTMAX, "axis"),
     [SOFTMAX, "lacks attribute 'axis'", "allowed: an integer axis in 0..3"]),
    ("norm axis out of range", "cnn", attrs("bn", axis=4),
     ["op 'bn' (BatchNorm)", "attribute 'axis' is 4", "0..3"]),
    ("pw negative", "transformer", attrs(FC1, pw=-1),
     ["op 'enc0.ffn.fc1' (Einsum)", "attribute 'pw' is -1", "allowed: a finite number >= 0"]),
    ("pw a string", "transformer", attrs(FC1, pw="abc"),
     [FC1, "attribute 'pw' is 'abc'", "allowed: a finite number >= 0"]),
    ("pw NaN", "cnn", attrs("conv", pw=float("nan")),
     ["op 'conv' (Conv)", "attribute 'pw' is nan", "allowed: a finite number >= 0"]),
    ("pw infinite", "cnn", attrs("fc", pw=float("inf")),
     ["op 'fc' (FC)", "attribute 'pw' is inf", "finite"]),
    ("pw a boolean", "cnn", attrs("fc", pw=True), ["op 'fc' (FC)", "attribute 'pw' is True"]),
    ("pw too large for a float", "cnn", attrs("fc", pw=10**400),
     ["op 'fc' (FC)", "attribute 'pw' is 1000000", "(too large); allowed: a finite number >= 0"]),
    ("dim against port shape", "transformer", dim_size(SCORES, "l", 2048),
     [SCORES, "input 0 axis 2 has size 8 but dim 'l' has size 2048", "must be equal"]),
    ("port shape against dim", "transformer", port_shape_axis(SOFTMAX, "outputs", 0, 3, 1024),
     [SOFTMAX, "output 0 axis 3 has size 1024 but dim 'm' has size 8"]),
    ("dim of size 10**30", "transformer", dim_size(SCORES, "l", 10**30),
     [SCORES, "dim 'l' has size 1000000000000000000000000000000",
      "sizes must be integers in 1..2**53"]),
    ("no ops", "cnn", graph_field("ops", []), ["graph 'cnn' has no ops", "at least one op"]),
    ("unknown kind", "cnn", op_field("bn", "kind", "Gelu"),
     ["op 'bn' has unknown kind 'Gelu'", "known kinds: Conv, Pooling, FC"]),
    ("unknown attribute", "transformer", attrs(SOFTMAX, axsi=3),
     [SOFTMAX, "unknown attribute 'axsi'", "a Softmax takes: axis"]),
    ("conv stride does not give the output", "cnn", attrs("conv", stride=[2, 2]),
     ["op 'conv' (Conv)", "input 0 axis 2 has size 16 but dim 'h' has size 16",
      "stride 2 and pad 1 gives an output height of 8"]),
    ("conv pad negative", "cnn", attrs("conv", pad=[-1, 0]),
     ["op 'conv' (Conv)", "attribute 'pad' is (-1, 0)",
      "allowed: a list of integers >= 0, one per spatial axis"]),
    ("conv spatial dims not pinned", "cnn", op_field("conv", "pinned", []),
     ["op 'conv' (Conv)", "must pin dim 'h'"]),
    ("conv dims in another order", "cnn",
     op_field("conv2", "dims", [{"name": n, "size": s, "role": "other"} for n, s in
                                (("c", 8), ("b", 4), ("h", 8), ("w", 8), ("r", 1), ("s", 1),
                                 ("n", 8))]),
     ["op 'conv2' (Conv)", "has dims c, b, h, w, r, s, n", "exactly the dims b, c, h, w, r, s, n"]),
    ("pooling without window", "cnn", drop_attr("pool", "window"),
     ["op 'pool' (Pooling)", "lacks attribute 'window'", "allowed: a pair [h, w] of integers >= 1"]),
    ("pooling window zero", "cnn", attrs("pool", window=[0, 2]),
     ["op 'pool' (Pooling)", "attribute 'window' is (0, 2)", ">= 1"]),
    ("reduce axes out of range", "cnn", attrs("mean", axes=[2, 9]),
     ["op 'mean' (ReduceMean)", "attribute 'axes' is (2, 9)",
      "allowed: a non-empty list of distinct integer axes in 0..3"]),
    ("reduce axes empty", "cnn", attrs("mean", axes=[]),
     ["op 'mean' (ReduceMean)", "attribute 'axes' is ()", "non-empty"]),
    ("reduce axes repeated", "cnn", attrs("mean", axes=[2, 2]),
     ["op 'mean' (ReduceMean)", "an axis is repeated"]),
    ("keepdims not a boolean", "cnn", attrs("mean", keepdims="yes"),
     ["op 'mean' (ReduceMean)", "attribute 'keepdims' is 'yes'", "allowed: true or false"]),
    ("concat output is not the sum", "cnn", port_shape_axis("concat", "outputs", 0, 1, 17),
     ["op 'concat' (Concat)", "output 0 axis 1 has size 17", "add up to 16"]),
    ("lstm units differ from width", "rnn", dim_size("lstm", "k", 8),
     ["op 'lstm' (LSTM)", "dim 'n' of size 16 and dim 'k' of size 8"]),
    ("lstm weight shape", "rnn", port_shape_axis("lstm", "weights", 0, 2, 16),
     ["op 'lstm' (LSTM)", "weight 0 has shape (2, 32, 16)", "(l, 2k, 4n) = (2, 32, 64)"]),
    ("embedding with three operands", "rnn",
     lambda d: _op(d, "embedding")["weights"].append(_op(d, "embedding")["weights"][1]),
     ["op 'embedding' (Embedding)", "reads exactly 2 tensors"]),
    ("ravel not contiguous", "rnn", op_field("flat_ravel", "contiguous", False),
     ["op 'flat_ravel' (Ravel)", "must be contiguous"]),
    ("fc without weight", "cnn", op_field("fc", "weights", []),
     ["op 'fc' (FC)", "has 0 weight(s); an FC has 1"]),
    ("graph cutoff negative", "cnn", lambda d: d["attrs"].update(cutoff=-1),
     ["graph 'cnn' attribute 'cutoff' is -1", "allowed: an integer >= 1"]),
]


def _write(tmp_path: Path, data: dict, name: str = "bad.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data))  # NaN and Infinity as JSON's common extension
    return path


def _bad_file(tmp_path: Path, case_id: str) -> Path:
    _, base, mutate, _ = next(c for c in BAD_GRAPHS if c[0] == case_id)
    data = _base(base)
    mutate(data)
    return _write(tmp_path, data)


@pytest.mark.parametrize("base", sorted(BASES))
def test_the_unbroken_graphs_load(base, tmp_path):
    assert pase.load_graph(str(_write(tmp_path, _base(base)))) == BASES[base]()


@pytest.mark.parametrize("case_id, base, mutate, words", BAD_GRAPHS, ids=[c[0] for c in BAD_GRAPHS])
def test_bad_graph_is_refused_on_load(case_id, base, mutate, words, tmp_path):
    data = _base(base)
    mutate(data)
    path = _write(tmp_path, data)
    with pytest.raises(GraphError) as info:
        pase.load_graph(str(path))
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"graph file {str(path)!r}: ")
    for word in words:
        assert word in message, f"{word!r} not in {message!r}"


@pytest.mark.parametrize("case_id", ["einsum letters are not the dims", "softmax axis 7",
                                     "pw a string", "no ops", "dim against port shape"])
def test_cli_gives_one_error_line(case_id, tmp_path, capsys):
    from pase.cli import main
    path = _bad_file(tmp_path, case_id)
    code = main(["solve", str(path), "-p", "4"])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert len(err.splitlines()) == 1 and err.startswith("pase: error: graph file "), err


def test_cli_file_errors(tmp_path, capsys):
    from pase.cli import main
    latin1 = tmp_path / "latin1.json"
    latin1.write_bytes('{"name": "café"}'.encode("latin-1"))
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 50_000 + "]" * 50_000)
    for path, words in ((latin1, "is not UTF-8 text"), (deep, "nests lists or objects too deeply")):
        code = main(["solve", str(path), "-p", "4"])
        out, err = capsys.readouterr()
        assert code == 2 and out == "" and len(err.splitlines()) == 1
        assert err.startswith(f"pase: error: graph file {str(path)!r} {words}"), err


def test_cli_exit_status_in_a_real_process(tmp_path):
    path = _bad_file(tmp_path, "softmax axis 7")
    run = subprocess.run([sys.executable, "-m", "pase", "solve", str(path), "-p", "4"],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 2 and run.stdout == ""
    assert run.stderr.count("\n") == 1 and run.stderr.startswith("pase: error: graph file ")
    assert "attribute 'axis' is 7; allowed: an integer axis in 0..3" in run.stderr


# -- the builder uses the same schema ------------------------------------------------------

def test_builder_refuses_bad_attributes_at_the_call():
    b = GraphBuilder("t")
    x = b.input((8, 4), names=("b", "k"))
    with pytest.raises(GraphError, match=r"op 'fc1' \(FC\) attribute 'pw' is -1; allowed: a finite"):
        b.fc(x, 4, pw=-1)
    with pytest.raises(GraphError, match=r"Softmax: axis 2 is out of range; allowed: integers in -2\.\.1"):
        b.softmax(x, axis=2)
    with pytest.raises(GraphError, match="Einsum 'bk,kn': not of the form"):
        b.einsum("bk,kn", x, b.input((4, 4), names=("k", "n")))
    with pytest.raises(GraphError, match="output letter 'z' is in neither operand"):
        b.einsum("bk,kn->bz", x, b.input((4, 4), names=("k", "n")))
    y = b.fc(x, 4, name="fc")
    assert b.build().op("fc").attrs["pw"] == 0
    with pytest.raises(GraphError, match="duplicate op name 'fc'"):
        b.fc(y, 4, name="fc")
    s = b.softmax(y, axis=-1, name="sm")
    assert b.build().op("sm").attrs["axis"] == 1 and s.shape == (8, 4)


@pytest.mark.parametrize("call, message", [
    (lambda b, x: b.pool(x, 3, 0), "Pooling stride is 0; allowed: an integer >= 1"),
    (lambda b, x: b.pool(x, (2, 2, 2)), r"Pooling window is \(2, 2, 2\); allowed"),
    (lambda b, x: b.conv(x, (8, 3, 3)), r"filters must be \(n, c, r, s\)"),
    (lambda b, x: b.conv(x, (8, 3, 3, 3), pad=-1), "Conv pad is -1; allowed: an integer >= 0"),
    (lambda b, x: b.conv(x, (8, 3, 3, 3), pw=float("nan")), "attribute 'pw' is nan"),
    (lambda b, x: b.fc(x, 0), r"op 'fc1' \(FC\) dim 'n' has size 0"),
    (lambda b, x: b.reduce_mean(x, (4,)), "ReduceMean: axis 4 is out of range"),
    (lambda b, x: b.concat([], axis=1), "Concat needs at least one input"),
])
def test_builder_arguments_give_graph_errors(call, message):
    b = GraphBuilder("t")
    with pytest.raises(GraphError, match=message):
        call(b, b.input((2, 3, 16, 16)))


def test_builder_stack_and_unstack_normalise_negative_axes():
    b = GraphBuilder("t", cutoff=1)
    x = b.fc(b.input((8, 4), names=("b", "k")), 4, name="fc")
    s = b.stack([x, x], axis=-1, name="stack")  # a new last axis, as numpy.stack
    assert s.shape == (8, 4, 2)
    parts = b.unstack(s, axis=-1, name="unstack")
    assert [p.shape for p in parts] == [(8, 4), (8, 4)]
    g = b.build()
    assert g.op("stack").attrs["axis"] == 2 and g.op("unstack").attrs["axis"] == 2


# -- reading attributes ---------------------------------------------------------------------

def test_attr_gives_defaults_and_checks_values():
    op = Op("e", "Elementwise", (Dim("b", 4),))
    assert attr(op, "pw") == 0
    assert attr(Op("n", "Norm", (Dim("b", 4),)), "axis") == 0
    with pytest.raises(GraphError, match=r"op 's' \(Softmax\) lacks attribute 'axis'"):
        attr(Op("s", "Softmax", (Dim("b", 4),)), "axis")
    with pytest.raises(GraphError, match="has no attribute 'eq'; an Elementwise has: pw"):
        attr(op, "eq")
    with pytest.raises(GraphError, match="attribute 'pw' is -2"):
        attr(Op("e", "Elementwise", (Dim("b", 4),), attrs={"pw": -2}), "pw")
    assert attr(Op("f", "FC", (), attrs={"pw": 2.5}), "pw") == 2.5  # fractional: an average


@pytest.mark.parametrize("eq, parts", [
    ("ab,bc->ac", ("ab", "bc", "ac")),
    (" bhlk , bhmk -> bhlm ", ("bhlk", "bhmk", "bhlm")),
    ("ab,ab->", ("ab", "ab", "")),
    ("ab,ab->ab", ("ab", "ab", "ab")),
])
def test_parse_einsum(eq, parts):
    assert parse_einsum(eq) == parts


@pytest.mark.parametrize("eq, why", [
    ("ab,bc", "not of the form"), ("a,b,c->abc", "not of the form"), ("a1,1b->ab", "not of the form"),
    ("aab,bc->ac", "appears twice in operand 1"), ("ab,bc->aac", "appears twice in the output"),
    ("ab,bc->ad", "output letter 'd' is in neither operand"),
    ("ab,bc->c", "letter 'a' appears only in operand 1"),
])
def test_parse_einsum_refuses(eq, why):
    with pytest.raises(ValueError, match=why):
        parse_einsum(eq)


def test_cost_models_know_exactly_the_schema_kinds():
    from pase.cost_models.paper import LAYER_COSTS
    from pase.work.ops import KNOWN_KINDS
    assert set(LAYER_COSTS) == set(OP_SCHEMAS) == set(KNOWN_KINDS)


def test_builtin_models_follow_the_schema():
    # Every kind appears in some built-in model, so each schema meets a real op; Resize
    # only in imported models (a U-Net, FCN), met in tests/test_torch_conv.py.
    seen = set()
    for name in MODELS.names():
        for op in MODELS.get(name)().ops:
            seen.add(op.kind)
    assert seen | {"Resize"} == set(OP_SCHEMAS)


# -- the docs agree with the table -----------------------------------------------------------

def _sections(text: str) -> dict[str, str]:
    parts = re.split(r"^## (.+)$", text, flags=re.M)
    return {parts[i].strip(): parts[i + 1] for i in range(1, len(parts), 2)}


def test_ops_doc_has_a_section_per_kind_listing_its_attributes():
    sections = _sections((DOCS / "ops.md").read_text())
    for kind, spec in OP_SCHEMAS.items():
        assert kind in sections, f"docs/ops.md has no section '## {kind}'"
        body = sections[kind]
        if not spec.attrs:
            assert "Attributes: none." in body, kind
        rows = {m.group(1): m.group(0) for m in re.finditer(r"^\| `(\w+)` \|.*$", body, re.M)}
        assert set(rows) == {a.name for a in spec.attrs}, kind
        for a in spec.attrs:
            row = rows[a.name]
            assert a.allowed() in row, (kind, a.name)
            default = list(a.default) if isinstance(a.default, tuple) else a.default
            assert ("required" in row) if a.required else (f"`{json.dumps(default)}`" in row), \
                (kind, a.name)
    assert set(sections) - set(OP_SCHEMAS) == {"Rules for every kind", "Model patterns"}


def test_graph_schema_doc_example_loads(tmp_path):
    text = (DOCS / "graph-schema.md").read_text()
    block = re.search(r"```json\n(.*?)```", text, re.S).group(1)
    path = tmp_path / "two-layer.json"
    path.write_text(block)
    g = pase.load_graph(str(path))
    assert [op.name for op in g.ops] == ["fc1", "fc2"] and g.attrs["cutoff"] == 4


def test_ops_doc_example_messages_are_real():
    # The messages quoted in docs/ops.md are exactly the ones pase gives for this graph.
    b = GraphBuilder("attn")
    x = b.input((8, 1024, 64), names=("b", "l", "e"))
    q = b.einsum("ble,ef->blf", x, b.input((64, 64), names=("e", "f")), name="proj")
    b.softmax(b.einsum("blf,bmf->blm", q, q, name="scores"), axis=2, name="softmax")
    good = b.build().to_dict()
    text = (DOCS / "ops.md").read_text()
    quoted = re.search(r"```\n(op .*?)```", text, re.S).group(1).splitlines()
    got = []
    for mutate in (attrs("softmax", axis=7), attrs("proj", pw=-1), dim_size("scores", "l", 2048)):
        data = copy.deepcopy(good)
        mutate(data)
        with pytest.raises(GraphError) as info:
            Graph.from_dict(data)
        got.append(str(info.value))
    assert quoted == got


def test_ports_are_checked_with_json_types(tmp_path):
    # A port listing its dims as plain strings would silently split by letters.
    data = _base("cnn")
    _op(data, "fc")["inputs"][0]["dims"] = ["b", "k"]
    with pytest.raises(GraphError, match=r"op 'fc' \(ops\[6\]\) inputs\[0\] \"dims\"\[0\] must be a list"):
        pase.load_graph(str(_write(tmp_path, data)))


def test_numbers_for_ports_and_dims_can_be_numpy():
    np = pytest.importorskip("numpy")
    op = Op("sm", "Softmax", (Dim("b", np.int64(4)),), inputs=(Port((np.int64(4),), (("b",),)),),
            outputs=(Port((4,), (("b",),)),), attrs={"axis": np.int64(0)})
    g = Graph("g", [op])
    assert json.loads(g.to_json())["ops"][0]["attrs"] == {"axis": 0}


# Values a careless or hostile graph file might hold anywhere.
_JUNK = [-1, 0, 1, 2, 7, 2**60, 10**30, 10**400, -(10**400), "x", "", None, [], {}, True, False, 1.5, float("nan"),
         float("inf"), [1, 2], [0, 0], [[]], ["b"], {"op": "conv"}, "abc,cd->abd"]


def _paths(x, path=()):
    yield path
    if isinstance(x, dict):
        for k, v in x.items():
            yield from _paths(v, path + (k,))
    elif isinstance(x, list):
        for i, v in enumerate(x):
            yield from _paths(v, path + (i,))


@pytest.mark.parametrize("base, tries", [("cnn", 400), ("rnn", 400), ("transformer", 100)])
def test_random_damage_gives_a_graph_or_a_one_line_graph_error(base, tries):
    """Replace or delete random fields: never a traceback, never the catch-all message."""
    import random
    rng = random.Random(1234)
    good = _base(base)
    paths = list(_paths(good))[1:]
    for _ in range(tries):
        data = copy.deepcopy(good)
        for _ in range(rng.choice((1, 2))):
            *parents, last = rng.choice(paths)
            target = data
            try:
                for key in parents:
                    target = target[key]
                if isinstance(target, dict) and rng.random() < 0.2:
                    del target[last]
                else:
                    target[last] = copy.deepcopy(rng.choice(_JUNK))
            except (KeyError, IndexError, TypeError):
                pass  # an earlier change removed the path
        try:
            Graph.from_dict(data)
        except GraphError as exc:
            assert "\n" not in str(exc) and "malformed graph JSON" not in str(exc), str(exc)


@pytest.mark.parametrize("model, option, value", [
    ("alexnet", "batch", 0), ("resnet101", "classes", -1), ("inception_v3", "batch", 0),
    ("rnnlm", "layers", 0), ("transformer", "heads", 0), ("mlp", "width", True),
    ("chain", "length", 2.5), ("fork-join", "branches", 0), ("random", "size", 0),
    ("random", "seed", -1),
])
def test_model_options_out_of_range_are_option_errors(model, option, value):
    from pase.errors import OptionError
    with pytest.raises(OptionError, match=f"model '{model}' option {option} must be an integer "
                                          f">= {0 if option == 'seed' else 1}, got {value!r}"):
        MODELS.get(model)(**{option: value})


# -- the zoo's kinds and attributes --------------------------------------------------------

def _moe_graph():
    b = GraphBuilder("moe", cutoff=1)
    x = b.fc(b.input((2, 8, 4), names=("b", "l", "k")), 4, name="x")
    gates = b.top_k(b.fc(x, 4, name="router"), k=2, axis=2, name="gates")
    buf = b.moe_dispatch(x, gates, capacity=4, k=2, name="dispatch")
    b.moe_combine(buf, gates, k=2, name="combine")
    return b.build()


@pytest.mark.parametrize("mutate, words", [
    (attrs("gates", k=9), "op 'gates' (TopK) has k=9 but dim 'k' has size 4"),
    (attrs("dispatch", k=5), "op 'dispatch' (MoEDispatch) has k=5 but 4 experts (dim 'x')"),
    (attrs("x", act="swish"), "op 'x' (FC) attribute 'act' is 'swish'; allowed: one of relu, gelu"),
    (attrs("x", bias=True), "op 'x' (FC) has 1 weight(s) and bias: true"),
    (attrs("x", tied=""), "op 'x' (FC) attribute 'tied' is ''; allowed: the name of another op"),
])
def test_zoo_attributes_are_checked(mutate, words):
    data = _moe_graph().to_dict()
    mutate(data)
    with pytest.raises(GraphError, match=re.escape(words)):
        Graph.from_dict(data)


def test_expert_role_and_new_kinds_round_trip():
    g = _moe_graph()
    assert Graph.from_json(g.to_json()) == g
    assert g.op("dispatch").dims[0].role == "expert"
    assert g.op("gates").pinned == {"k"} and g.op("dispatch").pinned == {"c"}


@pytest.mark.parametrize("build, words", [
    (lambda b, x: b.rotary(b.fc(x, 5)), "a rotary embedding rotates pairs of features"),
    (lambda b, x: b.elementwise(x, x, fn="rotary"), "a rotary embedding reads one input"),
    (lambda b, x: b.elementwise(x, fn="mul"), "a product needs at least 2 inputs"),
    (lambda b, x: b.softmax(x, axis=0, causal=True), "a causal softmax runs along its last axis"),
    (lambda b, x: b.slice(x, axis=1, start=2, stop=9), "allowed: 0 <= start < stop <= 4"),
    (lambda b, x: b.norm(x, weights=2, rms=True), "an RMSNorm has a scale and no shift"),
])
def test_zoo_structure_rules(build, words):
    b = GraphBuilder("g", cutoff=1)
    x = b.fc(b.input((2, 6), names=("b", "k")), 4, name="x")
    with pytest.raises(GraphError, match=re.escape(words)):
        build(b, x)

"""pase.from_torch on the indexing, padding and small ops of real models (Swin, DLRM,
OPT, MobileNet, Whisper): index, index_select, gather, scatter, embedding_bag, pad,
roll, cumsum, fill_, in-place aliases, hardswish and dropout.

Expected values come from torch: the unique parameters' ``numel()``, FlopCounterMode's
matrix-product FLOP, and the shapes torch computes.
"""
import math
import warnings

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import pase  # noqa: E402
from pase.counts import counts  # noqa: E402
from pase.frontends.torch import ModelImportError, import_torch  # noqa: E402


def torch_flops(model, args):
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter, torch.no_grad():
        model(*args)
    return counter.get_total_flops()


def check(model, args, relaid=()):
    """Import ``model`` (no warning: nothing approximated); parameters, counted FLOP and a
    dp solve against torch. ``relaid``: the re-layouts (Ravel + Unravel) expected."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        imp = import_torch(model, args)
    assert not [w for w in caught if "pase.from_torch" in str(w.message)]
    assert len(imp.relayouts) == len(relaid)
    assert all(s in m for s, m in zip(relaid, imp.relayouts))
    unique = sum({id(p): p.numel() for p in model.parameters()}.values())
    assert counts(imp.graph).parameters == unique
    by_op = counts(imp.graph).by_op()
    counted = sum(by_op[op.name].matmul_flops for op in imp.graph.ops if imp.ops[op.name].counted)
    assert counted == pytest.approx(torch_flops(model, args), rel=1e-12)
    strategy = pase.solve(imp.graph, devices=8, cost_model="alpha-beta")
    assert strategy.solution.status.value == "optimal"
    return imp


def kinds(imp):
    return [op.kind for op in imp.graph.ops]


def op_of(imp, aten):
    return next(op for op in imp.graph.ops if aten in imp.ops[op.name].aten)


def roles(op, port):
    by_name = {d.name: d for d in op.dims}
    return [[by_name[n].role for n in axis] for axis in port.dims]


# -- in-place aliases, activations, dropout -----------------------------------------------

class Head(nn.Module):  # MobileNet-V3's classifier: in-place hardswish and dropout
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(16, 32), nn.Linear(32, 4)
        self.act, self.drop = nn.Hardswish(inplace=True), nn.Dropout(0.2, inplace=True)

    def forward(self, x):
        y = self.drop(self.act(self.a(x)))
        return self.b(nn.functional.relu_(y).add_(1.0).mul_(y))


def test_in_place_ops_are_their_out_of_place_ops():
    model = Head().eval()
    imp = check(model, (torch.randn(8, 16),))
    assert kinds(imp) == ["Einsum", "Elementwise", "Elementwise", "Einsum"]
    act = op_of(imp, "hardswish_")
    # hardswish: silu's weight (3 x 4 FLOP per element); relu_, add_ fold into it; mul_ is
    # a product of two activations, its own op
    assert act.attrs["pw"] == 3 * 4 - 1 + 3 * 1 + 1
    assert imp.ops[imp.graph.ops[2].name].aten == ["mul_"]


def test_hardsigmoid_and_mish_are_activations():
    model = nn.Sequential(nn.Linear(8, 8), nn.Hardsigmoid(), nn.Linear(8, 8), nn.Mish())
    imp = check(model, (torch.randn(4, 8),))
    assert [op.attrs.get("pw") for op in imp.graph.ops if op.kind == "Elementwise"] == [2, 11]


# -- index of a parameter: the whole table --------------------------------------------------

class RelativeBias(nn.Module):  # Swin's window attention with its relative-position bias
    def __init__(self, heads=3, window=7, width=12):
        super().__init__()
        self.heads, self.n = heads, window * window
        self.table = nn.Parameter(torch.randn((2 * window - 1) ** 2, heads))
        self.register_buffer("index", torch.randint(0, (2 * window - 1) ** 2, (self.n ** 2,)))
        self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)

    def forward(self, x):
        b, n, c = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        attn = q @ k.transpose(-2, -1)
        bias = self.table[self.index].view(n, n, -1).permute(2, 0, 1).contiguous().unsqueeze(0)
        out = ((attn + bias).softmax(-1) @ v).transpose(1, 2).reshape(b, n, c)
        return self.proj(out)


def test_parameter_indexed_by_constants_is_its_whole_table():
    imp = check(RelativeBias(), (torch.randn(4, 49, 12),))
    add = op_of(imp, "add")
    assert add.kind == "Elementwise" and len(add.weights) == 1
    (weight,) = add.weights
    assert math.prod(weight.shape) == 169 * 3  # the table, not the 49 x 49 x 3 it fans out to
    mapped = [r for r in roles(add, weight) if r]
    assert mapped == [["heads"]]  # the rows map to no dim: no op has a dim of 169
    assert not any(d.size == 169 for op in imp.graph.ops for d in op.dims)


class Positions(nn.Module):  # Whisper's decoder: a table of 448 positions, 32 used
    def __init__(self):
        super().__init__()
        self.positions = nn.Parameter(torch.randn(448, 16))
        self.fc = nn.Linear(16, 16)

    def forward(self, x):
        pos = torch.arange(x.shape[1]).unsqueeze(0).repeat(x.shape[0], 1)
        return self.fc(x + self.positions[pos])


class LearnedPositions(nn.Module):  # GPT-2's wpe: an nn.Embedding longer than the sequence
    def __init__(self):
        super().__init__()
        self.wpe, self.fc = nn.Embedding(1024, 16), nn.Linear(16, 16)

    def forward(self, x):
        return self.fc(x + self.wpe(torch.arange(x.shape[1])))


@pytest.mark.parametrize("model", [Positions(), LearnedPositions()], ids=["index", "embedding"])
def test_a_longer_position_table_is_an_add_weight_with_its_rows_unmapped(model):
    imp = check(model, (torch.randn(2, 32, 16),))
    assert kinds(imp) == ["Elementwise", "Einsum"]
    add = imp.graph.ops[0]
    rows = model.state_dict()[next(iter(model.state_dict()))].shape[0]
    assert add.weights[0].shape == (rows, 16) and add.weights[0].dims[0] == ()
    assert [d.size for d in add.dims] == [2, 32, 16]


def test_parameter_indexed_by_the_inputs_is_an_embedding():
    class Lookup(nn.Module):
        def __init__(self):
            super().__init__()
            self.table, self.fc = nn.Parameter(torch.randn(100, 16)), nn.Linear(16, 4)

        def forward(self, ids):
            return self.fc(self.table[ids])
    imp = check(Lookup(), (torch.randint(0, 100, (2, 8)),))
    assert kinds(imp) == ["Embedding", "Einsum"]


# -- index of an activation: a selection along one axis -----------------------------------

class Interactions(nn.Module):  # DLRM's feature interactions: dots[:, i, j]
    def __init__(self):
        super().__init__()
        self.fcs = nn.ModuleList(nn.Linear(8, 8) for _ in range(5))
        self.top = nn.Linear(10, 1)

    def forward(self, x):
        z = torch.stack([fc(x) for fc in self.fcs], dim=1)
        dots = torch.bmm(z, z.transpose(1, 2))
        i, j = torch.triu_indices(5, 5, offset=1)
        return self.top(dots[:, i, j])


def test_activation_indexed_on_two_axes_is_a_slice_of_their_product():
    imp = check(Interactions(), (torch.randn(4, 8),),
                relaid=["a slice of a merged axis was re-laid out"])
    assert kinds(imp)[-4:] == ["Ravel", "Unravel", "Slice", "Einsum"]  # (4, 5, 5) as (4, 25)
    pick = imp.graph.ops[-2]
    assert pick.kind == "Slice" and (pick.attrs["start"], pick.attrs["stop"]) == (0, 10)
    assert pick.inputs[0].shape == (4, 25) and pick.outputs[0].shape == (4, 10)
    assert pick.pinned == {pick.dims[pick.attrs["axis"]].name}


class Picks(nn.Module):
    def __init__(self, how):
        super().__init__()
        self.how, self.fc = how, nn.Linear(16, 16)
        self.register_buffer("few", torch.tensor([3, 1, 4]))
        self.register_buffer("all", torch.randperm(6))
        self.register_buffer("many", torch.randint(0, 6, (15,)))

    def forward(self, x):
        y = self.fc(x)  # (2, 6, 16)
        if self.how == "index_select":
            return torch.index_select(y, 1, self.few)
        if self.how == "permutation":
            return y[:, self.all]
        if self.how == "repeats":
            return y[:, self.many]
        return torch.gather(y, 1, self.all.view(1, 6, 1).expand(2, 6, 16))


@pytest.mark.parametrize("how,expect", [
    ("index_select", ["Einsum", "Slice"]),
    ("permutation", ["Einsum", "Elementwise"]),
    ("gather", ["Einsum", "Elementwise"]),
    ("repeats", ["Einsum", "Concat", "Slice", "Concat"]),
])
def test_a_pick_along_one_axis(how, expect):
    model = Picks(how)
    x = torch.randn(2, 6, 16)
    imp = check(model, (x,))
    assert kinds(imp) == expect
    last = imp.graph.ops[-1]
    assert last.outputs[0].shape == tuple(model(x).shape)
    axis = next(i for i, s in enumerate(last.outputs[0].shape) if s == model(x).shape[1])
    assert last.dims[1].name in last.pinned or last.kind in ("Slice", "Concat")
    assert axis == 1


def test_a_gather_with_other_sizes_is_refused_in_one_line():
    class Bad(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(16, 16)

        def forward(self, x):
            return torch.gather(self.fc(x), 1, torch.zeros(2, 3, 4, dtype=torch.long))
    with pytest.raises(ModelImportError, match=r"gather at .*dim 1.*allowed: equal sizes"):
        import_torch(Bad(), (torch.randn(2, 6, 16),))


# -- scatter -------------------------------------------------------------------------------

class Scatters(nn.Module):
    def __init__(self, into):
        super().__init__()
        self.into, self.gc = into, nn.Linear(16, 16)
        self.fc = nn.Linear(16, 16) if into == "activation" else None
        self.register_buffer("where", torch.tensor([0, 2, 5]).view(1, 3, 1).expand(2, 3, 16))

    def forward(self, x, y):  # x (2, 6, 16), y (2, 3, 16)
        src = self.gc(y)
        if self.into == "zeros":
            return torch.zeros(2, 6, 16).scatter(1, self.where, src)
        return self.fc(x).scatter_add(1, self.where, src)


@pytest.mark.parametrize("into,expect", [("zeros", ["Einsum", "Concat"]),
                                         ("activation", ["Einsum", "Einsum", "Concat",
                                                         "Elementwise"])])
def test_scatter_is_a_pick_in_reverse(into, expect):
    imp = check(Scatters(into), (torch.randn(2, 6, 16), torch.randn(2, 3, 16)))
    assert kinds(imp) == expect  # 3 entries spread over 6: twice the source, concatenated
    spread = next(op for op in imp.graph.ops if op.kind == "Concat")
    assert [p.shape for p in spread.inputs] == [(2, 3, 16)] * 2
    assert imp.graph.ops[-1].outputs[0].shape == (2, 6, 16)
    if into == "activation":  # then added to the target
        assert imp.graph.ops[-1].attrs.get("fn", "add") == "add"


# -- embedding_bag -----------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_embedding_bag_is_a_lookup_then_a_sum_over_each_bag(mode):
    class Bags(nn.Module):
        def __init__(self):
            super().__init__()
            self.bag, self.fc = nn.EmbeddingBag(100, 16, mode=mode), nn.Linear(16, 4)

        def forward(self, ids):
            return self.fc(self.bag(ids))
    imp = check(Bags(), (torch.randint(0, 100, (8, 3)),))
    assert kinds(imp) == ["Embedding", "ReduceMean", "Einsum"]
    emb = imp.graph.ops[0]
    assert not imp.ops[emb.name].counted  # torch counts a lookup as no FLOP; so does pase
    assert counts(imp.graph).by_op()[emb.name].matmul_flops == 0
    assert counts(imp.graph).matmul_flops == torch_flops(Bags(), (torch.randint(0, 100, (8, 3)),))
    assert {d.role for d in emb.dims if d.size == 100} == {"vocabulary"}
    assert imp.graph.ops[1].outputs[0].shape == (8, 16)


def test_embedding_bags_of_columns_of_an_integer_input_read_the_input():
    class Tables(nn.Module):  # DLRM's sparse features: table i reads sparse[:, i]
        def __init__(self):
            super().__init__()
            self.tables = nn.ModuleList(nn.EmbeddingBag(n, 8) for n in (50, 30))
            self.fc = nn.Linear(16, 1)

        def forward(self, sparse):
            return self.fc(torch.cat([t(sparse[:, i]) for i, t in enumerate(self.tables)], 1))
    imp = check(Tables(), (torch.randint(0, 30, (4, 2, 3)),))
    # no Slice of the integer ids is left hanging: the one-hot weights read them
    assert kinds(imp) == ["Embedding", "ReduceMean", "Embedding", "ReduceMean", "Concat",
                          "Einsum"]


def test_embedding_bag_with_bags_of_several_sizes_is_refused_in_one_line():
    class Ragged(nn.Module):
        def __init__(self):
            super().__init__()
            self.bag = nn.EmbeddingBag(100, 16)

        def forward(self, ids, offsets):
            return self.bag(ids, offsets)
    with pytest.raises(ModelImportError, match="embedding_bag .*allowed: bags of one size"):
        import_torch(Ragged(), (torch.randint(0, 100, (10,)), torch.tensor([0, 3, 7])))


# -- pad, roll, cumsum, fill_ ------------------------------------------------------------------

class Shifted(nn.Module):  # Swin's shifted windows: pad, roll, a mask filled in place
    def __init__(self, pad):
        super().__init__()
        self.pad, self.fc, self.out = pad, nn.Linear(16, 16), nn.Linear(16, 16)

    def forward(self, x):  # (b, h, w, c)
        y = nn.functional.pad(self.fc(x), (0, 0, 0, self.pad, 0, self.pad))
        y = torch.roll(y, shifts=(-3, -3), dims=(1, 2))
        mask = y.new_zeros(y.shape[1], y.shape[2])
        mask[:-3, :-3] = 1.0
        return self.out(y + mask.unsqueeze(-1))


def test_a_zero_pad_is_nothing_and_a_roll_pins_its_axes():
    imp = check(Shifted(0), (torch.randn(2, 8, 8, 16),))
    assert kinds(imp) == ["Einsum", "Elementwise", "Elementwise", "Einsum"]  # roll, + mask
    roll = imp.graph.ops[1]
    assert sorted(d.size for d in roll.dims if d.name in roll.pinned) == [8, 8]
    assert imp.ops[roll.name].aten[0] == "roll"


def test_a_pad_is_a_concat_of_the_input_and_slices_of_it():
    imp = check(Shifted(3), (torch.randn(2, 8, 8, 16),))
    assert kinds(imp) == ["Einsum", "Slice", "Concat", "Slice", "Concat", "Elementwise",
                          "Elementwise", "Einsum"]
    cats = [op for op in imp.graph.ops if op.kind == "Concat"]
    assert [op.outputs[0].shape for op in cats] == [(2, 8, 11, 16), (2, 11, 11, 16)]
    assert all(not op.weights for op in cats)  # no constant block counted as a parameter


def test_cumsum_pins_its_axis_and_of_constants_is_a_constant():
    class Scan(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(16, 16)

        def forward(self, x):
            positions = torch.cumsum(torch.ones(x.shape[:2]), dim=1)  # OPT's positions
            return torch.cumsum(self.fc(x), dim=1) * positions.unsqueeze(-1)
    imp = check(Scan(), (torch.randn(2, 8, 16),))
    assert kinds(imp) == ["Einsum", "Elementwise"]
    scan = imp.graph.ops[1]
    assert [d.size for d in scan.dims if d.name in scan.pinned] == [8]

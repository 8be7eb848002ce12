"""Rows of a table read at constant indices (positions, token types) are part of the
table, and the import checks each product's FLOP against torch's counter.

Expected values come from torch: ``numel()`` of the unique parameters and
``FlopCounterMode`` on the module itself. The old rule (a table read at fewer
positions than its rows kept its row count as an extra dim of every op after it)
is put back in one test to show that the import's FLOP check refuses its graph.
"""
import math

import pytest

torch = pytest.importorskip("torch")

import pase  # noqa: E402
from pase.counts import counts  # noqa: E402
from pase.frontends import torch_layout  # noqa: E402
from pase.frontends.torch import ModelImportError, import_torch  # noqa: E402


class Positions(torch.nn.Module):
    """Tokens, learned positions (``rows`` of them, ``arange(seq)`` read), token types
    (``types`` rows, all ids 0, as BERT's buffer), a projection; ``tied``: an LM head
    sharing the token table."""

    def __init__(self, rows=64, types=0, tied=False, vocab=50, width=16):
        super().__init__()
        self.wte = torch.nn.Embedding(vocab, width)
        self.wpe = torch.nn.Embedding(rows, width)
        self.types = torch.nn.Embedding(types, width) if types else None
        self.fc = torch.nn.Linear(width, 4 * width)
        self.head = torch.nn.Linear(4 * width, vocab, bias=False) if not tied else None
        self.back = torch.nn.Linear(4 * width, width) if tied else None

    def forward(self, ids):
        seq = ids.shape[1]
        x = self.wte(ids) + self.wpe(torch.arange(seq))
        if self.types is not None:
            x = x + self.types(torch.zeros_like(ids))
        h = self.fc(x)
        if self.back is not None:
            return self.back(h) @ self.wte.weight.t()
        return self.head(h)


def torch_flops(model, args):
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        model(*args)
    return counter.get_total_flops()


def product_flops(imp):
    by_op = counts(imp.graph).by_op()
    return sum(by_op[op.name].matmul_flops for op in imp.graph.ops if imp.ops[op.name].counted)


CASES = {"table as long as the sequence": dict(rows=16),
         "table longer than the sequence": dict(rows=1024),
         "with token types": dict(rows=512, types=2),
         "tied head": dict(rows=100, tied=True)}


@pytest.mark.parametrize("case", list(CASES))
def test_counts_are_torchs(case):
    model = Positions(**CASES[case])
    ids = torch.randint(0, 50, (2, 16))
    imp = import_torch(model, (ids,))
    assert pase.counts.parameters(imp.graph) == sum(
        {id(p): p.numel() for p in model.parameters()}.values())
    assert product_flops(imp) == pytest.approx(torch_flops(model, (ids,)), rel=1e-12)
    sizes = {d.size for op in imp.graph.ops for d in op.dims}
    rows = CASES[case]["rows"]
    assert (rows in sizes) == (rows == 16)  # only a table read row for row keeps a dim


def test_longer_table_is_one_weight_with_its_rows_unsplit():
    imp = import_torch(Positions(rows=1024), (torch.randint(0, 50, (2, 16)),))
    add = imp.graph.op("add")
    assert add.weights[0].shape == (1024, 16)
    assert add.weights[0].dims[0] == ()                   # the rows: never split
    assert add.weights[0].dims[1] == (add.dims[-1].name,)  # the width: the op's last dim
    strategy = pase.solve(imp.graph, devices=8, cost_model="alpha-beta")
    assert math.isfinite(strategy.total_cost)


def _old_trailing(w, x, y):
    """The rule before the fix: a parameter aligned leaf by leaf with the trailing dims,
    else None (and the caller falls back to a product that keeps the table's rows)."""
    atoms = w.atoms
    dims, leaves = x.leaves(atoms), y.leaves(atoms)
    if len(leaves) > len(dims):
        return None
    raw = []
    for leaf, dim in zip(leaves, dims[len(dims) - len(leaves):]):
        if atoms.find(leaf) == atoms.find(dim):
            raw.append((atoms.size[leaf], leaf))
        elif atoms.size[leaf] == 1:
            raw.append((1, None))
        else:
            return None
    return raw


def test_the_flop_check_refuses_the_old_rule(monkeypatch):
    monkeypatch.setattr(torch_layout, "_trailing", _old_trailing)
    with pytest.raises(ModelImportError, match=r"matrix-product FLOP of aten\.linear at .* are "
                                               r".* in pase .* \(1024x torch's\)"):
        import_torch(Positions(rows=1024), (torch.randint(0, 50, (2, 16)),))

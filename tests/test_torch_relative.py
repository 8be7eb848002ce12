"""Relative-position attention as DeBERTa writes it: a projection of a learned position
table (a product of two parameters), scores against it gathered per query
(``c2p``) and a transposed ``p2c`` added to them, which reads the one sequence atom
as both the query and the key axis. And a product with a buffer. Counts from torch."""
import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402
from torch_counts import check_import  # noqa: E402  (tests/ is on sys.path)

check = check_import


class Relative(nn.Module):
    """DeBERTa's disentangled attention, one head, without the scaling."""

    def __init__(self, e=16, span=4):
        super().__init__()
        self.span = span
        self.q, self.k, self.v = nn.Linear(e, e), nn.Linear(e, e), nn.Linear(e, e)
        self.rel = nn.Parameter(torch.randn(2 * span, e))
        self.pos_k, self.pos_q = nn.Linear(e, e), nn.Linear(e, e)

    def forward(self, x):
        b, n, _ = x.shape
        q, k, v = self.q(x), self.k(x), self.v(x)
        pos_k, pos_q = self.pos_k(self.rel), self.pos_q(self.rel)   # (2 span, e): weights only
        i = torch.arange(n)
        rel = (i[:, None] - i[None, :]).clamp(-self.span, self.span - 1) + self.span
        index = rel.unsqueeze(0).expand(b, n, n)
        c2p = torch.gather(q @ pos_k.T, -1, index)                  # (b, query, key)
        p2c = torch.gather(k @ pos_q.T, -1, index).transpose(-1, -2)
        scores = q @ k.transpose(-1, -2) + c2p + p2c
        return scores.softmax(-1) @ v


@pytest.mark.parametrize("n", [8, 12])  # a gather of as many entries as the table's rows; more
def test_relative_position_attention_imports_with_torchs_counts(n):
    imp = check(Relative(), torch.randn(2, n, 16))
    # the table's projections read no activation: both operands are weights, the table
    # held once (the second projection tied to the first)
    first, second = (imp.graph.op(name) for name in ("pos_k", "pos_q"))
    assert first.inputs == () and len(first.weights) == 3  # table, weight, bias
    assert second.attrs["tied"] == "pos_k"
    for op in imp.graph.ops:  # every op reads each of its dims once
        for port in op.inputs + op.weights + op.outputs:
            names = [d for axis in port.dims for d in axis]
            assert len(names) == len(set(names)), (op.name, port)


def test_the_transposed_term_is_read_as_the_other_axis():
    imp = check(Relative(), torch.randn(2, 8, 16))
    softmax = next(op for op in imp.graph.ops if op.kind == "Softmax")
    query, key = (d for d in softmax.dims if d.size == 8)
    assert query.name != key.name and query.role == key.role == "sequence"
    # c2p + p2c.T: one operand read transposed, no product
    (crossed,) = [op for op in imp.graph.ops if op.kind == "Einsum" and not imp.ops[op.name].counted]
    lhs, out = crossed.attrs["eq"].split("->")
    x, y = lhs.split(",")
    assert x == out and y == out[:-2] + out[-1] + out[-2]


class Buffered(nn.Module):
    """A product with a fixed matrix (a buffer): the buffer is no parameter."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.register_buffer("basis", torch.randn(8, 6))

    def forward(self, x):
        return self.fc(x) @ self.basis


def test_a_product_with_a_buffer_reads_it_as_an_input():
    imp = check(Buffered(), torch.randn(4, 8))
    op = imp.graph.ops[-1]
    assert op.kind == "Einsum" and len(op.inputs) == 2 and op.weights == ()
    assert op.inputs[1].source is None and op.inputs[1].shape == (8, 6)

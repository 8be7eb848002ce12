"""Random views between two products: the importer's graph stays valid and exact.

A linear layer's output is viewed as a random factorisation of its features,
permuted at random, and reshaped back before a second linear layer (or read
directly by a batched product). Whatever the views, the graph must validate, count
the parameters exactly and match torch's matrix-product FLOP, and solve.
"""
import math

import pytest

torch = pytest.importorskip("torch")
hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import pase  # noqa: E402
import pase.counts  # noqa: E402
from pase.frontends.torch import import_torch  # noqa: E402


class Viewed(torch.nn.Module):
    def __init__(self, width, factors, order, head_product, tokens):
        super().__init__()
        self.factors, self.order, self.head_product = factors, order, head_product
        self.tokens = tokens
        features = math.prod(factors)
        self.a = torch.nn.Linear(width, features)
        self.b = torch.nn.Linear(features, width)

    def forward(self, x):
        b, t, _ = x.shape
        h = self.a(x).view(b, t, *self.factors)
        h = h.permute(0, 1, *[2 + i for i in self.order])
        if self.head_product and len(self.factors) >= 2:
            h = torch.relu(h @ h.transpose(-1, -2)).sum(-1, keepdim=True) * h
        h = h.permute(0, 1, *[2 + self.order.index(i) for i in range(len(self.order))])
        if self.tokens:  # batch and sequence merged, then split again
            return self.b(h.reshape(b * t, -1)).view(b, t, -1)
        return self.b(h.reshape(b, t, -1))


@settings(max_examples=16, deadline=None, derandomize=True)
@given(st.lists(st.sampled_from([2, 3, 4]), min_size=1, max_size=3), st.randoms(),
       st.booleans(), st.booleans())
def test_random_views_keep_the_graph_exact(factors, rnd, head_product, tokens):
    order = list(range(len(factors)))
    rnd.shuffle(order)
    torch.manual_seed(0)
    model = Viewed(8, factors, order, head_product, tokens)
    x = torch.randn(2, 4, 8)
    imp = import_torch(model, (x,))
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        model(x)
    products = sum(math.prod(d.size for d in op.dims) for op in imp.graph.ops
                   if imp.ops[op.name].counted)
    assert products == counter.get_total_flops() / 2
    assert pase.counts.parameters(imp.graph) == sum(p.numel() for p in model.parameters())
    assert pase.solve(imp.graph, devices=4).total_cost > 0
    for op in imp.graph.ops:  # the batch is followed through every view
        assert [d.size for d in op.dims if d.role == "batch"] == [2], op

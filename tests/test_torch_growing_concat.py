"""DenseNet's growing feature lists: ``cat(features)`` after ``cat(features[:-1])``
imports as the earlier concatenation's output and the new feature, so each feature
map has one concatenation reading it and the dp's dependent sets stay small."""
import pytest

torch = pytest.importorskip("torch")

import pase  # noqa: E402
from pase.frontends.torch import import_torch  # noqa: E402


class Block(torch.nn.Module):
    """A dense block as torchvision writes it: each layer reads the concatenation of
    every feature map so far and adds its own."""

    def __init__(self, layers=8, channels=8, growth=4):
        super().__init__()
        self.convs = torch.nn.ModuleList(
            torch.nn.Conv2d(channels + i * growth, growth, 3, padding=1) for i in range(layers))

    def forward(self, x):
        features = [x]
        for conv in self.convs:
            features.append(torch.relu(conv(torch.cat(features, 1))))
        return torch.cat(features, 1)


def test_each_concatenation_reads_the_last_one_and_one_new_map():
    model = Block()
    x = torch.randn(2, 8, 8, 8)
    graph = import_torch(model, (x,)).graph
    cats = [op for op in graph.ops if op.kind == "Concat"]
    assert len(cats) == 9  # one per layer (the first concatenates x alone), one at the end
    assert [len(op.inputs) for op in cats] == [1] + [2] * 8
    assert cats[-1].outputs[0].shape == tuple(model(x).shape)
    strategy = pase.solve(graph, devices=8, cost_model="alpha-beta")
    assert strategy.solution.status.value == "optimal"

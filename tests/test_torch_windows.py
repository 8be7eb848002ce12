"""Swin's window attention as torchvision writes it: strided slices (patch merging),
a softmax over a window's 7 x 7 tokens merged into 49 met by the values' 7 x 7, and a
residual add of windows put back (8 x 7 rows) onto a rolled 56. Counts from torch."""
import math

import pytest

torch = pytest.importorskip("torch")

import pase  # noqa: E402
from pase.counts import counts  # noqa: E402
from pase.frontends.torch import import_torch  # noqa: E402


class Windows(torch.nn.Module):
    def __init__(self, width=8, window=4):
        super().__init__()
        self.window = window
        self.qkv = torch.nn.Linear(width, 3 * width)
        self.merge = torch.nn.Linear(4 * width, 2 * width)

    def forward(self, x):                                    # (b, h, w, c)
        b, h, w, c = x.shape
        s = self.window
        shifted = torch.roll(x, shifts=(-1, -1), dims=(1, 2))
        win = shifted.view(b, h // s, s, w // s, s, c).permute(0, 1, 3, 2, 4, 5)
        win = win.reshape(-1, s * s, c)
        q, k, v = self.qkv(win).chunk(3, dim=-1)
        attn = torch.softmax(q @ k.transpose(-2, -1), dim=-1)
        out = (attn @ v).view(b, h // s, w // s, s, s, c).permute(0, 1, 3, 2, 4, 5)
        x = x + out.reshape(b, h, w, c)
        parts = [x[:, i::2, j::2, :] for i in (0, 1) for j in (0, 1)]   # patch merging
        return self.merge(torch.cat(parts, -1))


def test_window_attention_imports_with_torchs_counts():
    from torch.utils.flop_counter import FlopCounterMode

    model, x = Windows(), torch.randn(2, 16, 16, 8)
    imp = import_torch(model, (x,))
    assert pase.counts.parameters(imp.graph) == sum(p.numel() for p in model.parameters())
    with FlopCounterMode(display=False) as counter:
        model(x)
    by_op = counts(imp.graph).by_op()
    ours = sum(by_op[op.name].matmul_flops for op in imp.graph.ops if imp.ops[op.name].counted)
    assert ours == pytest.approx(counter.get_total_flops(), rel=1e-12)
    slices = [op for op in imp.graph.ops if op.kind == "Slice"]
    assert len(slices) == 8  # each strided slice: one pick per strided axis
    assert all(op.outputs[0].shape[op.attrs["axis"]] == 1 for op in slices)
    assert math.prod(imp.graph.ops[-1].outputs[0].shape) == 2 * 8 * 8 * 16
    strategy = pase.solve(imp.graph, devices=8, cost_model="alpha-beta")
    assert strategy.solution.status.value == "optimal"


class Stride(torch.nn.Module):
    def forward(self, x):
        return x[:, 1::3] * 2


def test_a_strided_slice_pase_cannot_follow_is_refused_naming_what_is_allowed():
    with pytest.raises(pase.PaseError, match=r"cannot import slice at .*a strided slice 1:10:3 "
                                              r"of an axis of 10 \(allowed: start < step"):
        import_torch(Stride(), (torch.randn(2, 10),))

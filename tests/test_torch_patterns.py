"""Patterns from models outside the real-model set (benchmarks/real_models.py --extra):
ceil-mode pooling (SqueezeNet, timm's ResNet-D), a layer applied twice with its bias
(ALBERT's shared layers), a channel shuffle after a concatenation (ShuffleNet), one
key/value head for every query head (Falcon's multi-query attention). Counts from torch."""
import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402
from torch_counts import check_import  # noqa: E402  (tests/ is on sys.path)

check = check_import


class CeilPool(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3)

    def forward(self, x):
        return F.avg_pool2d(F.max_pool2d(self.conv(x), 3, 2, ceil_mode=True), 2, ceil_mode=True)


def test_ceil_mode_pooling_has_torchs_output_sizes():
    imp = check(CeilPool(), torch.randn(2, 3, 16, 16))   # 14 -> 7 (ceil) -> 4 (ceil)
    pools = [op for op in imp.graph.ops if op.kind == "Pooling"]
    assert [op.outputs[0].shape[2:] for op in pools] == [(7, 7), (4, 4)]
    assert all(op.attrs["ceil_mode"] for op in pools)


class Shared(nn.Module):
    """One block applied twice, as ALBERT shares its layers."""

    def __init__(self):
        super().__init__()
        self.block = nn.Linear(16, 16)

    def forward(self, x):
        return self.block(torch.relu(self.block(x)))


def test_a_layer_applied_twice_counts_its_weight_and_bias_once():
    imp = check(Shared(), torch.randn(4, 16))
    first, second = [op for op in imp.graph.ops if op.kind == "Einsum"]
    assert second.attrs["tied"] == first.name and len(second.weights) == 1


class Shuffle(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Conv2d(4, 4, 1), nn.Conv2d(4, 4, 1)

    def forward(self, x):
        y = torch.cat([self.a(x), self.b(x)], 1)                       # (b, 8, h, w)
        y = y.view(2, 2, 4, 6, 6).transpose(1, 2).reshape(2, 8, 6, 6)  # channel shuffle
        return self.a(y[:, :4]) + self.b(y[:, 4:])


def test_a_channel_shuffle_after_a_concatenation_is_a_relayout():
    imp = check(Shuffle(), torch.randn(2, 4, 6, 6))
    assert any("re-laid out" in r or "Ravel" in r for r in imp.relayouts)


class MultiQuery(nn.Module):
    def __init__(self, heads=4, d=8):
        super().__init__()
        self.heads, self.d = heads, d
        self.qkv = nn.Linear(heads * d, (heads + 2) * d)

    def forward(self, x):
        b, n, _ = x.shape
        y = self.qkv(x).view(b, n, self.heads + 2, self.d)
        q, k, v = y[:, :, :-2], y[:, :, [-2]], y[:, :, [-1]]
        out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                             v.transpose(1, 2), is_causal=True)
        return out.transpose(1, 2).reshape(b, n, -1)


def test_one_key_value_head_for_all_query_heads_is_a_broadcast():
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel(SDPBackend.MATH):
        imp = check(MultiQuery(), torch.randn(2, 16, 32))
    scores = next(op for op in imp.graph.ops if op.name.endswith(".scores"))
    heads = [d for d in scores.dims if d.role == "heads"]
    assert [d.size for d in heads if d.size > 1] == [4]  # the one kv head: a size-1 dim

"""One BERT encoder layer (Devlin et al. 2019): post-LayerNorm, bidirectional
attention, exact GELU."""
import torch
from torch import nn
from torch.nn import functional as F


class BertLayer(nn.Module):
    def __init__(self, width=32, heads=4, ff=128):
        super().__init__()
        self.heads = heads
        self.query = nn.Linear(width, width)
        self.key = nn.Linear(width, width)
        self.value = nn.Linear(width, width)
        self.attn_out = nn.Linear(width, width)
        self.attn_norm = nn.LayerNorm(width, eps=1e-12)
        self.intermediate = nn.Linear(width, ff)
        self.output = nn.Linear(ff, width)
        self.out_norm = nn.LayerNorm(width, eps=1e-12)
        self.dropout = nn.Dropout(0.1)

    def _heads(self, x):
        b, t, e = x.shape
        return x.view(b, t, self.heads, e // self.heads).permute(0, 2, 1, 3)

    def forward(self, x):
        b, t, e = x.shape
        q, k, v = self._heads(self.query(x)), self._heads(self.key(x)), self._heads(self.value(x))
        ctx = F.scaled_dot_product_attention(q, k, v)
        ctx = ctx.permute(0, 2, 1, 3).reshape(b, t, e)
        x = self.attn_norm(x + self.dropout(self.attn_out(ctx)))
        h = F.gelu(self.intermediate(x))
        return self.out_norm(x + self.dropout(self.output(h)))


def build(batch=4, seq=16, width=32, heads=4, ff=128):
    torch.manual_seed(0)
    return BertLayer(width, heads, ff).eval(), (torch.randn(batch, seq, width),)

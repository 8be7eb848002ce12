"""A one-layer ViT (Dosovitskiy et al. 2021) with Hugging Face GPT-2's Conv1D
projections (``addmm`` against a ``(in, out)`` weight) and attention written with
matmuls: a patchifying convolution, a class token concatenated before the patches,
learned positions, a classifier on the first token."""
import math

import torch
from torch import nn


class Conv1D(nn.Module):
    def __init__(self, nf, nx):
        super().__init__()
        self.nf = nf
        self.weight = nn.Parameter(torch.randn(nx, nf) * 0.02)
        self.bias = nn.Parameter(torch.zeros(nf))

    def forward(self, x):
        size_out = x.size()[:-1] + (self.nf,)
        return torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight).view(size_out)


class Attention(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.heads = heads
        self.c_attn = Conv1D(3 * width, width)
        self.c_proj = Conv1D(width, width)

    def _split(self, t):
        return t.view(t.size()[:-1] + (self.heads, t.size(-1) // self.heads)).permute(0, 2, 1, 3)

    def forward(self, x):
        q, k, v = (self._split(t) for t in self.c_attn(x).split(x.size(-1), dim=2))
        w = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(v.size(-1))
        a = torch.matmul(nn.functional.softmax(w, dim=-1), v).permute(0, 2, 1, 3).contiguous()
        return self.c_proj(a.view(a.size()[:-2] + (a.size(-2) * a.size(-1),)))


class ViT(nn.Module):
    def __init__(self, width=32, patch=4, image=16, heads=4, classes=10):
        super().__init__()
        n = (image // patch) ** 2
        self.patch = nn.Conv2d(3, width, patch, patch)
        self.cls = nn.Parameter(torch.zeros(1, 1, width))
        self.pos = nn.Parameter(torch.zeros(1, n + 1, width))
        self.ln = nn.LayerNorm(width)
        self.attn = Attention(width, heads)
        self.head = nn.Linear(width, classes)

    def forward(self, x):
        x = self.patch(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
        x = x + self.attn(self.ln(x))
        return self.head(x[:, 0])


def build(batch=2, image=16, width=32, heads=4, classes=10):
    torch.manual_seed(0)
    return ViT(width, 4, image, heads, classes), (torch.randn(batch, 3, image, image),)

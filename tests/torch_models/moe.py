"""A small mixture-of-experts layer: a softmax router, top-k gates, every expert a
SiLU MLP over stacked weights (experts, in, out), outputs combined by the gates."""
import torch
from torch import nn
from torch.nn import functional as F


class MoE(nn.Module):
    def __init__(self, width=32, ff=64, experts=4, top_k=2):
        super().__init__()
        self.top_k = top_k
        self.norm = nn.LayerNorm(width)
        self.router = nn.Linear(width, experts, bias=False)
        self.w1 = nn.Parameter(torch.randn(experts, width, ff) * width ** -0.5)
        self.w2 = nn.Parameter(torch.randn(experts, ff, width) * ff ** -0.5)

    def forward(self, x):
        h = self.norm(x)
        probs = F.softmax(self.router(h), dim=-1)
        top, index = probs.topk(self.top_k, dim=-1)
        gates = torch.zeros_like(probs).scatter(-1, index, top)
        hidden = F.silu(torch.einsum("ble,xef->blxf", h, self.w1))
        out = torch.einsum("blxf,xfe->blxe", hidden, self.w2)
        return x + torch.einsum("blxe,blx->ble", out, gates)


def build(batch=4, seq=16, width=32, ff=64, experts=4, top_k=2):
    torch.manual_seed(0)
    return MoE(width, ff, experts, top_k), (torch.randn(batch, seq, width),)

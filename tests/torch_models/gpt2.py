"""GPT-2 (Radford et al. 2019) as nanoGPT writes it: pre-LayerNorm blocks, causal
attention through scaled_dot_product_attention, GELU (tanh) MLP, biases everywhere,
learned positions, an LM head tied to the token embedding, a cross-entropy loss.
Sizes default to the model zoo's tiny GPT-2 (graphs/gpt.py TINY)."""
import torch
from torch import nn
from torch.nn import functional as F


class Attention(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.heads = heads
        self.c_attn = nn.Linear(width, 3 * width)
        self.c_proj = nn.Linear(width, width)

    def forward(self, x):
        b, t, e = x.shape
        q, k, v = self.c_attn(x).split(e, dim=2)
        q = q.view(b, t, self.heads, e // self.heads).transpose(1, 2)
        k = k.view(b, t, self.heads, e // self.heads).transpose(1, 2)
        v = v.view(b, t, self.heads, e // self.heads).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).contiguous().view(b, t, e))


class MLP(nn.Module):
    def __init__(self, width, ff):
        super().__init__()
        self.c_fc = nn.Linear(width, ff)
        self.c_proj = nn.Linear(ff, width)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, width, heads, ff):
        super().__init__()
        self.ln_1 = nn.LayerNorm(width)
        self.attn = Attention(width, heads)
        self.ln_2 = nn.LayerNorm(width)
        self.mlp = MLP(width, ff)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT2(nn.Module):
    def __init__(self, layers=2, width=32, heads=4, ff=64, vocab=64, positions=16):
        super().__init__()
        self.wte = nn.Embedding(vocab, width)
        self.wpe = nn.Embedding(positions, width)
        self.h = nn.ModuleList(Block(width, heads, ff) for _ in range(layers))
        self.ln_f = nn.LayerNorm(width)
        self.lm_head = nn.Linear(width, vocab, bias=False)
        self.lm_head.weight = self.wte.weight

    def forward(self, idx, targets):
        t = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(t, device=idx.device))
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def build(batch=4, seq=16, layers=2, width=32, heads=4, ff=64, vocab=64, positions=16):
    torch.manual_seed(0)
    model = GPT2(layers, width, heads, ff, vocab, positions)
    ids = torch.randint(0, vocab, (batch, seq))
    return model, (ids, torch.roll(ids, -1, 1))


def block(batch=4, seq=16, width=32, heads=4, ff=64):
    torch.manual_seed(0)
    return Block(width, heads, ff), (torch.randn(batch, seq, width),)


class MLPBlock(nn.Module):
    """The second half of a GPT-2 block: ``x + mlp(ln_2(x))``."""

    def __init__(self, width, ff):
        super().__init__()
        self.ln_2 = nn.LayerNorm(width)
        self.mlp = MLP(width, ff)

    def forward(self, x):
        return x + self.mlp(self.ln_2(x))


def mlp_block(batch=4, seq=8, width=16, ff=32):
    torch.manual_seed(0)
    return MLPBlock(width, ff), (torch.randn(batch, seq, width),)


def small(batch=16, seq=1024, layers=2, device="meta"):
    """GPT-2 small's sizes (width 768, 12 heads, vocabulary 50257) with ``layers`` layers,
    made on ``device`` (``meta``: shapes only, for planning; ``cpu`` to run it)."""
    torch.manual_seed(0)
    with torch.device(device):
        model = GPT2(layers, 768, 12, 3072, 50257, 1024)
        ids = torch.zeros(batch, seq, dtype=torch.long)
    return model, (ids, ids)

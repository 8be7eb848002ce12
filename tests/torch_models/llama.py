"""One Llama block (Touvron et al. 2023): RMSNorm, grouped-query attention with
rotary position embeddings (rotate_half, as Hugging Face writes it), SwiGLU MLP,
no biases."""
import torch
from torch import nn
from torch.nn import functional as F


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class LlamaBlock(nn.Module):
    def __init__(self, width=32, heads=4, kv_heads=2, ff=64, seq=16):
        super().__init__()
        self.heads, self.kv_heads, self.d = heads, kv_heads, width // heads
        self.attn_norm = nn.RMSNorm(width, eps=1e-5)
        self.wq = nn.Linear(width, heads * self.d, bias=False)
        self.wk = nn.Linear(width, kv_heads * self.d, bias=False)
        self.wv = nn.Linear(width, kv_heads * self.d, bias=False)
        self.wo = nn.Linear(heads * self.d, width, bias=False)
        self.mlp_norm = nn.RMSNorm(width, eps=1e-5)
        self.gate = nn.Linear(width, ff, bias=False)
        self.up = nn.Linear(width, ff, bias=False)
        self.down = nn.Linear(ff, width, bias=False)
        inv = 1.0 / (10000 ** (torch.arange(0, self.d, 2).float() / self.d))
        freqs = torch.outer(torch.arange(seq).float(), inv)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos", emb.cos(), persistent=False)
        self.register_buffer("sin", emb.sin(), persistent=False)

    def forward(self, x):
        b, t, e = x.shape
        h = self.attn_norm(x)
        q = self.wq(h).view(b, t, self.heads, self.d).transpose(1, 2)
        k = self.wk(h).view(b, t, self.kv_heads, self.d).transpose(1, 2)
        v = self.wv(h).view(b, t, self.kv_heads, self.d).transpose(1, 2)
        cos, sin = self.cos[:t], self.sin[:t]
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        x = x + self.wo(y.transpose(1, 2).reshape(b, t, e))
        h = self.mlp_norm(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


def build(batch=4, seq=16, width=32, heads=4, kv_heads=2, ff=64):
    torch.manual_seed(0)
    return LlamaBlock(width, heads, kv_heads, ff, seq), (torch.randn(batch, seq, width),)


class HandAttention(nn.Module):
    """Grouped-query attention written by hand, as Hugging Face's ``repeat_kv``: the kv
    heads expanded and reshaped, explicit matmuls, a causal mask filled with -inf."""

    def __init__(self, width=32, heads=4, kv_heads=2):
        super().__init__()
        self.heads, self.kv_heads, self.d = heads, kv_heads, width // heads
        self.q = nn.Linear(width, width, bias=False)
        self.k = nn.Linear(width, kv_heads * self.d, bias=False)
        self.v = nn.Linear(width, kv_heads * self.d, bias=False)
        self.o = nn.Linear(width, width, bias=False)

    def _repeat(self, x):
        b, g, t, d = x.shape
        r = self.heads // g
        return x[:, :, None, :, :].expand(b, g, r, t, d).reshape(b, g * r, t, d)

    def forward(self, x):
        b, t, e = x.shape
        q = self.q(x).view(b, t, self.heads, self.d).transpose(1, 2)
        k = self._repeat(self.k(x).view(b, t, self.kv_heads, self.d).transpose(1, 2))
        v = self._repeat(self.v(x).view(b, t, self.kv_heads, self.d).transpose(1, 2))
        scores = (q @ k.transpose(-2, -1)) * self.d ** -0.5
        mask = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
        probs = scores.masked_fill(mask, float("-inf")).softmax(-1)
        return self.o((probs @ v).transpose(1, 2).reshape(b, t, e))


def hand_attention(batch=2, seq=16, width=32, heads=4, kv_heads=2):
    torch.manual_seed(0)
    return HandAttention(width, heads, kv_heads), (torch.randn(batch, seq, width),)


class ManualRMSNorm(nn.Module):
    """Hugging Face's LlamaRMSNorm: the statistic by hand, then two broadcast products."""

    def __init__(self, width, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))
        self.eps = eps

    def forward(self, x):
        variance = x.float().pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(variance + self.eps)).to(x.dtype)


class InterleavedGQA(nn.Module):
    """A hand-written RMSNorm and grouped-query attention whose kv heads are repeated
    with ``repeat_interleave``."""

    def __init__(self, width=32, heads=4, kv_heads=2):
        super().__init__()
        self.heads, self.kv_heads, self.d = heads, kv_heads, width // heads
        self.norm = ManualRMSNorm(width)
        self.q = nn.Linear(width, width, bias=False)
        self.kv = nn.Linear(width, 2 * kv_heads * self.d, bias=False)
        self.o = nn.Linear(width, width, bias=False)

    def forward(self, x):
        b, t, e = x.shape
        h = self.norm(x)
        q = self.q(h).view(b, t, self.heads, self.d).transpose(1, 2)
        k, v = self.kv(h).view(b, t, 2, self.kv_heads, self.d).permute(2, 0, 3, 1, 4).unbind(0)
        r = self.heads // self.kv_heads
        k, v = k.repeat_interleave(r, dim=1), v.repeat_interleave(r, dim=1)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return x + self.o(y.transpose(1, 2).reshape(b, t, e))


def interleaved_gqa(batch=2, seq=16, width=32, heads=4, kv_heads=2):
    torch.manual_seed(0)
    return InterleavedGQA(width, heads, kv_heads), (torch.randn(batch, seq, width),)

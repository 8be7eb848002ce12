"""Llama 2 (Touvron et al. 2023) and Llama 3 (Meta 2024): decoder-only transformers.

Token embedding (no position table: rotary embeddings on q and k, Elementwise
ops with ``fn: rotary``), pre-RMSNorm blocks with causal grouped-query attention
(``kv_heads`` key/value heads shared by ``heads / kv_heads`` query heads each: see
:mod:`graphs.blocks`) and a SwiGLU MLP (``down(silu(gate x) * up x)``), no
biases, a final RMSNorm and an untied LM head (Hugging Face ``LlamaForCausalLM``).

============= ====== ===== ===== ======== ===== ====== ====
name          layers width heads kv_heads ff    vocab  seq
============= ====== ===== ===== ======== ===== ====== ====
llama2-7b     32     4096  32    32       11008 32000  4096
llama2-13b    40     5120  40    40       13824 32000  4096
llama2-70b    80     8192  64    8        28672 32000  4096
llama3-8b     32     4096  32    8        14336 128256 8192
llama3-70b    80     8192  64    8        28672 128256 8192
llama3.1-8b   32     4096  32    8        14336 128256 8192
llama3.1-70b  80     8192  64    8        28672 128256 8192
llama3.1-405b 126    16384 128   8        53248 128256 8192
============= ====== ===== ===== ======== ===== ====== ====

Llama 3.1 has Llama 3's architecture (its RoPE scaling for 128k contexts changes
no size); ``seq`` 8192 is the pre-training context of both (Llama 3.1's 128k is a
late long-context stage: ``seq=131072``).
"""
from __future__ import annotations

from pase.builder import GraphBuilder, Value
from pase.graphs import blocks
from pase.graphs.zoo import register_presets, require
from pase.ir import Graph


def check_heads(model: str, width: int, heads: int, kv_heads: int,
                head_dim: int | None = None) -> None:
    """Sizes of rotary grouped-query attention; ``head_dim`` when the head size is its own
    option (Qwen3, gpt-oss), else ``width / heads``."""
    if head_dim is None:
        require(model, width % heads == 0, f"heads ({heads}) must divide width ({width})")
    require(model, heads % kv_heads == 0, f"kv_heads ({kv_heads}) must divide heads ({heads})")
    if head_dim is None:
        require(model, (width // heads) % 2 == 0, f"the head size width / heads = "
                f"{width // heads} must be even for rotary embeddings")
    else:
        require(model, head_dim % 2 == 0,
                f"head_dim ({head_dim}) must be even for rotary embeddings")


def decoder(model: str, batch: int, seq: int, vocab: int, width: int) -> tuple[GraphBuilder, Value]:
    """The builder and the token embedding (the start of a Llama-style decoder)."""
    b = GraphBuilder(model, cutoff=1, batch=batch)
    ids = b.input((batch, seq), names=("b", "l"))
    x = b.embedding(ids, vocab, width, name="embed_tokens")
    return b, x


def finish(b: GraphBuilder, x: Value, vocab: int, norm_kind: str = "rms",
           tied: bool = False) -> Graph:
    """Final norm (RMSNorm unless told), LM head (untied unless ``tied``: then it is the
    token embedding's table) and loss."""
    x = blocks.norm(b, x, norm_kind, "norm")
    logits = blocks.lm_head(b, x, vocab, "lm_head", tied="embed_tokens" if tied else None)
    b.softmax_cross_entropy(logits, name="loss")
    return b.build()


def layer(b: GraphBuilder, x: Value, p: str, *, heads: int, kv_heads: int, d_k: int, ff: int,
          act: str = "silu", qkv_bias: bool = False, out_bias: bool = False,
          mlp_bias: bool = False, qk_norm: bool = False, window: int = 0,
          sandwich: bool = False) -> Value:
    """One pre-RMSNorm block: rotary causal attention then a gated MLP, each added back.

    ``sandwich`` (Gemma 2 and 3) also norms each branch's output before the residual add.
    """
    h = blocks.norm(b, x, "rms", f"{p}.attn_norm")
    h = blocks.attention(b, [h], f"{p}.attn", heads=heads, kv_heads=kv_heads, d_k=d_k,
                         causal=True, bias=qkv_bias, out_bias=out_bias, rotary=True,
                         qk_norm=qk_norm, window=window)
    if sandwich:
        h = blocks.norm(b, h, "rms", f"{p}.attn_post_norm")
    x = blocks.residual(b, x, h, f"{p}.attn_residual")
    h = blocks.norm(b, x, "rms", f"{p}.mlp_norm")
    h = blocks.mlp(b, h, ff, f"{p}.mlp", act=act, bias=mlp_bias, gated=True)
    if sandwich:
        h = blocks.norm(b, h, "rms", f"{p}.mlp_post_norm")
    return blocks.residual(b, x, h, f"{p}.mlp_residual")


def llama(model: str, *, batch: int, seq: int, layers: int, width: int, heads: int,
          kv_heads: int, ff: int, vocab: int, head_dim: int = 0, act: str = "silu",
          qkv_bias: bool = False, out_bias: bool = False, mlp_bias: bool = False,
          qk_norm: bool = False, windows: tuple[int, ...] = (0,), sandwich: bool = False,
          tied: bool = False) -> Graph:
    """A Llama-style decoder. The options past ``vocab`` are for the Hugging Face families
    read by :mod:`graphs.hf_config` (Mistral, Qwen2/3, Gemma 2/3, Phi-3): ``head_dim``
    (0: ``width / heads``), biases, QK-norm, sandwich norms, a tied LM head, and layer
    ``i`` attending through a window of ``windows[i % len(windows)]`` keys (0: all)."""
    check_heads(model, width, heads, kv_heads, head_dim or None)
    b, x = decoder(model, batch, seq, vocab, width)
    for i in range(layers):
        x = layer(b, x, f"layers{i}", heads=heads, kv_heads=kv_heads,
                  d_k=head_dim or width // heads, ff=ff, act=act, qkv_bias=qkv_bias,
                  out_bias=out_bias, mlp_bias=mlp_bias, qk_norm=qk_norm,
                  window=windows[i % len(windows)], sandwich=sandwich)
    return finish(b, x, vocab, tied=tied)


def _preset(layers: int, width: int, heads: int, kv_heads: int, ff: int, vocab: int,
            seq: int) -> dict:
    return {"batch": 8, "seq": seq, "layers": layers, "width": width, "heads": heads,
            "kv_heads": kv_heads, "ff": ff, "vocab": vocab}


LLAMA3_8B = _preset(32, 4096, 32, 8, 14336, 128256, 8192)
LLAMA3_70B = _preset(80, 8192, 64, 8, 28672, 128256, 8192)  # 3.1 changed the weights, not the sizes

register_presets(llama, {
    "llama2-7b": ("Llama 2 7B: 32 layers, width 4096, RMSNorm, SwiGLU, rotary, sequence 4096",
                  _preset(32, 4096, 32, 32, 11008, 32000, 4096)),
    "llama2-13b": ("Llama 2 13B: 40 layers, width 5120", _preset(40, 5120, 40, 40, 13824, 32000, 4096)),
    "llama2-70b": ("Llama 2 70B: 80 layers, width 8192, grouped-query attention (8 kv heads)",
                   _preset(80, 8192, 64, 8, 28672, 32000, 4096)),
    "llama3-8b": ("Llama 3 8B: 32 layers, width 4096, 8 kv heads, vocabulary 128256, sequence 8192",
                  LLAMA3_8B),
    "llama3-70b": ("Llama 3 70B: 80 layers, width 8192, 8 kv heads, vocabulary 128256", LLAMA3_70B),
    "llama3.1-8b": ("Llama 3.1 8B: Llama 3 8B's sizes, sequence 8192", LLAMA3_8B),
    "llama3.1-70b": ("Llama 3.1 70B: Llama 3 70B's sizes, sequence 8192", LLAMA3_70B),
    "llama3.1-405b": ("Llama 3.1 405B: 126 layers, width 16384, 128 heads, 8 kv heads, ff 53248",
                      _preset(126, 16384, 128, 8, 53248, 128256, 8192)),
}, tiny={"batch": 4, "seq": 16, "layers": 2, "width": 32, "heads": 4, "kv_heads": 2, "ff": 64,
         "vocab": 64})

"""Transformer building blocks shared by the zoo families (BERT, GPT, Llama, ViT, MoE).

Activations are ``(b, l, e)``: batch, sequence, width. Every weight is a graph
input (no edges); the letters of the einsums take their roles from
:data:`graphs.zoo.ROLES`. Attention comes in two layouts:

- multi-head (``heads == kv_heads``, no rotary): one einsum projects q, k and v
  against a weight ``(3, heads, width, d_k)`` (``ble,shek->sbhlk``), as the paper's
  Transformer does, and an Unstack splits them;
- grouped-query (``kv_heads < heads``, or rotary): q is ``(b, g, r, l, k)`` with
  ``g = kv_heads`` groups of ``r = heads / kv_heads`` query heads, k and v are
  ``(b, g, m, k)`` from one einsum against ``(2, g, width, d_k)``. The scores
  einsum ``bgrlk,bgmk->bgrlm`` broadcasts each kv head over its ``r`` query
  heads: no op, no copy; splitting ``r`` replicates k and v (their gradients are
  all-reduced over the ``r`` split). Rotary embeddings are Elementwise ops on q
  and k.

Options of today's models: ``qk_norm`` (Qwen3) puts an RMSNorm over the head
dim on q and on k (one scale of the head size each, shared by the heads) before
the rotary embedding; ``window`` (gpt-oss) makes the causal softmax a sliding
window of that many keys (the Softmax's ``window`` attribute).
"""
from __future__ import annotations

from typing import Sequence

from pase.builder import GraphBuilder, Value
from pase.graphs.zoo import ACT_PW, ROLES


def norm(b: GraphBuilder, x: Value, kind: str, name: str) -> Value:
    """``layer``: LayerNorm with scale and shift; ``rms``: RMSNorm with a scale."""
    if kind == "rms":
        return b.norm(x, axis=-1, weights=1, rms=True, name=name)
    return b.norm(x, axis=-1, weights=2, name=name)


def residual(b: GraphBuilder, x: Value, y: Value, name: str) -> Value:
    return b.elementwise(x, y, name=name)


def _qk(b: GraphBuilder, q: Value, k: Value, p: str, rotary: bool,
        qk_norm: bool) -> tuple[Value, Value]:
    """The optional QK-norm, then the optional rotary embedding, of q and k."""
    if qk_norm:
        q = norm(b, q, "rms", f"{p}.q_norm")
        k = norm(b, k, "rms", f"{p}.k_norm")
    if rotary:
        q = b.rotary(q, name=f"{p}.rotary_q")
        k = b.rotary(k, name=f"{p}.rotary_k")
    return q, k


def attention(b: GraphBuilder, xs: Sequence[Value], p: str, *, heads: int, kv_heads: int,
              d_k: int, causal: bool = False, bias: bool = False, rotary: bool = False,
              qk_norm: bool = False, window: int = 0, out_bias: bool | None = None) -> Value:
    """Self-attention of ``xs[0]``, or cross-attention of ``[query, memory, memory]``.

    Returns the output projection (no residual, no norm). ``bias`` puts biases on the
    q, k, v projections and, unless ``out_bias`` says otherwise, on the output one
    (Qwen2 biases q, k and v only).
    """
    out_bias = bias if out_bias is None else out_bias
    if kv_heads != heads:
        return _grouped(b, xs[0], p, heads, kv_heads, d_k, causal, bias, rotary, qk_norm, window,
                        out_bias)
    x = xs[0]
    width = x.shape[-1]
    w_qkv = b.input((3, heads, width, d_k), names=("s", "h", "e", "k"))
    qkv_bias = "shk" if bias else None
    if len(xs) == 3:
        stacked = b.stack(list(xs), axis=0, new_name="s", name=f"{p}.stack")
        qkv = b.einsum("sble,shek->sbhlk", stacked, w_qkv, name=f"{p}.qkv", roles=ROLES,
                       bias=qkv_bias)
    else:
        qkv = b.einsum("ble,shek->sbhlk", x, w_qkv, name=f"{p}.qkv", roles=ROLES, bias=qkv_bias)
    q, k, v = b.unstack(qkv, axis=0, name=f"{p}.unstack")
    q, k = _qk(b, q, k, p, rotary, qk_norm)
    scores = b.einsum("bhlk,bhmk->bhlm", q, k, name=f"{p}.scores", roles=ROLES)
    probs = b.softmax(scores, axis=3, name=f"{p}.softmax", causal=causal, window=window)
    ctx = b.einsum("bhlm,bhmk->bhlk", probs, v, name=f"{p}.context", roles=ROLES)
    w_out = b.input((heads, width, d_k), names=("h", "e", "k"))
    return b.einsum("bhlk,hek->ble", ctx, w_out, name=f"{p}.out", roles=ROLES,
                    bias="e" if out_bias else None)


def _grouped(b: GraphBuilder, x: Value, p: str, heads: int, kv_heads: int, d_k: int,
             causal: bool, bias: bool, rotary: bool, qk_norm: bool, window: int,
             out_bias: bool) -> Value:
    """Grouped-query attention from one fused projection (as Megatron-LM's).

    Per kv head ``g`` the weight ``(r + 2, g, width, d_k)`` holds its ``r`` query heads,
    its key and its value; an Unstack splits them and a Stack regroups the queries
    as ``(b, g, r, l, k)``.
    """
    width, groups = x.shape[-1], heads // kv_heads
    w = b.input((groups + 2, kv_heads, width, d_k), names=("s", "g", "e", "k"))
    qkv = b.einsum("ble,sgek->sbglk", x, w, name=f"{p}.qkv", roles=ROLES,
                   bias="sgk" if bias else None)
    parts = b.unstack(qkv, axis=0, name=f"{p}.unstack")
    q = b.stack(parts[:groups], axis=2, new_name="r", name=f"{p}.queries")
    q, k = _qk(b, q, parts[groups], p, rotary, qk_norm)
    v = parts[groups + 1]
    scores = b.einsum("bgrlk,bgmk->bgrlm", q, k, name=f"{p}.scores", roles=ROLES)
    probs = b.softmax(scores, axis=4, name=f"{p}.softmax", causal=causal, window=window)
    ctx = b.einsum("bgrlm,bgmk->bgrlk", probs, v, name=f"{p}.context", roles=ROLES)
    w_out = b.input((kv_heads, groups, d_k, width), names=("g", "r", "k", "e"))
    return b.einsum("bgrlk,grke->ble", ctx, w_out, name=f"{p}.out", roles=ROLES,
                    bias="e" if out_bias else None)


def mlp(b: GraphBuilder, x: Value, ff: int, p: str, *, act: str, bias: bool = False,
        gated: bool = False) -> Value:
    """``fc2(act(fc1 x))``, or with ``gated`` (SwiGLU) ``down(act(gate x) * up x)``;
    ``bias`` puts a bias on every projection."""
    width = x.shape[-1]
    w1 = b.input((width, ff), names=("e", "f"))
    if gated:
        f_bias = "f" if bias else None
        gate = b.einsum("ble,ef->blf", x, w1, pw=ACT_PW[act], act=act, name=f"{p}.gate",
                        roles=ROLES, bias=f_bias)
        up = b.einsum("ble,ef->blf", x, b.input((width, ff), names=("e", "f")), name=f"{p}.up",
                      roles=ROLES, bias=f_bias)
        h = b.elementwise(gate, up, fn="mul", name=f"{p}.mul")
        name2 = f"{p}.down"
    else:
        h = b.einsum("ble,ef->blf", x, w1, pw=ACT_PW[act], act=act, name=f"{p}.fc1", roles=ROLES,
                     bias="f" if bias else None)
        name2 = f"{p}.fc2"
    w2 = b.input((ff, width), names=("f", "e"))
    return b.einsum("blf,fe->ble", h, w2, name=name2, roles=ROLES, bias="e" if bias else None)


def pre_norm_layer(b: GraphBuilder, x: Value, p: str, *, heads: int, kv_heads: int, d_k: int,
                   ff: int, act: str, norm_kind: str, causal: bool, bias: bool, rotary: bool = False,
                   gated: bool = False) -> Value:
    """``x + attn(norm x)`` then ``+ mlp(norm x)`` (GPT-2, ViT, Llama)."""
    h = norm(b, x, norm_kind, f"{p}.attn_norm")
    h = attention(b, [h], f"{p}.attn", heads=heads, kv_heads=kv_heads, d_k=d_k, causal=causal,
                  bias=bias, rotary=rotary)
    x = residual(b, x, h, f"{p}.attn_residual")
    h = norm(b, x, norm_kind, f"{p}.mlp_norm")
    h = mlp(b, h, ff, f"{p}.mlp", act=act, bias=bias, gated=gated)
    return residual(b, x, h, f"{p}.mlp_residual")


def lm_head(b: GraphBuilder, x: Value, vocab: int, name: str, *, tied: str | None = None,
            bias: bool = False) -> Value:
    """Logits ``(b, l, vocab)``; ``tied`` names the embedding whose table ``(v, e)`` it uses."""
    width = x.shape[-1]
    if tied is not None:
        w = b.input((vocab, width), names=("v", "e"))
        return b.einsum("ble,ve->blv", x, w, name=name, roles=ROLES, tied=tied,
                        bias="v" if bias else None)
    w = b.input((width, vocab), names=("e", "v"))
    return b.einsum("ble,ev->blv", x, w, name=name, roles=ROLES, bias="v" if bias else None)

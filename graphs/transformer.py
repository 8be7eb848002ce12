"""The paper's Transformer ("small": width 512, 8 heads, 6 + 6 layers; 204 ops, 256 edges).

Attention over inputs ``xs`` projects q, k and v with one einsum against a weight
``(3, heads, width, d_k)``: on the single input (``ble,shek->sbhlk``) for
self-attention, or on ``Stack(xs)`` (``sble,shek->sbhlk``) for the decoder's
cross-attention, whose ``xs`` are [query input, encoder output, encoder output].
An Unstack splits the result into q, k and v. Weights, token ids and positional
encodings are graph inputs: they add no edges.

Einsum dim roles: b batch, l and m sequence, e channel (model width), h heads,
k channel (d_k), f parameter (feed-forward hidden), v vocabulary, s other.
"""
from __future__ import annotations

from typing import Sequence

from pase.builder import GraphBuilder, Value, check_model_options
from pase.ir import Graph
from pase.registry import MODELS

ROLES = {"b": "batch", "l": "sequence", "m": "sequence", "e": "channel", "h": "heads",
         "k": "channel", "f": "parameter", "v": "vocabulary", "s": "other"}


def _attention(b: GraphBuilder, xs: Sequence[Value], heads: int, d_k: int, p: str) -> Value:
    x = xs[0]
    width = x.shape[-1]
    w_qkv = b.input((3, heads, width, d_k), names=("s", "h", "e", "k"))
    if len(xs) == 3:
        stacked = b.stack(list(xs), axis=0, new_name="s", name=f"{p}.stack")
        qkv = b.einsum("sble,shek->sbhlk", stacked, w_qkv, name=f"{p}.qkv", roles=ROLES)
    else:
        qkv = b.einsum("ble,shek->sbhlk", x, w_qkv, name=f"{p}.qkv", roles=ROLES)
    q, k, v = b.unstack(qkv, axis=0, name=f"{p}.unstack")
    scores = b.einsum("bhlk,bhmk->bhlm", q, k, name=f"{p}.scores", roles=ROLES)
    probs = b.softmax(scores, axis=3, name=f"{p}.softmax")
    ctx = b.einsum("bhlm,bhmk->bhlk", probs, v, name=f"{p}.context", roles=ROLES)
    w_out = b.input((heads, width, d_k), names=("h", "e", "k"))
    out = b.einsum("bhlk,hek->ble", ctx, w_out, name=f"{p}.out", roles=ROLES)
    out = b.elementwise(x, out, name=f"{p}.residual")
    return b.norm(out, axis=-1, name=f"{p}.norm")


def _feed_forward(b: GraphBuilder, x: Value, ff: int, p: str) -> Value:
    width = x.shape[-1]
    w1 = b.input((width, ff), names=("e", "f"))
    h = b.einsum("ble,ef->blf", x, w1, pw=2, name=f"{p}.fc1", roles=ROLES)
    w2 = b.input((ff, width), names=("f", "e"))
    out = b.einsum("blf,fe->ble", h, w2, name=f"{p}.fc2", roles=ROLES)
    out = b.elementwise(x, out, name=f"{p}.residual")
    return b.norm(out, axis=-1, name=f"{p}.norm")


def _embed(b: GraphBuilder, batch: int, seq: int, vocab: int, width: int, p: str) -> Value:
    ids = b.input((batch, seq), names=("b", "l"))
    x = b.embedding(ids, vocab, width, name=f"{p}.embedding")
    pos = b.input((batch, seq, width), names=("b", "l", "e"))
    return b.elementwise(x, pos, name=f"{p}.positional")


@MODELS.register("transformer", "Transformer (Vaswani 2017), the paper's small config (6+6 layers)")
def transformer(batch: int = 128, seq: int = 256, vocab: int = 50_000, width: int = 512,
                heads: int = 8, d_k: int = 64, ff: int = 2048, layers: int = 6) -> Graph:
    check_model_options("transformer", batch=batch, seq=seq, vocab=vocab, width=width, heads=heads,
                        d_k=d_k, ff=ff, layers=layers)
    b = GraphBuilder("transformer", cutoff=1, batch=batch)
    enc = _embed(b, batch, seq, vocab, width, "enc")
    for i in range(layers):
        enc = _attention(b, [enc], heads, d_k, f"enc{i}.attn")
        enc = _feed_forward(b, enc, ff, f"enc{i}.ffn")
    x = _embed(b, batch, seq, vocab, width, "dec")
    for i in range(layers):
        x = _attention(b, [x], heads, d_k, f"dec{i}.self_attn")
        x = _attention(b, [x, enc, enc], heads, d_k, f"dec{i}.cross_attn")
        x = _feed_forward(b, x, ff, f"dec{i}.ffn")
    w_proj = b.input((width, vocab), names=("e", "v"))
    x = b.einsum("ble,ev->blv", x, w_proj, name="projection", roles=ROLES)
    b.softmax_cross_entropy(x, name="loss")
    return b.build()

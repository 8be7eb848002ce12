"""Mixtures of experts: Mixtral 8x7B (Jiang et al. 2024) and Switch-Base-8 (Fedus et al. 2022).

An MoE layer replaces a dense MLP. Per token a router (``ble,ex->blx``) scores
the experts, a Softmax and a TopK keep the ``top_k`` best (renormalised for
Mixtral), a MoEDispatch copies each token into the buffers ``(x, b, c, e)`` of its
experts (``c = ceil(capacity_factor * top_k * seq / experts)`` slots per expert
and sequence; tokens over capacity are dropped, as GShard and Switch do), the
experts' MLPs run as einsums over the expert dim ``x`` (role ``expert``: splitting
it is expert parallelism), and a MoECombine sums each token's expert outputs
weighted by its gates. The all-to-all exchanges of expert parallelism are the
re-distributions from the dispatch (tokens split by batch) to the experts (split
by ``x``) and back to the combine.

- ``mixtral-8x7b``: Llama-style decoder (RMSNorm, rotary, 8 kv heads) whose every
  MLP is an MoE of 8 SwiGLU experts, top 2; sequence 4096 (the model takes 32k;
  4096 keeps the attention scores at Llama 2's size).
- ``switch-base-8``: T5-style encoder-decoder (RMSNorm without shift, no biases,
  ReLU MLPs, shared embedding tied to the LM head); every other MLP (layers 1, 3,
  ... of each stack) is an MoE of 8 experts, top 1, capacity factor 1 (64 slots
  at sequence 512, Hugging Face's ``expert_capacity``). T5's relative position
  bias (a 32-bucket table per head in each stack's first layer, 768 parameters
  in all) is not modelled. Encoder and decoder take ``seq`` tokens each.
"""
from __future__ import annotations

import math

from pase.builder import GraphBuilder, Value
from pase.graphs import blocks
from pase.graphs.llama import check_heads, decoder, finish
from pase.graphs.zoo import ACT_PW, ROLES, register_presets, require
from pase.ir import Graph


def moe_mlp(b: GraphBuilder, x: Value, p: str, *, experts: int, top_k: int, ff: int,
            capacity_factor: float, act: str, gated: bool, normalize: bool) -> Value:
    """Router, top-k, dispatch, the experts' MLPs and combine (no residual)."""
    _, seq, width = x.shape
    capacity = min(seq, math.ceil(capacity_factor * top_k * seq / experts))
    logits = b.einsum("ble,ex->blx", x, b.input((width, experts), names=("e", "x")),
                      name=f"{p}.router", roles=ROLES)
    probs = b.softmax(logits, axis=2, name=f"{p}.router_softmax")
    gates = b.top_k(probs, top_k, axis=2, normalize=normalize, name=f"{p}.top_k")
    buf = b.moe_dispatch(x, gates, capacity, top_k, name=f"{p}.dispatch")
    w1 = b.input((experts, width, ff), names=("x", "e", "f"))
    if gated:
        h = b.einsum("xbce,xef->xbcf", buf, w1, pw=ACT_PW[act], act=act, name=f"{p}.experts.gate",
                     roles=ROLES)
        up = b.einsum("xbce,xef->xbcf", buf, b.input((experts, width, ff), names=("x", "e", "f")),
                      name=f"{p}.experts.up", roles=ROLES)
        h = b.elementwise(h, up, fn="mul", name=f"{p}.experts.mul")
    else:
        h = b.einsum("xbce,xef->xbcf", buf, w1, pw=ACT_PW[act], act=act, name=f"{p}.experts.wi",
                     roles=ROLES)
    w2 = b.input((experts, ff, width), names=("x", "f", "e"))
    y = b.einsum("xbcf,xfe->xbce", h, w2, name=f"{p}.experts.{'down' if gated else 'wo'}",
                 roles=ROLES)
    return b.moe_combine(y, gates, top_k, name=f"{p}.combine")


def _check_moe(model: str, experts: int, top_k: int) -> None:
    require(model, top_k <= experts, f"top_k ({top_k}) must be at most experts ({experts})")


def mixtral(model: str, *, batch: int, seq: int, layers: int, width: int, heads: int,
            kv_heads: int, ff: int, vocab: int, experts: int, top_k: int,
            capacity_factor: float) -> Graph:
    check_heads(model, width, heads, kv_heads)
    _check_moe(model, experts, top_k)
    b, x = decoder(model, batch, seq, vocab, width)
    for i in range(layers):
        p = f"layers{i}"
        h = blocks.norm(b, x, "rms", f"{p}.attn_norm")
        h = blocks.attention(b, [h], f"{p}.attn", heads=heads, kv_heads=kv_heads,
                             d_k=width // heads, causal=True, rotary=True)
        x = blocks.residual(b, x, h, f"{p}.attn_residual")
        h = blocks.norm(b, x, "rms", f"{p}.moe_norm")
        h = moe_mlp(b, h, f"{p}.moe", experts=experts, top_k=top_k, ff=ff,
                    capacity_factor=capacity_factor, act="silu", gated=True, normalize=True)
        x = blocks.residual(b, x, h, f"{p}.moe_residual")
    return finish(b, x, vocab)


def _t5_mlp(b: GraphBuilder, x: Value, p: str, i: int, o: dict) -> Value:
    h = blocks.norm(b, x, "rms", f"{p}.mlp_norm")
    if i % 2 == 1 and o["experts"] > 1:
        h = moe_mlp(b, h, f"{p}.moe", experts=o["experts"], top_k=o["top_k"], ff=o["ff"],
                    capacity_factor=o["capacity_factor"], act="relu", gated=False,
                    normalize=False)
    else:
        h = blocks.mlp(b, h, o["ff"], f"{p}.mlp", act="relu")
    return blocks.residual(b, x, h, f"{p}.mlp_residual")


def _t5_attention(b: GraphBuilder, xs: list[Value], p: str, o: dict, causal: bool) -> Value:
    return blocks.attention(b, xs, p, heads=o["heads"], kv_heads=o["heads"], d_k=o["d_kv"],
                            causal=causal)


def switch(model: str, **o) -> Graph:
    """A T5-style encoder-decoder whose odd-numbered MLPs are MoE layers."""
    _check_moe(model, o["experts"], o["top_k"])
    batch, seq, width = o["batch"], o["seq"], o["width"]
    b = GraphBuilder(model, cutoff=1, batch=batch)
    x = b.embedding(b.input((batch, seq), names=("b", "l")), o["vocab"], width, name="shared")
    for i in range(o["layers"]):
        p = f"encoder{i}"
        h = _t5_attention(b, [blocks.norm(b, x, "rms", f"{p}.attn_norm")], f"{p}.attn", o, False)
        x = _t5_mlp(b, blocks.residual(b, x, h, f"{p}.attn_residual"), p, i, o)
    enc = blocks.norm(b, x, "rms", "encoder.final_norm")
    x = b.embedding(b.input((batch, seq), names=("b", "l")), o["vocab"], width,
                    name="decoder.embed", tied="shared")
    for i in range(o["layers"]):
        p = f"decoder{i}"
        h = _t5_attention(b, [blocks.norm(b, x, "rms", f"{p}.attn_norm")], f"{p}.attn", o, True)
        x = blocks.residual(b, x, h, f"{p}.attn_residual")
        h = blocks.norm(b, x, "rms", f"{p}.cross_norm")
        h = _t5_attention(b, [h, enc, enc], f"{p}.cross", o, False)
        x = _t5_mlp(b, blocks.residual(b, x, h, f"{p}.cross_residual"), p, i, o)
    x = blocks.norm(b, x, "rms", "decoder.final_norm")
    logits = blocks.lm_head(b, x, o["vocab"], "lm_head", tied="shared")
    b.softmax_cross_entropy(logits, name="loss")
    return b.build()


register_presets(mixtral, {"mixtral-8x7b": (
    "Mixtral 8x7B: 32 layers, width 4096, 8 SwiGLU experts top 2 in every layer, 8 kv heads",
    {"batch": 8, "seq": 4096, "layers": 32, "width": 4096, "heads": 32, "kv_heads": 8,
     "ff": 14336, "vocab": 32000, "experts": 8, "top_k": 2, "capacity_factor": 1.0})},
    tiny={"batch": 4, "seq": 16, "layers": 2, "width": 32, "heads": 4, "kv_heads": 2, "ff": 64,
          "vocab": 64, "experts": 4})
register_presets(switch, {"switch-base-8": (
    "Switch-Base-8: T5-style 12+12 layers, width 768, 8 experts top 1 in every other MLP",
    {"batch": 32, "seq": 512, "layers": 12, "width": 768, "heads": 12, "d_kv": 64, "ff": 3072,
     "vocab": 32128, "experts": 8, "top_k": 1, "capacity_factor": 1.0})},
    tiny={"batch": 4, "seq": 16, "layers": 2, "width": 32, "heads": 4, "d_kv": 8, "ff": 64,
          "vocab": 64, "experts": 4})

"""Mixtures of experts: Mixtral (Jiang et al. 2024), Switch-Base-8 (Fedus et al. 2022), and
the MoE decoder that Qwen3, gpt-oss and Llama 4 (their own modules) build on.

An MoE layer replaces a dense MLP. Per token a router (``ble,ex->blx``) scores
the experts, a Softmax and a TopK keep the ``top_k`` best (renormalised for
Mixtral), a MoEDispatch copies each token into the buffers ``(x, b, c, e)`` of its
experts (``c = ceil(capacity_factor * top_k * seq / experts)`` slots per expert
and sequence; tokens over capacity are dropped, as GShard and Switch do; each run of
``seq / G`` tokens fills its own ``c / G`` slots, ``G`` the routing groups of
:func:`pase.builder.routing_groups`, as each rank routes the tokens it holds), the
experts' MLPs run as einsums over the expert dim ``x`` (role ``expert``: splitting
it is expert parallelism), and a MoECombine sums each token's expert outputs
weighted by its gates. The all-to-all exchanges of expert parallelism are the
re-distributions from the dispatch (tokens split by batch) to the experts (split
by ``x``) and back to the combine.

- ``mixtral-8x7b``: Llama-style decoder (RMSNorm, rotary, 8 kv heads) whose every
  MLP is an MoE of 8 SwiGLU experts, top 2; sequence 4096 (the model takes 32k;
  4096 keeps the attention scores at Llama 2's size).
- ``mixtral-8x22b``: the same at 56 layers, width 6144, 48 heads, experts of 16384,
  vocabulary 32000 (Mixtral-8x22B-v0.1, the pretrained model; the Instruct model's
  tokenizer has 32768: ``vocab=32768``), sequence 4096 (the model takes 64k).
  The Mixtral family sizes its experts by ``ff`` (as Hugging Face's
  ``intermediate_size``) or by ``moe_ff``, which wins when it is not 0 (its
  default); ``shared_experts`` (default 0) adds that many always-on SwiGLU experts
  of the same size, run as one MLP on every token and added to the routed output.
- ``switch-base-8``: T5-style encoder-decoder (RMSNorm without shift, no biases,
  ReLU MLPs, shared embedding tied to the LM head); every other MLP (layers 1, 3,
  ... of each stack) is an MoE of 8 experts, top 1, capacity factor 1 (64 slots
  at sequence 512, Hugging Face's ``expert_capacity``). T5's relative position
  bias (a 32-bucket table per head in each stack's first layer, 768 parameters
  in all) is not modelled. Encoder and decoder take ``seq`` tokens each.
"""
from __future__ import annotations

import math

from pase.builder import GraphBuilder, Value, routing_groups
from pase.graphs import blocks
from pase.graphs.llama import check_heads, decoder, finish
from pase.graphs.zoo import ACT_PW, ROLES, register_presets, require
from pase.ir import Graph


def moe_mlp(b: GraphBuilder, x: Value, p: str, *, experts: int, top_k: int, ff: int,
            capacity_factor: float, act: str, gated: bool, normalize: bool,
            bias: bool = False, shared: int = 0) -> Value:
    """Router, top-k, dispatch, the experts' MLPs and combine (no residual).

    ``bias``: biases on the router and on the experts' projections (gpt-oss);
    ``shared``: that many always-on experts, one MLP of ``shared * ff`` on every token
    added to the routed output (Llama 4).
    """
    _, seq, width = x.shape
    capacity = min(seq, math.ceil(capacity_factor * top_k * seq / experts))
    logits = b.einsum("ble,ex->blx", x, b.input((width, experts), names=("e", "x")),
                      name=f"{p}.router", roles=ROLES, bias="x" if bias else None)
    probs = b.softmax(logits, axis=2, name=f"{p}.router_softmax")
    gates = b.top_k(probs, top_k, axis=2, normalize=normalize, name=f"{p}.top_k")
    groups = routing_groups(seq, capacity)
    buf = b.moe_dispatch(x, gates, capacity, top_k, name=f"{p}.dispatch", groups=groups)
    w1 = b.input((experts, width, ff), names=("x", "e", "f"))
    f_bias, e_bias = ("xf", "xe") if bias else (None, None)
    if gated:
        h = b.einsum("xbce,xef->xbcf", buf, w1, pw=ACT_PW[act], act=act, name=f"{p}.experts.gate",
                     roles=ROLES, bias=f_bias)
        up = b.einsum("xbce,xef->xbcf", buf, b.input((experts, width, ff), names=("x", "e", "f")),
                      name=f"{p}.experts.up", roles=ROLES, bias=f_bias)
        h = b.elementwise(h, up, fn="mul", name=f"{p}.experts.mul")
    else:
        h = b.einsum("xbce,xef->xbcf", buf, w1, pw=ACT_PW[act], act=act, name=f"{p}.experts.wi",
                     roles=ROLES, bias=f_bias)
    w2 = b.input((experts, ff, width), names=("x", "f", "e"))
    y = b.einsum("xbcf,xfe->xbce", h, w2, name=f"{p}.experts.{'down' if gated else 'wo'}",
                 roles=ROLES, bias=e_bias)
    out = b.moe_combine(y, gates, top_k, name=f"{p}.combine", groups=groups)
    if shared:
        s = blocks.mlp(b, x, shared * ff, f"{p}.shared_expert", act=act, gated=gated)
        out = b.elementwise(out, s, name=f"{p}.shared_add")
    return out


def check_moe(model: str, experts: int, top_k: int) -> None:
    require(model, top_k <= experts, f"top_k ({top_k}) must be at most experts ({experts})")


def moe_decoder(model: str, *, batch: int, seq: int, layers: int, width: int, heads: int,
                kv_heads: int, d_k: int, vocab: int, experts: int, shared_experts: int,
                top_k: int, moe_ff: int, capacity_factor: float, bias: bool = False,
                qk_norm: bool = False, windows: tuple[int, ...] = (0,), tied: bool = False,
                dense: frozenset[int] = frozenset(), ff: int = 0) -> Graph:
    """A Llama-style decoder (pre-RMSNorm, rotary GQA, untied head unless ``tied``) whose
    every MLP is an MoE of SwiGLU experts, but for the layers in ``dense`` (Qwen3-MoE's
    ``mlp_only_layers``): a SwiGLU MLP of ``ff``. Layer ``i`` attends through a sliding
    window of ``windows[i % len(windows)]`` keys (0: full causal); ``bias`` puts biases on
    the attention projections, the router and the experts (gpt-oss)."""
    check_moe(model, experts, top_k)
    b, x = decoder(model, batch, seq, vocab, width)
    for i in range(layers):
        p = f"layers{i}"
        h = blocks.norm(b, x, "rms", f"{p}.attn_norm")
        h = blocks.attention(b, [h], f"{p}.attn", heads=heads, kv_heads=kv_heads, d_k=d_k,
                             causal=True, rotary=True, bias=bias, qk_norm=qk_norm,
                             window=windows[i % len(windows)])
        x = blocks.residual(b, x, h, f"{p}.attn_residual")
        h = blocks.norm(b, x, "rms", f"{p}.moe_norm")
        if i in dense:
            h = blocks.mlp(b, h, ff, f"{p}.mlp", act="silu", gated=True)
        else:
            h = moe_mlp(b, h, f"{p}.moe", experts=experts, top_k=top_k, ff=moe_ff,
                        capacity_factor=capacity_factor, act="silu", gated=True,
                        normalize=True, bias=bias, shared=shared_experts)
        x = blocks.residual(b, x, h, f"{p}.moe_residual")
    return finish(b, x, vocab, tied=tied)


def mixtral(model: str, *, batch: int, seq: int, layers: int, width: int, heads: int,
            kv_heads: int, ff: int, vocab: int, experts: int, top_k: int,
            capacity_factor: float, moe_ff: int = 0, shared_experts: int = 0) -> Graph:
    check_heads(model, width, heads, kv_heads)
    return moe_decoder(model, batch=batch, seq=seq, layers=layers, width=width, heads=heads,
                       kv_heads=kv_heads, d_k=width // heads, vocab=vocab, experts=experts,
                       shared_experts=shared_experts, top_k=top_k, moe_ff=moe_ff or ff,
                       capacity_factor=capacity_factor)


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
    check_moe(model, o["experts"], o["top_k"])
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


def _mixtral(layers: int, width: int, heads: int, ff: int, vocab: int) -> dict:
    return {"batch": 8, "seq": 4096, "layers": layers, "width": width, "heads": heads,
            "kv_heads": 8, "ff": ff, "moe_ff": 0, "vocab": vocab, "experts": 8,
            "shared_experts": 0, "top_k": 2, "capacity_factor": 1.0}


register_presets(mixtral, {
    "mixtral-8x7b": ("Mixtral 8x7B: 32 layers, width 4096, 8 SwiGLU experts top 2 in every "
                     "layer, 8 kv heads", _mixtral(32, 4096, 32, 14336, 32000)),
    "mixtral-8x22b": ("Mixtral 8x22B: 56 layers, width 6144, 48 heads, 8 experts of 16384 top 2",
                      _mixtral(56, 6144, 48, 16384, 32000)),
}, tiny={"batch": 4, "seq": 16, "layers": 2, "width": 32, "heads": 4, "kv_heads": 2, "ff": 64,
         "vocab": 64, "experts": 4}, zero_ok=("moe_ff", "shared_experts"))
register_presets(switch, {"switch-base-8": (
    "Switch-Base-8: T5-style 12+12 layers, width 768, 8 experts top 1 in every other MLP",
    {"batch": 32, "seq": 512, "layers": 12, "width": 768, "heads": 12, "d_kv": 64, "ff": 3072,
     "vocab": 32128, "experts": 8, "top_k": 1, "capacity_factor": 1.0})},
    tiny={"batch": 4, "seq": 16, "layers": 2, "width": 32, "heads": 4, "d_kv": 8, "ff": 64,
          "vocab": 64, "experts": 4})

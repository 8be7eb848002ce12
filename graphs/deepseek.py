"""DeepSeek-V3 (DeepSeek-AI 2024): multi-head latent attention and a fine-grained MoE.

A decoder (untied embedding and LM head, pre-RMSNorm blocks) whose attention is MLA:
queries go through a low-rank latent (``q_a_proj`` to ``q_lora_rank``, an RMSNorm,
``q_b_proj`` to ``heads x (qk_nope_head_dim + qk_rope_head_dim)``); keys and values
through another (``kv_a_proj`` to ``kv_lora_rank``, an RMSNorm, ``kv_b_proj`` to
``heads x (qk_nope_head_dim + v_head_dim)``), plus one rotary key of
``qk_rope_head_dim`` entries from the hidden state, shared by every head (decoupled
RoPE). As Megatron-LM's MLASelfAttention does in training, each head's key is its own
``k_nope`` concatenated with the shared rotary key (a broadcast over heads: a Stack of
views, free, then a Concat), and attention runs per head with query/key size
``nope + rope`` and value size ``v_head_dim``. The down-projections and their norms
are replicated over tp (Megatron's "duplicated" linears); the up-projections split the
heads (column-parallel) and the output projection is row-parallel.

pase.perf prices the fused attention at ``4 B H L M x (nope + rope)`` FLOP: its kernel
takes the scores' head size for both products, 20% over the true ``2 B H L M x (nope +
rope + v_head_dim)`` at DeepSeek-V3's sizes (192 + 192 against 192 + 128).

The first ``dense_layers`` MLPs are SwiGLU of ``ff``; the others an MoE
(:func:`graphs.moe.moe_mlp`: ``experts`` SwiGLU experts of ``moe_ff``, top ``top_k``,
dropped over ``capacity_factor``) plus ``shared_experts`` shared experts, one dense
SwiGLU MLP of ``moe_ff x shared_experts`` on the same normed input, added to the MoE's
output. The router is priced as a softmax (DeepSeek-V3 scores with a sigmoid and a
bias-adjusted top-k; the bias is a buffer updated outside the gradient, not a parameter).
The multi-token-prediction module (one more block, 14B parameters in the release) is
not modelled.

============ ====== ===== ===== ======= ====== ======= ===== ====== =====
name         layers width heads experts top_k  moe_ff  dense vocab  total
============ ====== ===== ===== ======= ====== ======= ===== ====== =====
deepseek-v3  61     7168  128   256 + 1 8      2048    3     129280 671.0B
(Kimi K2)    61     7168  64    384 + 1 8      2048    1     163840 1.026T
============ ====== ===== ===== ======= ====== ======= ===== ====== =====

Kimi K2 is the same architecture with other sizes: ``--model-option heads=64
--model-option experts=384 --model-option dense_layers=1 --model-option vocab=163840``.
"""
from __future__ import annotations

from pase.builder import GraphBuilder, Value
from pase.graphs import blocks
from pase.graphs.llama import decoder, finish
from pase.graphs.moe import moe_mlp
from pase.graphs.zoo import register_presets, require
from pase.ir import Graph

# Einsum letters of MLA: n the query latent, c the key/value latent (both replicated over
# tp), k a head's size (query/key: nope + rope; value; the rotary key: rope).
ROLES = {"b": "batch", "l": "sequence", "m": "sequence", "e": "channel", "h": "heads",
         "n": "channel", "c": "channel", "k": "channel"}


def mla(b: GraphBuilder, x: Value, p: str, *, heads: int, q_lora_rank: int, kv_lora_rank: int,
        nope: int, rope: int, v_dim: int) -> Value:
    """Multi-head latent attention of ``x (b, l, width)``; returns the output projection."""
    width = x.shape[-1]
    qk = nope + rope

    def ein(eq: str, u: Value, shape: tuple, names: str, name: str) -> Value:
        return b.einsum(eq, u, b.input(shape, names=tuple(names)), name=f"{p}.{name}", roles=ROLES)

    if q_lora_rank:
        cq = ein("ble,en->bln", x, (width, q_lora_rank), "en", "q_a_proj")
        cq = blocks.norm(b, cq, "rms", f"{p}.q_a_norm")
        q = ein("bln,nhk->bhlk", cq, (q_lora_rank, heads, qk), "nhk", "q_b_proj")
    else:  # no query latent (DeepSeek-V2-Lite): one projection
        q = ein("ble,ehk->bhlk", x, (width, heads, qk), "ehk", "q_proj")
    q = b.rotary(q, name=f"{p}.rotary_q")  # on the whole head: its rope part, priced on all
    ckv = ein("ble,ec->blc", x, (width, kv_lora_rank), "ec", "kv_a_proj")
    k_rope = ein("ble,ek->blk", x, (width, rope), "ek", "k_rope_proj")  # kv_a_proj's last rope
    ckv = blocks.norm(b, ckv, "rms", f"{p}.kv_a_norm")
    k_nope = ein("blc,chk->bhlk", ckv, (kv_lora_rank, heads, nope), "chk", "kv_b_proj.k")
    v = ein("blc,chk->bhlk", ckv, (kv_lora_rank, heads, v_dim), "chk", "kv_b_proj.v")
    k_rope = b.rotary(k_rope, name=f"{p}.rotary_k")
    shared = b.stack([k_rope] * heads, axis=1, new_name="h", name=f"{p}.k_rope_heads")
    k = b.concat([k_nope, shared], axis=3, name=f"{p}.k")
    scores = b.einsum("bhlk,bhmk->bhlm", q, k, name=f"{p}.scores", roles=ROLES)
    probs = b.softmax(scores, axis=3, name=f"{p}.softmax", causal=True)
    ctx = b.einsum("bhlm,bhmk->bhlk", probs, v, name=f"{p}.context", roles=ROLES)
    return ein("bhlk,hke->ble", ctx, (heads, v_dim, width), "hke", "o_proj")


def deepseek(model: str, *, batch: int, seq: int, layers: int, width: int, heads: int,
             q_lora_rank: int, kv_lora_rank: int, qk_nope_head_dim: int, qk_rope_head_dim: int,
             v_head_dim: int, ff: int, dense_layers: int, moe_ff: int, experts: int,
             shared_experts: int, top_k: int, vocab: int, capacity_factor: float,
             tied: bool = False) -> Graph:
    """``q_lora_rank`` 0: queries by one projection, no latent; ``shared_experts`` 0: none;
    ``tied``: the LM head is the token embedding's table."""
    require(model, top_k <= experts, f"top_k ({top_k}) must be at most experts ({experts})")
    require(model, dense_layers <= layers,
            f"dense_layers ({dense_layers}) must be at most layers ({layers}); set "
            f"--model-option dense_layers=N with N <= layers")
    require(model, qk_rope_head_dim % 2 == 0,
            f"qk_rope_head_dim ({qk_rope_head_dim}) must be even for rotary embeddings")
    b, x = decoder(model, batch, seq, vocab, width)
    for i in range(layers):
        p = f"layers{i}"
        h = blocks.norm(b, x, "rms", f"{p}.attn_norm")
        h = mla(b, h, f"{p}.attn", heads=heads, q_lora_rank=q_lora_rank,
                kv_lora_rank=kv_lora_rank, nope=qk_nope_head_dim, rope=qk_rope_head_dim,
                v_dim=v_head_dim)
        x = blocks.residual(b, x, h, f"{p}.attn_residual")
        h = blocks.norm(b, x, "rms", f"{p}.mlp_norm")
        if i < dense_layers:
            h = blocks.mlp(b, h, ff, f"{p}.mlp", act="silu", gated=True)
        else:
            routed = moe_mlp(b, h, f"{p}.moe", experts=experts, top_k=top_k, ff=moe_ff,
                             capacity_factor=capacity_factor, act="silu", gated=True,
                             normalize=True)
            if shared_experts:
                shared = blocks.mlp(b, h, moe_ff * shared_experts, f"{p}.moe.shared_experts",
                                    act="silu", gated=True)
                routed = blocks.residual(b, routed, shared, f"{p}.moe.sum")
            h = routed
        x = blocks.residual(b, x, h, f"{p}.mlp_residual")
    return finish(b, x, vocab, tied=tied)


register_presets(deepseek, {"deepseek-v3": (
    "DeepSeek-V3 671B: 61 layers, width 7168, multi-head latent attention, 3 dense then 58 MoE "
    "layers of 256 experts top 8 + 1 shared (no multi-token prediction)",
    {"batch": 8, "seq": 4096, "layers": 61, "width": 7168, "heads": 128, "q_lora_rank": 1536,
     "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
     "ff": 18432, "dense_layers": 3, "moe_ff": 2048, "experts": 256, "shared_experts": 1,
     "top_k": 8, "vocab": 129280, "capacity_factor": 1.0})},
    tiny={"batch": 4, "seq": 16, "layers": 2, "width": 32, "heads": 4, "q_lora_rank": 16,
          "kv_lora_rank": 8, "qk_nope_head_dim": 8, "qk_rope_head_dim": 4, "v_head_dim": 8,
          "ff": 64, "dense_layers": 1, "moe_ff": 16, "experts": 4, "top_k": 2, "vocab": 64})

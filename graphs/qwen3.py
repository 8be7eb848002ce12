"""Qwen3 mixtures of experts (Qwen team 2025): Qwen3-30B-A3B and Qwen3-235B-A22B.

A Llama-style decoder (:func:`graphs.moe.moe_decoder`: pre-RMSNorm, rotary
grouped-query attention without biases, untied LM head) with QK-norm (an RMSNorm
over the head dim on q and on k, one scale of ``head_dim`` each) and a head size
of its own (``head_dim`` 128, not ``width / heads``), whose every MLP is an MoE of
128 SwiGLU experts, top 8 renormalised (``norm_topk_prob``), no shared expert
(Hugging Face ``Qwen3MoeForCausalLM``). Sequence 4096, the context of the first
two pre-training stages (the third extends it to 32k: ``seq=32768``).

=============== ====== ===== ===== ======== ======== ======= ===== ====== ======
name            layers width heads kv_heads head_dim experts top_k moe_ff vocab
=============== ====== ===== ===== ======== ======== ======= ===== ====== ======
qwen3-30b-a3b   48     2048  32    4        128      128     8     768    151936
qwen3-235b-a22b 94     4096  64    4        128      128     8     1536   151936
=============== ====== ===== ===== ======== ======== ======= ===== ====== ======
"""
from __future__ import annotations

from pase.graphs.llama import check_heads
from pase.graphs.moe import moe_decoder
from pase.graphs.zoo import register_presets
from pase.ir import Graph


def qwen3_moe(model: str, *, batch: int, seq: int, layers: int, width: int, heads: int,
              kv_heads: int, head_dim: int, vocab: int, experts: int, shared_experts: int,
              top_k: int, moe_ff: int, capacity_factor: float) -> Graph:
    check_heads(model, width, heads, kv_heads, head_dim)
    return moe_decoder(model, batch=batch, seq=seq, layers=layers, width=width, heads=heads,
                       kv_heads=kv_heads, d_k=head_dim, vocab=vocab, experts=experts,
                       shared_experts=shared_experts, top_k=top_k, moe_ff=moe_ff,
                       capacity_factor=capacity_factor, qk_norm=True)


def _preset(layers: int, width: int, heads: int, moe_ff: int) -> dict:
    return {"batch": 8, "seq": 4096, "layers": layers, "width": width, "heads": heads,
            "kv_heads": 4, "head_dim": 128, "vocab": 151936, "experts": 128,
            "shared_experts": 0, "top_k": 8, "moe_ff": moe_ff, "capacity_factor": 1.0}


register_presets(qwen3_moe, {
    "qwen3-30b-a3b": ("Qwen3-30B-A3B: 48 layers, width 2048, QK-norm, 128 experts of 768 top 8",
                      _preset(48, 2048, 32, 768)),
    "qwen3-235b-a22b": ("Qwen3-235B-A22B: 94 layers, width 4096, QK-norm, 128 experts of 1536 "
                        "top 8", _preset(94, 4096, 64, 1536)),
}, tiny={"batch": 4, "seq": 16, "layers": 2, "width": 32, "heads": 4, "kv_heads": 2,
         "head_dim": 16, "vocab": 64, "experts": 4, "top_k": 2, "moe_ff": 32},
    zero_ok=("shared_experts",))

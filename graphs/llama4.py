"""Llama 4 Scout (Meta 2025): a mixture of experts with a shared expert.

A Llama-style decoder (:func:`graphs.moe.moe_decoder`: pre-RMSNorm, rotary
grouped-query attention without biases, untied LM head) whose every MLP is an
MoE of 16 SwiGLU experts of 8192, top 1, plus one shared SwiGLU expert of the
same size that every token runs (``shared_experts``), added to the routed output
(Hugging Face ``Llama4ForCausalLM``, the text model of Llama-4-Scout-17B-16E).

Not modelled, none of them with parameters: the chunked attention of three layers
in four (8192-token chunks; every layer here is full causal attention), the
layers without rotary embedding (every fourth), the weightless L2 QK-norm, and
the sigmoid of the router's top-1 score (priced as Softmax and TopK). Sequence
8192 (the attention chunk; ``seq`` sets any other). The vision encoder is not part
of the graph: the published 109B total counts it, the text model has 107.8B.

============ ====== ===== ===== ======== ======= ============== ===== ====== ======
name         layers width heads kv_heads experts shared_experts top_k moe_ff vocab
============ ====== ===== ===== ======== ======= ============== ===== ====== ======
llama4-scout 48     5120  40    8        16      1              1     8192   202048
============ ====== ===== ===== ======== ======= ============== ===== ====== ======
"""
from __future__ import annotations

from pase.graphs.llama import check_heads
from pase.graphs.moe import moe_decoder
from pase.graphs.zoo import register_presets
from pase.ir import Graph


def llama4(model: str, *, batch: int, seq: int, layers: int, width: int, heads: int,
           kv_heads: int, vocab: int, experts: int, shared_experts: int, top_k: int,
           moe_ff: int, capacity_factor: float) -> Graph:
    check_heads(model, width, heads, kv_heads)
    return moe_decoder(model, batch=batch, seq=seq, layers=layers, width=width, heads=heads,
                       kv_heads=kv_heads, d_k=width // heads, vocab=vocab, experts=experts,
                       shared_experts=shared_experts, top_k=top_k, moe_ff=moe_ff,
                       capacity_factor=capacity_factor)


register_presets(llama4, {"llama4-scout": (
    "Llama 4 Scout: 48 layers, width 5120, 16 experts of 8192 top 1 plus a shared expert",
    {"batch": 8, "seq": 8192, "layers": 48, "width": 5120, "heads": 40, "kv_heads": 8,
     "vocab": 202048, "experts": 16, "shared_experts": 1, "top_k": 1, "moe_ff": 8192,
     "capacity_factor": 1.0})},
    tiny={"batch": 4, "seq": 16, "layers": 2, "width": 32, "heads": 4, "kv_heads": 2,
          "vocab": 64, "experts": 4, "moe_ff": 32},
    zero_ok=("shared_experts",))

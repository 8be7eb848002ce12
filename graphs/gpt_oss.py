"""gpt-oss (OpenAI 2025): gpt-oss-20b and gpt-oss-120b, mixtures of experts.

A Llama-style decoder (:func:`graphs.moe.moe_decoder`: pre-RMSNorm, rotary
grouped-query attention, untied LM head) with a head size of its own (``head_dim``
64, not ``width / heads``), biases on the q, k, v and output projections, on the
router and on the experts' projections, and attention that alternates a sliding
window of ``window`` keys (layers 0, 2, 4...; the Softmax's ``window`` attribute)
with full causal attention (layers 1, 3...); ``window=0`` makes every layer full.
Every MLP is an MoE of SwiGLU experts (gpt-oss clamps its SwiGLU and adds 1 to the
up projection: the same GEMMs, priced as SiLU), top 4 (Hugging Face
``GptOssForCausalLM``). Sequence 4096 (the pre-training context; the released
models take 131k through YaRN).

Attention sinks (one learned logit per head and layer, an extra column of the
scores' softmax) are not modelled: no op kind holds them without splitting the
scores -> softmax -> context chain the performance model fuses. The graph has
``layers x heads`` parameters fewer than Hugging Face's count: 1,536 for
gpt-oss-20b, 2,304 for gpt-oss-120b.

============ ====== ===== ===== ======== ======== ======= ===== ====== ====== ======
name         layers width heads kv_heads head_dim experts top_k moe_ff window vocab
============ ====== ===== ===== ======== ======== ======= ===== ====== ====== ======
gpt-oss-20b  24     2880  64    8        64       32      4     2880   128    201088
gpt-oss-120b 36     2880  64    8        64       128     4     2880   128    201088
============ ====== ===== ===== ======== ======== ======= ===== ====== ====== ======
"""
from __future__ import annotations

from pase.graphs.llama import check_heads
from pase.graphs.moe import moe_decoder
from pase.graphs.zoo import register_presets
from pase.ir import Graph


def gpt_oss(model: str, *, batch: int, seq: int, layers: int, width: int, heads: int,
            kv_heads: int, head_dim: int, vocab: int, experts: int, shared_experts: int,
            top_k: int, moe_ff: int, window: int, capacity_factor: float) -> Graph:
    check_heads(model, width, heads, kv_heads, head_dim)
    return moe_decoder(model, batch=batch, seq=seq, layers=layers, width=width, heads=heads,
                       kv_heads=kv_heads, d_k=head_dim, vocab=vocab, experts=experts,
                       shared_experts=shared_experts, top_k=top_k, moe_ff=moe_ff,
                       capacity_factor=capacity_factor, bias=True, windows=(window, 0))


def _preset(layers: int, experts: int) -> dict:
    return {"batch": 8, "seq": 4096, "layers": layers, "width": 2880, "heads": 64, "kv_heads": 8,
            "head_dim": 64, "vocab": 201088, "experts": experts, "shared_experts": 0,
            "top_k": 4, "moe_ff": 2880, "window": 128, "capacity_factor": 1.0}


register_presets(gpt_oss, {
    "gpt-oss-20b": ("gpt-oss-20b: 24 layers, width 2880, 32 experts top 4, sliding window 128 "
                    "in every other layer", _preset(24, 32)),
    "gpt-oss-120b": ("gpt-oss-120b: 36 layers, width 2880, 128 experts top 4, sliding window "
                     "128 in every other layer", _preset(36, 128)),
}, tiny={"batch": 4, "seq": 16, "layers": 2, "width": 32, "heads": 4, "kv_heads": 2,
         "head_dim": 16, "vocab": 64, "experts": 4, "top_k": 2, "moe_ff": 32, "window": 4},
    zero_ok=("shared_experts", "window"))

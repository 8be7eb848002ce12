"""NVIDIA Nemotron 3 Nano and Super: hybrid Mamba-2 / attention / MoE decoders (2025-26).

Each layer is one pre-RMSNorm block with a residual, of the kind its letter in the
config's ``hybrid_override_pattern`` names: ``M`` a Mamba-2 mixer
(:mod:`graphs.mamba`), ``*`` causal grouped-query attention without position
embeddings (``heads`` query heads of ``head_dim``, ``kv_heads`` key/value heads;
:func:`graphs.blocks.attention`), ``E`` an MoE: a router over ``experts``, top
``top_k`` (renormalised), non-gated squared-ReLU experts of ``moe_ff``, plus
``shared_experts`` shared experts of ``shared_ff`` each on the same normed input. An
untied embedding and LM head, a final RMSNorm.

Super's MoE is latent (LatentMoE, its ``moe_latent_size``): the router reads the
hidden state, ``fc1_latent_proj`` projects it to ``latent`` before the dispatch, the
experts run in the latent width (so the expert all-to-alls carry ``latent``, not
``width``, per token), and ``fc2_latent_proj`` projects the combined output back.

``layers`` takes the published pattern's first ``layers`` letters, repeating it when
``layers`` is longer. Squared ReLU is priced as ReLU until ``graphs.zoo.ACT_PW`` has
``relu2``. Not modelled: the routers' sigmoid scoring and score-correction bias (a
buffer, not a parameter), and Super's multi-token-prediction block (``mtp_hybrid_
override_pattern`` ``*E``, 2.94B parameters, which Megatron-Bridge's Super recipes run
twice a step with shared weights).

============== ====== ===== ==================== ======= ====== ====== ===== ======
name           layers width M / * / E            experts top_k  moe_ff latent total
============== ====== ===== ==================== ======= ====== ====== ===== ======
nemotron-3-nano  52   2688  23 / 6 / 23          128 + 1 6      1856   -     31.58B
nemotron-3-super 88   4096  40 / 8 / 40          512 + 1 22     2688   1024  120.67B
============== ====== ===== ==================== ======= ====== ====== ===== ======
"""
from __future__ import annotations

import math

from pase.builder import GraphBuilder, Value, routing_groups
from pase.graphs import blocks, mamba
from pase.graphs.llama import decoder, finish
from pase.graphs.moe import moe_mlp
from pase.graphs.zoo import ACT_PW, ROLES, register_presets, require
from pase.ir import Graph

ACT = "relu2" if "relu2" in ACT_PW else "relu"
NANO_PATTERN = "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME"
SUPER_PATTERN = ("MEMEMEM*EMEMEMEM*EMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*"
                 "EMEMEMEM*EMEMEMEME")


def pattern(published: str, layers: int) -> str:
    """The first ``layers`` letters of the published pattern, repeated as needed."""
    return (published * math.ceil(layers / len(published)))[:layers]


def latent_moe(b: GraphBuilder, x: Value, p: str, *, latent: int, experts: int, top_k: int,
               ff: int, capacity_factor: float) -> Value:
    """LatentMoE: route on ``x``, run the experts in ``latent`` width, project back."""
    _, seq, width = x.shape
    capacity = min(seq, math.ceil(capacity_factor * top_k * seq / experts))
    logits = b.einsum("ble,ex->blx", x, b.input((width, experts), names=("e", "x")),
                      name=f"{p}.router", roles=ROLES)
    probs = b.softmax(logits, axis=2, name=f"{p}.router_softmax")
    gates = b.top_k(probs, top_k, axis=2, normalize=True, name=f"{p}.top_k")
    down = b.einsum("ble,ei->bli", x, b.input((width, latent), names=("e", "i")),
                    name=f"{p}.fc1_latent_proj", roles=ROLES)
    groups = routing_groups(seq, capacity)
    buf = b.moe_dispatch(down, gates, capacity, top_k, name=f"{p}.dispatch", groups=groups)
    h = b.einsum("xbce,xef->xbcf", buf, b.input((experts, latent, ff), names=("x", "e", "f")),
                 pw=ACT_PW[ACT], act=ACT, name=f"{p}.experts.up", roles=ROLES)
    y = b.einsum("xbcf,xfe->xbce", h, b.input((experts, ff, latent), names=("x", "f", "e")),
                 name=f"{p}.experts.down", roles=ROLES)
    y = b.moe_combine(y, gates, top_k, name=f"{p}.combine", groups=groups)
    return b.einsum("bli,ie->ble", y, b.input((latent, width), names=("i", "e")),
                    name=f"{p}.fc2_latent_proj", roles=ROLES)


def _moe(b: GraphBuilder, h: Value, p: str, o: dict) -> Value:
    if o.get("latent"):
        routed = latent_moe(b, h, p, latent=o["latent"], experts=o["experts"], top_k=o["top_k"],
                            ff=o["moe_ff"], capacity_factor=o["capacity_factor"])
    else:
        routed = moe_mlp(b, h, p, experts=o["experts"], top_k=o["top_k"], ff=o["moe_ff"],
                         capacity_factor=o["capacity_factor"], act=ACT, gated=False,
                         normalize=True)
    shared = blocks.mlp(b, h, o["shared_ff"] * o["shared_experts"], f"{p}.shared_experts",
                        act=ACT)
    return blocks.residual(b, routed, shared, f"{p}.sum")


def nemotron3(model: str, *, published: str, **o) -> Graph:
    require(model, o["top_k"] <= o["experts"],
            f"top_k ({o['top_k']}) must be at most experts ({o['experts']})")
    require(model, o["heads"] % o["kv_heads"] == 0,
            f"kv_heads ({o['kv_heads']}) must divide heads ({o['heads']})")
    mamba.check(model, seq=o["seq"], heads=o["mamba_heads"], groups=o["groups"], chunk=o["chunk"])
    b, x = decoder(model, o["batch"], o["seq"], o["vocab"], o["width"])
    for i, kind in enumerate(pattern(published, o["layers"])):
        p = f"layers{i}"
        h = blocks.norm(b, x, "rms", f"{p}.norm")
        if kind == "M":
            h = mamba.mixer(b, h, f"{p}.mixer", heads=o["mamba_heads"], head_dim=o["mamba_head_dim"],
                            state=o["state"], groups=o["groups"], conv_kernel=o["conv_kernel"],
                            chunk=o["chunk"])
        elif kind == "*":
            h = blocks.attention(b, [h], f"{p}.attn", heads=o["heads"], kv_heads=o["kv_heads"],
                                 d_k=o["head_dim"], causal=True)
        else:
            h = _moe(b, h, f"{p}.moe", o)
        x = blocks.residual(b, x, h, f"{p}.residual")
    return finish(b, x, o["vocab"])


def _nano(model: str, **o) -> Graph:
    return nemotron3(model, published=NANO_PATTERN, **o)


def _super(model: str, **o) -> Graph:
    return nemotron3(model, published=SUPER_PATTERN, **o)


_COMMON = {"batch": 8, "seq": 4096, "heads": 32, "kv_heads": 2, "head_dim": 128,
           "mamba_head_dim": 64, "state": 128, "groups": 8, "conv_kernel": 4, "chunk": 128,
           "shared_experts": 1, "vocab": 131072, "capacity_factor": 1.0}
_TINY = {"batch": 4, "seq": 16, "layers": 6, "width": 32, "heads": 4, "kv_heads": 2,
         "head_dim": 8, "mamba_heads": 8, "mamba_head_dim": 4, "state": 8, "groups": 2,
         "chunk": 8, "moe_ff": 16, "shared_ff": 32, "experts": 4, "top_k": 2, "latent": 16,
         "vocab": 64}

register_presets(_nano, {"nemotron-3-nano": (
    "NVIDIA Nemotron 3 Nano 30B-A3B: 52 hybrid layers (23 Mamba-2, 6 attention, 23 MoE of "
    "128 experts top 6 + 1 shared), width 2688",
    {**_COMMON, "layers": 52, "width": 2688, "mamba_heads": 64, "moe_ff": 1856,
     "shared_ff": 3712, "experts": 128, "top_k": 6})}, tiny=_TINY)
register_presets(_super, {"nemotron-3-super": (
    "NVIDIA Nemotron 3 Super 120B-A12B: 88 hybrid layers (40 Mamba-2, 8 attention, 40 latent "
    "MoE of 512 experts top 22 + 1 shared), width 4096 (no multi-token prediction)",
    {**_COMMON, "layers": 88, "width": 4096, "mamba_heads": 128, "moe_ff": 2688,
     "shared_ff": 5376, "experts": 512, "top_k": 22, "latent": 1024})},
    tiny={**_TINY, "layers": 8})

"""BERT (Devlin et al. 2019): a post-LayerNorm transformer encoder with a pooler and a
masked-LM head.

Word, token-type and learned position embeddings summed (the position table is a
parameter operand of that Elementwise add) and normalised; per layer ``x =
norm(x + attn(x))``, ``x = norm(x + mlp(x))`` with GELU and biases everywhere; a
pooler (``tanh(W x[:, 0] + b)``, its input a Slice of the first token) and the
masked-LM head of Hugging Face ``BertForMaskedLM`` (dense + GELU, LayerNorm, a
decoder tied to the word embeddings with its own bias) over every token.

========== ====== ===== ===== ==== ===== ===
name       layers width heads ff   vocab seq
========== ====== ===== ===== ==== ===== ===
bert-base  12     768   12    3072 30522 512
bert-large 24     1024  16    4096 30522 512
========== ====== ===== ===== ==== ===== ===
"""
from __future__ import annotations

from pase.builder import GraphBuilder
from pase.graphs import blocks
from pase.graphs.zoo import ACT_PW, ROLES, register_presets, require
from pase.ir import Graph


def bert(model: str, *, batch: int, seq: int, layers: int, width: int, heads: int, ff: int,
         vocab: int, positions: int, type_vocab: int) -> Graph:
    require(model, width % heads == 0, f"heads ({heads}) must divide width ({width})")
    require(model, seq <= positions, f"seq ({seq}) must be at most positions ({positions})")
    b = GraphBuilder(model, cutoff=1, batch=batch)
    words = b.embedding(b.input((batch, seq), names=("b", "l")), vocab, width,
                        name="word_embeddings")
    types = b.embedding(b.input((batch, seq), names=("b", "l")), type_vocab, width,
                        name="token_type_embeddings")
    x = b.elementwise(words, types, name="embeddings", weights=[(positions, width)])
    x = blocks.norm(b, x, "layer", "embeddings.norm")
    d_k = width // heads
    for i in range(layers):
        p = f"layer{i}"
        h = blocks.attention(b, [x], f"{p}.attn", heads=heads, kv_heads=heads, d_k=d_k, bias=True)
        x = blocks.norm(b, blocks.residual(b, x, h, f"{p}.attn_residual"), "layer", f"{p}.attn_norm")
        h = blocks.mlp(b, x, ff, f"{p}.mlp", act="gelu", bias=True)
        x = blocks.norm(b, blocks.residual(b, x, h, f"{p}.mlp_residual"), "layer", f"{p}.mlp_norm")
    first = b.slice(x, axis=1, start=0, stop=1, name="pooler.first_token")
    b.einsum("ble,ef->blf", first, b.input((width, width), names=("e", "f")), pw=ACT_PW["tanh"],
             act="tanh", bias="f", name="pooler", roles=ROLES)
    h = b.einsum("ble,ef->blf", x, b.input((width, width), names=("e", "f")), pw=ACT_PW["gelu"],
                 act="gelu", bias="f", name="mlm.transform", roles=ROLES)
    h = blocks.norm(b, h, "layer", "mlm.norm")
    logits = blocks.lm_head(b, h, vocab, "mlm.decoder", tied="word_embeddings", bias=True)
    b.softmax_cross_entropy(logits, name="loss")
    return b.build()


def _preset(layers: int, width: int, heads: int) -> dict:
    return {"batch": 32, "seq": 512, "layers": layers, "width": width, "heads": heads,
            "ff": 4 * width, "vocab": 30522, "positions": 512, "type_vocab": 2}


register_presets(bert, {
    "bert-base": ("BERT base: 12 layers, width 768, GELU, pooler and masked-LM head, sequence 512",
                  _preset(12, 768, 12)),
    "bert-large": ("BERT large: 24 layers, width 1024, 16 heads", _preset(24, 1024, 16)),
}, tiny={"batch": 4, "seq": 16, "layers": 2, "width": 32, "heads": 4, "ff": 64, "vocab": 64,
         "positions": 16})

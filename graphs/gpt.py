"""GPT-2 (Radford et al. 2019) and GPT-3 (Brown et al. 2020): decoder-only transformers.

Token embedding plus a learned position table (an Elementwise add with a
parameter operand), pre-LayerNorm blocks with causal self-attention and a GELU
MLP, biases on every projection, a final LayerNorm and an LM head tied to the
token embedding (Hugging Face ``GPT2LMHeadModel``). GPT-3 has the same layout
(its alternating locally banded sparse attention is not modelled: every layer
is dense), a 2048-token context, ``ff = 4 width`` and ``d_k = width / heads``.

Presets (``pase.load_graph("gpt2", layers=2)`` overrides any option):

=========== ====== ===== ===== ====== =====
name        layers width heads seq    vocab
=========== ====== ===== ===== ====== =====
gpt2        12     768   12    1024   50257
gpt2-medium 24     1024  16    1024   50257
gpt2-large  36     1280  20    1024   50257
gpt2-xl     48     1600  25    1024   50257
gpt3        12     768   12    2048   50257   (GPT-3 Small; set the sizes by options)
gpt3-175b   96     12288 96    2048   50257
=========== ====== ===== ===== ====== =====

The ``gpt3`` family's published sizes (layers, width, heads): Small 12/768/12,
Medium 24/1024/16, Large 24/1536/16, XL 24/2048/24, 2.7B 32/2560/32, 6.7B
32/4096/32, 13B 40/5140/40, 175B 96/12288/96.
"""
from __future__ import annotations

from pase.builder import GraphBuilder
from pase.graphs import blocks
from pase.graphs.zoo import register_presets, require
from pase.ir import Graph


def gpt(model: str, *, batch: int, seq: int, layers: int, width: int, heads: int, ff: int,
        vocab: int, positions: int) -> Graph:
    """A GPT-2 style decoder; ``positions`` rows in the learned position table (0: ``seq``);
    ``ff`` 0 is GPT-3's ``4 width``."""
    ff, positions = ff or 4 * width, positions or seq
    require(model, width % heads == 0, f"heads ({heads}) must divide width ({width})")
    require(model, seq <= positions, f"seq ({seq}) must be at most positions ({positions})")
    b = GraphBuilder(model, cutoff=1, batch=batch)
    ids = b.input((batch, seq), names=("b", "l"))
    x = b.embedding(ids, vocab, width, name="wte")
    x = b.elementwise(x, name="wpe", weights=[(positions, width)])
    for i in range(layers):
        x = blocks.pre_norm_layer(b, x, f"h{i}", heads=heads, kv_heads=heads, d_k=width // heads,
                                  ff=ff, act="gelu", norm_kind="layer", causal=True, bias=True)
    x = blocks.norm(b, x, "layer", "ln_f")
    logits = blocks.lm_head(b, x, vocab, "lm_head", tied="wte")
    b.softmax_cross_entropy(logits, name="loss")
    return b.build()


TINY = {"batch": 4, "seq": 16, "layers": 2, "width": 32, "heads": 4, "ff": 64, "vocab": 64,
        "positions": 16}


def _preset(layers: int, width: int, heads: int, seq: int, batch: int) -> dict:
    return {"batch": batch, "seq": seq, "layers": layers, "width": width, "heads": heads,
            "ff": 4 * width, "vocab": 50257, "positions": seq}


def _gpt3(layers: int, width: int, heads: int) -> dict:
    """GPT-3's sizes: ``ff`` and ``positions`` 0 follow the width (4x) and the sequence,
    so a size given by options (``width=6144 seq=4096``) stays a GPT-3."""
    return {**_preset(layers, width, heads, 2048, 8), "ff": 0, "positions": 0}


register_presets(gpt, {
    "gpt3": ("GPT-3 family, sizes by options (default GPT-3 Small: 12 layers, width 768; ff 4 "
             "width and positions seq unless given)", _gpt3(12, 768, 12)),
    "gpt3-175b": ("GPT-3 175B: 96 layers, width 12288, 96 heads, sequence 2048",
                  _gpt3(96, 12288, 96)),
}, tiny=TINY, zero_ok=("ff", "positions"))
register_presets(gpt, {
    "gpt2": ("GPT-2 small (124M): 12 layers, width 768, causal, tied LM head",
             _preset(12, 768, 12, 1024, 16)),
    "gpt2-medium": ("GPT-2 medium (355M): 24 layers, width 1024", _preset(24, 1024, 16, 1024, 16)),
    "gpt2-large": ("GPT-2 large (774M): 36 layers, width 1280", _preset(36, 1280, 20, 1024, 16)),
    "gpt2-xl": ("GPT-2 XL (1.5B): 48 layers, width 1600, 25 heads",
                _preset(48, 1600, 25, 1024, 16)),
}, tiny=TINY)


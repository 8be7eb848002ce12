"""Nemotron-4 (NVIDIA 2024): Nemotron-4 15B and Nemotron-4 340B, dense decoders.

Token embedding, pre-LayerNorm blocks (scale and shift) with causal rotary
grouped-query attention (8 kv heads) and a squared-ReLU MLP (``fc2(relu(fc1 x)^2)``,
not gated: ``act: relu2``), no biases on any projection, a final LayerNorm and an
untied LM head (Megatron-LM's ``GPTModel`` as Nemotron-4 trains it; Hugging Face
``NemotronForCausalLM``). Nemotron rotates half of each head's features
(``partial_rotary_factor`` 0.5); the graph's rotary ops take the whole head, a
point-wise difference with no parameter. Sequence 4096.

============== ====== ===== ===== ======== ===== ======
name           layers width heads kv_heads ff    vocab
============== ====== ===== ===== ======== ===== ======
nemotron4-15b  32     6144  48    8        24576 256000
nemotron4-340b 96     18432 96    8        73728 256000
============== ====== ===== ===== ======== ===== ======
"""
from __future__ import annotations

from pase.graphs import blocks
from pase.graphs.llama import check_heads, decoder, finish
from pase.graphs.zoo import register_presets
from pase.ir import Graph


def nemotron4(model: str, *, batch: int, seq: int, layers: int, width: int, heads: int,
              kv_heads: int, ff: int, vocab: int) -> Graph:
    check_heads(model, width, heads, kv_heads)
    b, x = decoder(model, batch, seq, vocab, width)
    for i in range(layers):
        x = blocks.pre_norm_layer(b, x, f"layers{i}", heads=heads, kv_heads=kv_heads,
                                  d_k=width // heads, ff=ff, act="relu2", norm_kind="layer",
                                  causal=True, bias=False, rotary=True)
    return finish(b, x, vocab, "layer")


def _preset(layers: int, width: int, heads: int, ff: int) -> dict:
    return {"batch": 8, "seq": 4096, "layers": layers, "width": width, "heads": heads,
            "kv_heads": 8, "ff": ff, "vocab": 256000}


register_presets(nemotron4, {
    "nemotron4-15b": ("Nemotron-4 15B: 32 layers, width 6144, 8 kv heads, squared-ReLU MLP, "
                      "vocabulary 256000", _preset(32, 6144, 48, 24576)),
    "nemotron4-340b": ("Nemotron-4 340B: 96 layers, width 18432, 96 heads, 8 kv heads, ff 73728",
                       _preset(96, 18432, 96, 73728)),
}, tiny={"batch": 4, "seq": 16, "layers": 2, "width": 32, "heads": 4, "kv_heads": 2, "ff": 64,
         "vocab": 64})

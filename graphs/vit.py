"""Vision Transformer (Dosovitskiy et al. 2021), as timm's ``vit_*_patch16_224``.

Patch embedding: a ``patch x patch`` convolution with stride ``patch`` is exactly a
GEMM over flattened patches, so the image enters as ``(b, patches, 3 patch^2)``
(flattening is a free reshape of the input data) and one Einsum ``bli,ie->ble``
with a bias embeds it. A class token (a parameter Concat-ed before the patches)
and a learned position table (a parameter operand of an Elementwise add) follow;
then pre-LayerNorm blocks (GELU MLP, biases), a final LayerNorm, a Slice of the
class token and a 1000-class head.

======= ====== ===== ===== ==== ===== =====
name    layers width heads ff   image patch
======= ====== ===== ===== ==== ===== =====
vit-b16 12     768   12    3072 224   16
vit-l16 24     1024  16    4096 224   16
======= ====== ===== ===== ==== ===== =====
"""
from __future__ import annotations

from pase.builder import GraphBuilder
from pase.graphs import blocks
from pase.graphs.zoo import ROLES, register_presets, require
from pase.ir import Graph


def vit(model: str, *, batch: int, image: int, patch: int, channels: int, layers: int,
        width: int, heads: int, ff: int, classes: int) -> Graph:
    require(model, width % heads == 0, f"heads ({heads}) must divide width ({width})")
    require(model, image % patch == 0, f"patch ({patch}) must divide image ({image})")
    n = (image // patch) ** 2
    b = GraphBuilder(model, cutoff=1, batch=batch)
    pixels = b.input((batch, n, channels * patch * patch), names=("b", "l", "i"))
    x = b.einsum("bli,ie->ble", pixels, b.input((channels * patch * patch, width), names=("i", "e")),
                 bias="e", name="patch_embed", roles=ROLES)
    x = b.concat([x], axis=1, weights=[(1, 1, width)], name="cls_token")
    x = b.elementwise(x, name="pos_embed", weights=[(n + 1, width)])
    for i in range(layers):
        x = blocks.pre_norm_layer(b, x, f"blocks{i}", heads=heads, kv_heads=heads,
                                  d_k=width // heads, ff=ff, act="gelu", norm_kind="layer",
                                  causal=False, bias=True)
    x = blocks.norm(b, x, "layer", "norm")
    cls = b.slice(x, axis=1, start=0, stop=1, name="cls")
    logits = b.einsum("ble,en->bln", cls, b.input((width, classes), names=("e", "n")), bias="n",
                      name="head", roles=ROLES)
    b.softmax_cross_entropy(logits, name="loss")
    return b.build()


def _preset(layers: int, width: int, heads: int) -> dict:
    return {"batch": 128, "image": 224, "patch": 16, "channels": 3, "layers": layers,
            "width": width, "heads": heads, "ff": 4 * width, "classes": 1000}


register_presets(vit, {
    "vit-b16": ("ViT-B/16: 12 layers, width 768, 224x224 images, 1000 classes", _preset(12, 768, 12)),
    "vit-l16": ("ViT-L/16: 24 layers, width 1024, 16 heads", _preset(24, 1024, 16)),
}, tiny={"batch": 4, "image": 32, "patch": 8, "layers": 2, "width": 32, "heads": 4, "ff": 64,
         "classes": 10})

"""U-Net (Ronneberger et al. 2015) with the bilinear up-sampling most re-implementations use.

An encoder of ``depth + 1`` levels, each a double 3x3 conv (with BatchNorm, as in
today's re-implementations) and, below the first, a 2x2 max pool; a decoder that at
each level resizes bilinearly by 2, halves the channels with a 3x3 conv (the paper's
2x2 up-convolution, here as resize + conv), concatenates the encoder's output of that
level (the skip) on the channels and applies a double 3x3 conv; a 1x1 head and a
per-pixel cross-entropy. ``depth`` is the number of skips: each joins an early layer to
a late one, the long-skip case for the dp's dependent sets (medical imaging, diffusion).
"""
from __future__ import annotations

from pase.builder import GraphBuilder, Value
from pase.graphs.zoo import register_presets, require
from pase.ir import Graph


def _double(b: GraphBuilder, x: Value, out: int, name: str) -> Value:
    for i in (1, 2):
        x = b.conv(x, (out, x.shape[1], 3, 3), pad=1, name=f"{name}.conv{i}")
        x = b.batch_norm(x, weights=2, name=f"{name}.bn{i}")
    return x


def unet(model: str, *, batch: int, image: int, channels: int, classes: int, width: int,
         depth: int) -> Graph:
    require(model, image % 2 ** depth == 0,
            f"image {image} must be divisible by 2**depth = {2 ** depth}")
    b = GraphBuilder(model, cutoff=4, batch=batch)
    x = b.input((batch, channels, image, image))
    skips = []
    for level in range(depth + 1):
        if level:
            x = b.pool(x, 2, 2, name=f"down{level}.pool")
        x = _double(b, x, width * 2 ** level, f"down{level}")
        skips.append(x)
    skips.pop()  # the bottom level is not a skip
    for level in reversed(range(depth)):
        size = x.shape[2] * 2
        x = b.resize(x, (size, size), mode="linear", name=f"up{level}.resize")
        x = b.conv(x, (width * 2 ** level, x.shape[1], 3, 3), pad=1, name=f"up{level}.conv")
        x = b.concat([skips.pop(), x], axis=1, name=f"up{level}.concat")
        x = _double(b, x, width * 2 ** level, f"up{level}")
    x = b.conv(x, (classes, x.shape[1], 1, 1), name="head")
    b.softmax_cross_entropy(x, name="loss")
    return b.build()


register_presets(unet, {
    "unet": ("U-Net: 4 skip levels, width 64, 256x256 images (Ronneberger 2015, bilinear up)",
             {"batch": 16, "image": 256, "channels": 3, "classes": 2, "width": 64, "depth": 4})},
    tiny={"batch": 2, "image": 32, "channels": 3, "classes": 2, "width": 8, "depth": 2})

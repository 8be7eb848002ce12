"""Every ATen op pase models, by name: :data:`HANDLERS` (op name -> handler).

The handlers live in :mod:`pase.frontends.torch_ops_math` (products, norms, attention,
element-wise ops, embeddings, losses), :mod:`pase.frontends.torch_ops_conv`
(convolutions, pooling, resizing), :mod:`pase.frontends.torch_ops_shape` (views, joins
and splits, constants) and :mod:`pase.frontends.torch_ops_index` (indexing, gathers,
pads, rolls, scans);
importing this module registers them all.
"""
from __future__ import annotations

from pase.frontends import (  # noqa: F401  (they register)
    torch_ops_conv,
    torch_ops_index,
    torch_ops_math,
    torch_ops_shape,
)
from pase.frontends.torch_handlers import HANDLERS

__all__ = ["HANDLERS"]

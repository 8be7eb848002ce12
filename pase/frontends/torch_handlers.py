"""The registry of ATen handlers and the small helpers they share.

A handler takes the walk, the FX node and its arguments bound by name, and
returns the node's value: a :class:`~pase.frontends.torch_values.TV`, a tuple of
them, or a Python value. :data:`HANDLERS` maps an op's name (``linear``,
``conv2d``...) to its handler; :mod:`pase.frontends.torch_ops` fills it.
"""
from __future__ import annotations

from typing import Any, Callable

from pase.frontends.torch_values import TV
from pase.frontends.torch_walk import Walk

Handler = Callable[[Walk, Any, dict], Any]
HANDLERS: dict[str, Handler] = {}


def handles(*names: str):
    def deco(fn: Handler) -> Handler:
        for n in names:
            HANDLERS[n] = fn
        return fn
    return deco

def node_shape(node: Any) -> tuple[int, ...]:
    """The static shape of an FX node's value (its ``meta["val"]``)."""
    val = node.meta.get("val")
    return tuple(int(s) for s in val.shape)

def wrap_dim(d: int, rank: int) -> int:
    """An ATen dim argument (negative counts from the end) as an index in ``0..rank-1``."""
    return d % rank if rank else 0

def as_list(v: Any) -> list:
    """An ATen int-or-list argument as a list."""
    return list(v) if isinstance(v, (list, tuple)) else [v]

def dim_letters(n: int) -> list[str]:
    """The first ``n`` einsum letters for an op's leading dims."""
    return list("abcdefghijklmnopqrstuvw"[:n])

def as_pair(v: Any) -> tuple[int, int]:
    """A convolution argument (an int or a list of one or two) as a (height, width) pair."""
    if isinstance(v, (list, tuple)):
        return (int(v[0]), int(v[-1])) if v else (1, 1)
    return (int(v), int(v))

def split_at(atoms, leaves: list[int], size: int) -> tuple[list[int], list[int]]:
    """``leaves`` cut where the product of their atom sizes first reaches ``size``: (first part, rest)."""
    p, i = 1, 0
    while p < size:
        p *= atoms.size[leaves[i]]
        i += 1
    return leaves[:i], leaves[i:]


def integral(node: Any) -> bool:
    """Whether every tensor ``node`` makes is of an integer or boolean type (indices,
    masks, positions: no gradient, constants to pase)."""
    val = node.meta.get("val")
    vals = val if isinstance(val, (tuple, list)) else [val]
    tensors = [v for v in vals if hasattr(v, "dtype")]
    return bool(tensors) and not any(v.dtype.is_floating_point or v.dtype.is_complex
                                     for v in tensors)


def constant(w: Walk, node: Any) -> Any:
    """``node``'s value as constants (one per tensor it makes), in no op's data."""
    val = node.meta.get("val")
    if isinstance(val, (tuple, list)):
        return tuple(TV(w.fresh(tuple(v.shape)), [], "const") if hasattr(v, "shape") else None
                     for v in val)
    return TV(w.fresh(tuple(getattr(val, "shape", ()))), [], "const")

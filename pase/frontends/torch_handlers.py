"""The registry of ATen handlers and the small helpers they share.

A handler takes the walk, the FX node and its arguments bound by name, and
returns the node's value: a :class:`~pase.frontends.torch_values.TV`, a tuple of
them, or a Python value. :data:`HANDLERS` maps an op's name (``linear``,
``conv2d``...) to its handler; :mod:`pase.frontends.torch_ops` fills it.
"""
from __future__ import annotations

from typing import Any, Callable

from pase.frontends.torch_walk import Walk

Handler = Callable[[Walk, Any, dict], Any]
HANDLERS: dict[str, Handler] = {}


def handles(*names: str):
    def deco(fn: Handler) -> Handler:
        for n in names:
            HANDLERS[n] = fn
        return fn
    return deco

def _shape(node: Any) -> tuple[int, ...]:
    val = node.meta.get("val")
    return tuple(int(s) for s in val.shape)

def _dim(d: int, rank: int) -> int:
    return d % rank if rank else 0

def _list(v: Any) -> list:
    return list(v) if isinstance(v, (list, tuple)) else [v]

def _letters(n: int) -> list[str]:
    return list("abcdefghijklmnopqrstuvw"[:n])

def _pair(v: Any) -> tuple[int, int]:
    if isinstance(v, (list, tuple)):
        return (int(v[0]), int(v[-1])) if v else (1, 1)
    return (int(v), int(v))

def _split_at(atoms, leaves: list[int], size: int) -> tuple[list[int], list[int]]:
    p, i = 1, 0
    while p < size:
        p *= atoms.size[leaves[i]]
        i += 1
    return leaves[:i], leaves[i:]

"""Splits that pad: a vocabulary split by a factor that does not divide it, as Megatron-LM runs it.

Megatron-LM's vocabulary-parallel embedding, head and loss pad the vocabulary to a
multiple of the tensor-parallel degree: each rank holds ``ceil(V / f)`` rows, the last
one's padded. The layout path prices that tile (:func:`pase.perf.layout.padded_extent`);
the calibrated model's space holds such splits (:data:`pase.space.PADDED_ROLES`), and
this module prices them the same way: a config that splits a padded-role dim ``f`` ways
where ``f`` does not divide it is priced on the op padded there, that dim (and every
tensor axis it splits) ``f * ceil(V / f)`` long, so each device's tile is
``ceil(V / f)``. Everything the calibrated model reads of the op then sees the padded
extent alike: FLOP, kernels, bytes kept, parameters and states, collectives, re-layouts.
Configs with different paddings are priced apart and put back in order
(:func:`stitched`); an op whose configs all divide is priced as it is. An edge is priced
on its producer's padded ops (the tiles a re-layout moves are the producer's; the
consumer's kernels that hide it are padded where they are priced).
"""
from __future__ import annotations

import dataclasses
from functools import lru_cache
from typing import Sequence

import numpy as np

from pase.ir import Op, Port
from pase.perf.layout import padded_extent
from pase.work.tiles import port_tiles


def padded_sizes(op: Op, configs: np.ndarray, roles: Sequence[str]) -> np.ndarray | None:
    """Per config, the size each dim is priced at, ``(K, ndims)``: a dim of ``roles`` split
    by a factor that does not divide it at ``factor * ceil(size / factor)``, the rest at
    their size; None when no config pads."""
    dims = [i for i, d in enumerate(op.dims) if d.role in roles]
    if not dims or not len(configs):
        return None
    configs = np.asarray(configs, dtype=np.int64)
    sizes = np.broadcast_to(np.asarray(op.shape, dtype=np.int64), configs.shape).copy()
    for i in dims:
        sizes[:, i] = configs[:, i] * padded_extent(op.dims[i].size, configs[:, i])
    return None if (sizes == np.asarray(op.shape)).all() else sizes


def groups(op: Op, configs: np.ndarray, roles: Sequence[str]) -> list[tuple[Op, np.ndarray]] | None:
    """``[(op priced, row indices)]``: the configs of ``op`` by the op they are priced on
    (:func:`padded_op`), or None when no config pads."""
    sizes = padded_sizes(op, configs, roles)
    if sizes is None:
        return None
    distinct, of = np.unique(sizes, axis=0, return_inverse=True)
    of = of.reshape(-1)
    return [(padded_op(op, tuple(int(s) for s in row)), np.flatnonzero(of == k))
            for k, row in enumerate(distinct)]


@lru_cache(maxsize=256)
def padded_op(op: Op, sizes: tuple[int, ...]) -> Op:
    """``op`` with its dims at ``sizes``, each port axis a padded dim splits grown alike
    (an axis of several dims by the padded one's ratio); ``op`` itself when nothing grows."""
    if sizes == op.shape:
        return op
    grown = {d.name: (d.size, s) for d, s in zip(op.dims, sizes) if s != d.size}

    def port(p: Port) -> Port:
        shape = list(p.shape)
        for a, names in enumerate(p.dims):
            for name in names:
                if name in grown:
                    old, new = grown[name]
                    shape[a] = shape[a] // old * new
        return dataclasses.replace(p, shape=tuple(shape))

    return dataclasses.replace(
        op, dims=tuple(dataclasses.replace(d, size=s) for d, s in zip(op.dims, sizes)),
        inputs=tuple(port(p) for p in op.inputs), outputs=tuple(port(p) for p in op.outputs),
        weights=tuple(port(p) for p in op.weights))


def same_port(padded: Op, op: Op, p: Port) -> Port:
    """The port of ``padded`` that is ``op``'s port ``p`` (found by identity: the calibrated
    model tells an op's ports apart by it)."""
    if padded is op:
        return p
    for mine, theirs in ((op.inputs, padded.inputs), (op.outputs, padded.outputs),
                         (op.weights, padded.weights)):
        for a, b in zip(mine, theirs):
            if a is p:
                return b
    raise ValueError(f"port {p} is not one of op {op.name!r}'s")


def stitched(op: Op, configs: np.ndarray, parts: list[tuple[np.ndarray, object]]):
    """One work record of ``op`` over all ``configs`` from each group's (``(rows, work)``,
    :func:`groups`): every per-config array put back in row order; the collectives, which
    an op's kind fixes (the same list in each group), with their bytes merged alike; and
    each weight's padded tile (``weight_tiles``, which a ZeRO variant's states read)."""
    first = parts[0][1]
    K = len(configs)
    fields = {}
    for f in dataclasses.fields(first):
        values = [getattr(w, f.name) for _, w in parts]
        if f.name == "op":
            fields[f.name] = op
        elif f.name == "configs":
            fields[f.name] = np.asarray(configs, dtype=np.int64)
        elif f.name == "collectives":
            fields[f.name] = _collectives(K, [(rows, w.collectives) for rows, w in parts])
        elif f.name == "weight_tiles":  # each group's weights at its padded tiles
            fields[f.name] = tuple(
                _scatter(K, [(rows, np.prod(port_tiles(w.op, w.op.weights[j], w.configs), axis=1))
                             for rows, w in parts]) for j in range(len(op.weights)))
        elif isinstance(values[0], np.ndarray):
            fields[f.name] = _scatter(K, [(rows, v) for (rows, _), v in zip(parts, values)])
        elif isinstance(values[0], tuple):  # per-port tile arrays
            fields[f.name] = tuple(_scatter(K, [(rows, v[j]) for (rows, _), v in zip(parts, values)])
                                   for j in range(len(values[0])))
        else:  # None or a scalar the op fixes
            fields[f.name] = values[0]
    return type(first)(**fields)


def _collectives(K: int, parts: list[tuple[np.ndarray, tuple]]) -> tuple:
    first = parts[0][1]
    for _, colls in parts[1:]:
        assert [_shape(c) for c in colls] == [_shape(c) for c in first], "collectives differ"
    return tuple(dataclasses.replace(
        c, nbytes=_scatter(K, [(rows, colls[j].nbytes) for rows, colls in parts]),
        rounds=_scatter(K, [(rows, colls[j].rounds) for rows, colls in parts]))
        for j, c in enumerate(first))


def _shape(c) -> tuple:
    return (c.kind, c.phase, c.dims, c.label, c.port, c.weight)


def _scatter(K: int, parts: list[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    """Per-config values of each group (a 0-d value: the same for its rows) in row order."""
    arrays = [(rows, np.asarray(v)) for rows, v in parts]
    tail = next((v.shape[1:] for _, v in arrays if v.ndim), ())
    out = np.zeros((K,) + tail, dtype=np.result_type(*(v for _, v in arrays)))
    for rows, v in arrays:
        out[rows] = np.broadcast_to(v, (len(rows),) + tail) if v.ndim == 0 else v
    return out


__all__ = ["groups", "padded_op", "padded_sizes", "same_port", "stitched"]

"""The numeric kernel of the PaSE DP: broadcast sums of tables, chunked by rows.

Every table of the DP has one axis per vertex, ordered latest position first,
so a term over a subset of a step's axes broadcasts over them after
:func:`expand` inserts its missing axes. A step's sum has ``prod K`` entries
over ``D(i) + (v(i),)``, far more than its terms, so it is never built whole:

- :func:`fold` adds each small term into a larger one that spans its axes
  (a pass over the larger term, not over the step), leaving a few bases;
- :func:`row_blocks` sums the bases a few MiB of rows at a time, so the
  reductions stay in cache (on a 2 MiB-L2 EPYC 1-16 MiB chunks ran twice as
  fast as one 1 GiB array);
- :func:`min_plus` reduces each block over ``v(i)``: the value and argmin
  tables of the plain DP. The Lagrangian bounds and the Pareto screening
  reduce the same blocks their own way;
- a step whose one row passes the chunk is summed in tiles (:func:`tile_blocks`),
  a tile of its second axis for every row while it is in cache; rows of the first
  axis that every term holds alike are summed once (:func:`row_classes`); and where
  a CPU is spare (:func:`pase.forked.spare`) a step of ``SPLIT_MIN_ENTRIES`` or more
  sums the later half of its rows in a forked child, into tables both processes share.

What :func:`min_plus` allocates is exactly what :mod:`pase.solvers.dp.plan`
predicts, and a :class:`Ledger` checks it.
"""
from __future__ import annotations

import functools
import math
import mmap
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

import numpy as np

from pase import forked
from pase.deadline import check as check_deadline

if TYPE_CHECKING:
    from pase.solvers.dp.plan import Step

VALUE_BYTES = np.dtype(np.float64).itemsize
INDEX_BYTES = np.dtype(np.intp).itemsize
# Target size of one block of a step's broadcast sum (see the module docstring).
CHUNK_BYTES = 4 * 2**20
# Side of the square tiles a transposed matrix is copied in (:func:`c_copy`).
TILE = 256
# A tiled step of this many entries or more splits its rows with a forked child where a
# CPU is spare (:func:`pase.forked.spare`): a fork costs a few hundredths of a second.
SPLIT_MIN_ENTRIES = 10**9
# A tiled step compares its rows (:func:`row_classes`) when the bases over its first axis
# hold at most this fraction of its entries: the comparison then costs about 1% of it.
ROW_CLASSES_MAX_SHARE = 0.01

Axes = tuple[int, ...]


@functools.lru_cache(maxsize=None)
def argmin_dtype(k: int) -> np.dtype:
    """Smallest unsigned dtype that holds a candidate index below ``k``."""
    return np.min_scalar_type(max(k - 1, 0))


def expand(array: np.ndarray, axes: Axes, target: Axes) -> np.ndarray:
    """View of ``array`` (over ``axes``) with singleton axes, to broadcast over ``target``.

    Both axis tuples are in table order (latest position first), so no transpose.
    """
    present = set(axes)
    return np.asarray(array)[tuple(slice(None) if a in present else None for a in target)]


def fold(axes: Sequence[Axes], entries: Sequence[int]) -> tuple[tuple[int, ...], ...]:
    """Group terms (given by their axes and sizes): each joins the smallest base spanning it.

    Returns groups of term indices, each group's base first. Terms go largest
    first (ties keep their given order), so every term can fold into a base
    seen before it; a small child table then folds into an edge matrix
    instead of costing a pass over the whole step.
    """
    spans = [set(a) for a in axes]
    groups: list[list[int]] = []
    for k in sorted(range(len(axes)), key=lambda k: (-entries[k], -len(axes[k]))):
        hosts = [g for g in groups if spans[k] <= spans[g[0]]]
        if hosts:
            min(hosts, key=lambda g: entries[g[0]]).append(k)
        else:
            groups.append([k])
    return tuple(tuple(g) for g in groups)


class Ledger:
    """Bytes of the arrays the DP holds, to check the plan's prediction."""

    def __init__(self) -> None:
        self.held = 0
        self.peak = 0

    def alloc(self, *arrays: np.ndarray | None) -> None:
        self.held += sum(a.nbytes for a in arrays if a is not None)
        self.peak = max(self.peak, self.held)

    def free(self, *arrays: np.ndarray | None) -> None:
        self.held -= sum(a.nbytes for a in arrays if a is not None)


def folded(arrays: Sequence[np.ndarray], axes: Sequence[Axes], groups: Sequence[Sequence[int]],
           full: Axes, owned: int = 0, ledger: Ledger | None = None) -> list[np.ndarray]:
    """The bases of ``groups``, each holding its group's sum, as views over ``full``.

    The first ``owned`` arrays may be overwritten (a base among them is summed
    in place); any other base is a float64 copy, counted in ``ledger``.
    """
    bases = []
    for group in groups:
        head = group[0]
        if head < owned:
            base = arrays[head]
        else:
            base = c_copy(arrays[head])
            if ledger is not None:
                ledger.alloc(base)
        for k in group[1:]:
            np.add(base, expand(arrays[k], axes[k], axes[head]), out=base)
        bases.append(expand(base, axes[head], full))
    return bases


def c_copy(array: np.ndarray) -> np.ndarray:
    """A C-ordered float64 copy. A transposed matrix (an edge read against its stored
    orientation) is copied in square tiles: numpy's own copy walks it with a stride of
    a whole row and runs 1.3-3x slower on matrices of 1,000-4,000 configs a side."""
    if array.ndim != 2 or array.flags.c_contiguous or array.size < TILE * TILE \
            or array.dtype != np.float64:
        return np.array(array, dtype=np.float64, order="C", copy=True)
    out = np.empty(array.shape)
    rows, cols = array.shape
    for i in range(0, rows, TILE):
        for j in range(0, cols, TILE):
            out[i:i + TILE, j:j + TILE] = array[i:i + TILE, j:j + TILE]
    return out


def chunk_rows(shape: Axes) -> int:
    """Rows of the first axis per block: about CHUNK_BYTES of float64."""
    return max(1, min(shape[0], CHUNK_BYTES // (VALUE_BYTES * math.prod(shape[1:]))))


def chunk_cols(shape: Axes) -> int:
    """Where one row of the first axis (``shape``: the dependent axes, then ``v(i)``'s)
    holds more than CHUNK_BYTES of float64: rows of the second axis per block (a tile),
    so the broadcast buffer stays about CHUNK_BYTES; else 0 (whole rows). A row of a
    step over 332 x 5,113 x 3,534 configs is 144 MB: summed whole it streams the edge
    matrix and the buffer through main memory, and a fresh buffer faults its pages."""
    if len(shape) < 3 or VALUE_BYTES * math.prod(shape[1:]) <= CHUNK_BYTES:
        return 0
    return max(1, min(shape[1], CHUNK_BYTES // (VALUE_BYTES * math.prod(shape[2:]))))


def is_direct(bases: Sequence[np.ndarray], shape: Axes) -> bool:
    """One base spanning the whole shape: its row slices are the blocks, no buffer."""
    return len(bases) == 1 and bases[0].size == math.prod(shape)


def row_blocks(bases: Sequence[np.ndarray], shape: Axes, rows: int | None = None,
               buffer: np.ndarray | None = None) -> Iterator[tuple[int, int, np.ndarray]]:
    """``(r0, r1, block)``: rows ``r0:r1`` of the broadcast sum of ``bases`` over ``shape``.

    A block is a view of ``buffer`` (allocated here when not given), or of the
    one base when it spans ``shape``; it is overwritten by the next.
    """
    rows = chunk_rows(shape) if rows is None else rows
    direct = is_direct(bases, shape)
    if buffer is None and not direct:
        buffer = np.empty(rows * math.prod(shape[1:]))
    for r0 in range(0, shape[0], rows):
        r1 = min(r0 + rows, shape[0])
        parts = [b[r0:r1] if b.shape[0] != 1 else b for b in bases]
        if direct:
            yield r0, r1, parts[0]
        else:
            out = buffer[:(r1 - r0) * math.prod(shape[1:])].reshape((r1 - r0,) + shape[1:])
            yield r0, r1, sum_into(out, parts)


def tile_blocks(bases: Sequence[np.ndarray], shape: Axes, cols: int, buffer: np.ndarray,
                rows: Sequence[int] | None = None
                ) -> Iterator[tuple[tuple[int, slice], np.ndarray]]:
    """``((r, c0:c1), block)``: rows ``c0:c1`` of the second axis at row ``r`` of the first,
    of the broadcast sum of ``bases`` over ``shape`` (:func:`chunk_cols`), as a view of
    ``buffer``, overwritten by the next. The same additions as :func:`row_blocks`.

    Tiles go column range first, then every row ``r`` (of ``rows``, default all): a
    base over the second axis and ``v(i)`` (an edge matrix of 100+ MB) is then read
    from memory once, its tile staying in cache for every row, not once per row."""
    inner = math.prod(shape[2:])
    rows = range(shape[0]) if rows is None else rows
    for c0 in range(0, shape[1], cols):
        c1 = min(c0 + cols, shape[1])
        cut = slice(c0, c1)
        tiles = [b[:, cut] if b.shape[1] != 1 else b for b in bases]
        out = buffer[:(c1 - c0) * inner].reshape((c1 - c0,) + shape[2:])
        for r in rows:
            parts = [t[r if t.shape[0] != 1 else 0] for t in tiles]
            yield (r, cut), sum_into(out, parts)


def row_classes(bases: Sequence[np.ndarray], entries: int) -> tuple[np.ndarray, np.ndarray] | None:
    """``(first, source)`` where rows of the first axis repeat: rows ``r`` and ``s`` whose
    every base holds the same bytes at them have the same block, so the same minima and
    argmins. ``first`` lists each class's first row (ascending), ``source[r]`` the first row
    of ``r``'s class. None when under a tenth of the rows repeat, or when comparing them
    would cost more than ``ROW_CLASSES_MAX_SHARE`` of the step's ``entries`` (then every
    row is summed).

    On gpt3-175b's layer at p = 1,024 the previous separator's 332 states reach the
    block's widest step through a table of 156 distinct rows: half its work.
    """
    spanning = [b for b in bases if b.shape[0] != 1]
    if not spanning:
        return None
    n = spanning[0].shape[0]
    if n < 2:
        return None
    if sum(b.size for b in spanning) > ROW_CLASSES_MAX_SHARE * entries:
        return None
    keys = [np.ascontiguousarray(b).reshape(n, -1).view(np.uint8) for b in spanning]
    key = keys[0] if len(keys) == 1 else np.concatenate(keys, axis=1)
    key = np.ascontiguousarray(key)
    _, first, inverse = np.unique(key.view(np.dtype((np.void, key.shape[1]))).reshape(n),
                                  return_index=True, return_inverse=True)
    if first.size * 10 > n * 9:
        return None
    source = first[inverse.reshape(n)]
    return np.sort(first), source


def sum_into(out: np.ndarray, parts: Sequence[np.ndarray]) -> np.ndarray:
    """The broadcast sum of ``parts`` written into ``out`` (no temporaries).

    np.add into a buffer: np.array of a broadcast view takes a far slower copy path.
    """
    if len(parts) == 1:
        np.copyto(out, parts[0])
    else:
        np.add(parts[0], parts[1], out=out)
    for part in parts[2:]:
        np.add(out, part, out=out)
    return out


def min_plus(step: Step, terms: Sequence[np.ndarray], owned: int,
             ledger: Ledger) -> tuple[np.ndarray, np.ndarray]:
    """One DP step: the sum of ``terms`` minimised over ``v(i)``, with its argmin.

    ``terms`` are in the order of ``step.term_axes``; the first ``owned`` may be
    overwritten. Returns the value and argmin tables over ``D(i)``.
    """
    v = step.vertex
    full = step.dependent + (v,)
    bases = folded(terms, step.term_axes, step.groups, full, owned, ledger)
    *dep_shape, kv = step.shape
    lead = tuple(dep_shape) or (1,)  # a root gets a one-row leading axis
    if not dep_shape:
        bases = [b[None] for b in bases]
    split = bool(step.chunk_cols) and step.entries >= SPLIT_MIN_ENTRIES and forked.has_spare()
    value = _empty(dep_shape, np.float64, split)
    arg = _empty(dep_shape, argmin_dtype(kv), split)
    row_entries = math.prod(lead[1:])
    chunk = step.chunk_rows * row_entries if not step.chunk_cols else \
        step.chunk_cols * math.prod(lead[2:])
    index = np.empty(chunk, dtype=np.intp)
    offsets = np.arange(chunk, dtype=np.intp) * kv  # flat start of each row's v(i) axis
    buffer = None if step.direct else np.empty(chunk * kv)
    ledger.alloc(value, arg, index, offsets, buffer)
    value_rows, arg_rows = value.reshape(lead), arg.reshape(lead)

    def reduce(blocks: Iterator[tuple[tuple, np.ndarray]]) -> None:
        for where, block in blocks:
            # A step can hold most of the dp's work: the deadline is checked per block.
            check_deadline(f"the dp eliminated vertex {v}; the dp has no partial answer")
            e = block.size // kv
            ix = index[:e]
            np.argmin(block.reshape(e, kv), axis=1, out=ix)
            np.copyto(arg_rows[where].reshape(e), ix, casting="unsafe")
            np.add(ix, offsets[:e], out=ix)
            # mode="clip" keeps take from buffering its output (the indices are in range).
            np.take(block.reshape(-1), ix, out=value_rows[where].reshape(e), mode="clip")

    if not step.chunk_cols:
        reduce(((slice(r0, r1),), b) for r0, r1, b in row_blocks(bases, lead + (kv,),
                                                                   step.chunk_rows, buffer))
    else:
        _tiled(bases, lead + (kv,), step, buffer, reduce, split, value_rows, arg_rows)
    copies = [b for group, b in zip(step.groups, bases) if group[0] >= owned]
    ledger.free(index, offsets, buffer, *copies)  # views of the copies: the same bytes
    return value, arg


def _tiled(bases: Sequence[np.ndarray], shape: Axes, step: Step, buffer: np.ndarray,
           reduce, split: bool, value_rows: np.ndarray, arg_rows: np.ndarray) -> None:
    """A tiled step's rows reduced (:func:`tile_blocks`): each class of equal rows once
    (:func:`row_classes`), with ``split`` the later half in a forked child that writes
    into the same (shared) tables; then the repeated rows copied."""
    classes = row_classes(bases, step.entries)
    rows = np.arange(shape[0]) if classes is None else classes[0]

    def tiles(part: np.ndarray) -> None:
        reduce(tile_blocks(bases, shape, step.chunk_cols, buffer, part))

    if split and len(rows) > 1:
        beside = forked.Forked(functools.partial(tiles, rows[len(rows) // 2:]))
        try:
            tiles(rows[:len(rows) // 2])
        except BaseException:
            beside.cancel()
            raise
        beside.result()
    else:
        tiles(rows)
    if classes is not None:  # a repeated row: its class's first row's minima, copied
        repeated = np.flatnonzero(classes[1] != np.arange(shape[0]))
        value_rows[repeated] = value_rows[classes[1][repeated]]
        arg_rows[repeated] = arg_rows[classes[1][repeated]]


def _empty(shape: Sequence[int], dtype: np.dtype, shared: bool) -> np.ndarray:
    """``np.empty``, or the same in memory a forked child writes into the caller's too."""
    if not shared:
        return np.empty(shape, dtype=dtype)
    count = math.prod(shape)
    pages = mmap.mmap(-1, max(1, count * np.dtype(dtype).itemsize))  # anonymous, shared
    return np.frombuffer(pages, dtype=dtype, count=count).reshape(shape)

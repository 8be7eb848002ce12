"""Re-layouts with a side off the mesh: the worst receiver, one tensor axis at a time.

A placement off the mesh (:mod:`pase.work.layout`: an op whose device count does
not divide ``p`` runs on ranks ``0 .. P-1``) has no closed form like
:func:`pase.work.relayout.relayout_elements`; the elements a device receives are
``need - held``, ``held`` the product over tensor axes of the overlap of its source
and destination blocks on that axis, and the worst receiver holds the least.

:func:`by_device` counts that device by device for every pair of source and
destination rows: ``(S, D, p, rank)`` work. :func:`worst_received` gives the same
numbers, bit for bit, from per-axis tables: on one tensor axis the overlap at a
device depends only on that axis's two block indices, and the distinct per-axis
block patterns over devices are few. An axis whose overlap is the same on every
receiver is a constant factor; when at most one axis varies, the least product is
the product with that axis's least overlap (a product of non-negative floats is
monotone in each factor, so this is exact); only pairs with two or more varying
axes are multiplied device by device, once per distinct combination of per-axis
patterns.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from pase.deadline import check as check_deadline
from pase.gather import outer_take


def by_device(shape: Sequence[float], src_b: np.ndarray, src_f: np.ndarray, src_h: np.ndarray,
              dst_b: np.ndarray, dst_f: np.ndarray, dst_h: np.ndarray,
              chunk: int = 1 << 20) -> np.ndarray:
    """The reference: ``(S, D)`` most elements a device receives, counted on every device.

    ``src_b`` ``(S, n, rank)`` / ``dst_b`` ``(D, n, rank)`` are block indices on devices
    ``0 .. n-1``, ``src_f`` / ``dst_f`` the split factors per tensor axis, ``src_h`` /
    ``dst_h`` ``(., n)`` which devices hold a source tile / need a destination tile.
    Works in chunks of source rows of about ``chunk`` elements each.
    """
    rows_s, rows_d = len(src_b), len(dst_b)
    out = np.zeros((rows_s, rows_d))
    if rows_s == 0 or rows_d == 0:
        return out
    step = max(1, chunk // max(1, rows_d * src_b.shape[1] * src_b.shape[2]))
    for lo in range(0, rows_s, step):
        hi = lo + step
        out[lo:hi] = _by_device(shape, src_b[lo:hi, None], src_f[lo:hi, None], src_h[lo:hi, None],
                                dst_b[None], dst_f[None], dst_h[None])
    return out


def _by_device(shape, src_b, src_f, src_h, dst_b, dst_f, dst_h) -> np.ndarray:
    t = np.asarray(shape, dtype=np.float64)
    ts = t / src_f[..., None, :]
    td = t / dst_f[..., None, :]
    lo_s, lo_d = src_b * ts, dst_b * td
    per_axis = np.maximum(np.minimum(lo_s + ts, lo_d + td) - np.maximum(lo_s, lo_d), 0.0)
    held = np.where(src_h, np.prod(per_axis, axis=-1), 0.0)
    need = np.prod(td, axis=-1)
    return np.where(dst_h, np.maximum(need - held, 0.0), 0.0).max(axis=-1, initial=0.0)


@dataclass(frozen=True)
class Patterns:
    """One side of a re-layout on one tensor axis: its distinct per-axis patterns and
    each row's pattern (``of``, ``(K,)``). A pattern is a split ``factor`` and a block
    index on every device (``blocks``, ``(I, n)``); a receiving side's pattern also says
    which devices receive (``gets``, ``(I, n)``; None on the sending side) and names
    one receiver (``first``, ``(I,)``).

    Optional structure that lets a pair of patterns be read on fewer devices (each
    ``(I,)``; absent: none known): ``grain``, blocks (and ``gets``) are constant on
    aligned runs of that many devices; ``period``, blocks repeat with it on the holders;
    ``length``, the receivers are devices ``0 .. length-1``."""

    of: np.ndarray
    factor: np.ndarray
    blocks: np.ndarray
    gets: np.ndarray | None = None
    first: np.ndarray | None = None
    grain: np.ndarray | None = None
    period: np.ndarray | None = None
    length: np.ndarray | None = None

    def runs(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(grain, period, length)``, each ``(I,)``: 1, ``n`` and ``n`` where not known."""
        n, count = self.blocks.shape[1], len(self.factor)
        return tuple(np.full(count, default, dtype=np.int64) if got is None else np.asarray(got, np.int64)
                     for got, default in ((self.grain, 1), (self.period, n), (self.length, n)))


def axis_patterns(blocks: np.ndarray, factors: np.ndarray, gets: np.ndarray | None = None) -> Patterns:
    """The distinct patterns of rows' blocks ``(K, n)`` and factors ``(K,)`` on one axis
    (with ``gets`` ``(K, n)``, a receiving side's)."""
    parts = [np.asarray(factors, dtype=np.float64)[:, None], blocks.astype(np.float64)]
    if gets is not None:
        parts.append(gets.astype(np.float64))
    uniq, of = _unique_rows(np.concatenate(parts, axis=1))
    n = blocks.shape[1]
    if gets is None:
        return Patterns(of, uniq[:, 0], uniq[:, 1:n + 1].astype(np.int64))
    rgets = uniq[:, n + 1:] > 0
    return Patterns(of, uniq[:, 0], uniq[:, 1:n + 1].astype(np.int64), rgets, np.argmax(rgets, axis=1))


def worst_received(shape: Sequence[float], src_b: np.ndarray, src_f: np.ndarray, src_h: np.ndarray,
                   dst_b: np.ndarray, dst_f: np.ndarray, dst_h: np.ndarray) -> np.ndarray:
    """:func:`by_device`'s ``(S, D)`` result, from per-axis tables (equal bit for bit)."""
    S, D, rank = len(src_b), len(dst_b), len(shape)
    if S == 0 or D == 0:
        return np.zeros((S, D))
    src_f, dst_f = np.asarray(src_f, dtype=np.float64), np.asarray(dst_f, dtype=np.float64)
    senders = [axis_patterns(src_b[:, :, a], src_f[:, a]) for a in range(rank)]
    receivers = [axis_patterns(dst_b[:, :, a], dst_f[:, a], dst_h) for a in range(rank)]
    return received(shape, src_f, senders, dst_f, receivers, _bare(src_h, dst_h), dst_h.any(axis=1))


def received(shape: Sequence[float], src_f: np.ndarray, senders: list[Patterns], dst_f: np.ndarray,
             receivers: list[Patterns], bare: np.ndarray, receives: np.ndarray) -> np.ndarray:
    """``(S, D)``: the most elements a receiver gets, from each side's per-axis
    :class:`Patterns` (rows' split factors ``src_f`` ``(S, rank)``, ``dst_f``); ``bare``
    ``(S, D)``: some receiver holds no source tile; ``receives`` ``(D,)``: the row has a
    receiver at all."""
    t = np.asarray(shape, dtype=np.float64)
    need = np.prod(t / dst_f, axis=-1)  # as by_device forms it: one product per row
    held = _least_held(t, src_f, senders, dst_f, receivers)
    # A receiver whose source side holds nothing keeps none of its tile: it receives it all.
    held = np.where(bare, 0.0, held)
    out = np.maximum(need[None, :] - held, 0.0)
    out[:, ~receives] = 0.0
    return out


def _bare(src_h: np.ndarray, dst_h: np.ndarray) -> np.ndarray:
    """``(S, D)``: whether some receiver of the destination row holds no source tile."""
    if src_h.all():
        return np.zeros((len(src_h), len(dst_h)), dtype=bool)
    us, i_of = _unique_rows(src_h)
    ud, j_of = _unique_rows(dst_h)
    small = (ud[None, :, :] & ~us[:, None, :]).any(axis=2)  # few distinct masks
    return outer_take(small, i_of, j_of)


# Devices tried first for a pair of per-axis patterns (any set gives the same result;
# a spread one finds a device without overlap early): a fixed pseudo-random choice.
_SPREAD = np.random.default_rng(0).random(56)
_ROUND = 64  # devices per pair read at a time
_STEP = 1_000_003  # a prime above any device count: k * _STEP mod count permutes 0 .. count-1


class _Axis:
    """One tensor axis: the distinct per-axis patterns of each side (split factor and
    block index on every device; a receiver's pattern also has its receiving devices
    and its first receiver), each row's pattern, and per pair of patterns the least
    overlap over receivers and whether it varies."""

    def __init__(self, t: float, snd: Patterns, rcv: Patterns, whole: bool):
        self.t, self.n = t, snd.blocks.shape[1]
        self.i_of, self.j_of = snd.of, rcv.of
        self.fs, self.bs = snd.factor, snd.blocks
        self.fd, self.bd = rcv.factor, rcv.blocks
        self.gets, self.first = rcv.gets, rcv.first
        self.grain_s, self.period_s, _ = snd.runs()
        self.grain_d, self.period_d, self.length_d = rcv.runs()
        # Each pattern's block ends on every device, as overlap() forms them (flat, for take).
        ts, td = (self.t / self.fs)[:, None], (self.t / self.fd)[:, None]
        self.lo_s = self.bs * ts
        self.hi_s, self.lo_s = (self.lo_s + ts).ravel(), self.lo_s.ravel()
        self.lo_d = self.bd * td
        self.hi_d, self.lo_d = (self.lo_d + td).ravel(), self.lo_d.ravel()
        # Receivers exactly devices 0 .. length-1: a point below the length needs no fill.
        self.prefix = (self.gets == (np.arange(self.n)[None, :] < self.length_d[:, None])).all(axis=1)
        # At the first receiver, for every pair: the overlap where it does not vary.
        at = self.bs[:, self.first]  # (I, J)
        self.least = self.overlap(at, np.arange(len(self.fs))[:, None], self.bd[np.arange(len(self.fd)),
                                  self.first][None, :], np.arange(len(self.fd))[None, :])
        self.varies = np.zeros(self.least.shape, dtype=bool)
        # With whole tiles every value is an exact integer, so an axis one side does not
        # split overlaps by the other side's whole tile on every receiver (no table needed).
        split_s = np.flatnonzero(self.fs > 1) if whole else np.arange(len(self.fs))
        split_d = np.flatnonzero(self.fd > 1) if whole else np.arange(len(self.fd))
        if len(split_s) and len(split_d):
            self._tabulate(split_s, split_d)

    def overlap(self, bs, i, bd, j) -> np.ndarray:
        """The overlap of source block ``bs`` of pattern ``i`` and destination block ``bd`` of
        pattern ``j`` (broadcast), as :func:`by_device` computes it."""
        ts, td = self.t / self.fs[i], self.t / self.fd[j]
        lo_s, lo_d = bs * ts, bd * td
        return np.maximum(np.minimum(lo_s + ts, lo_d + td) - np.maximum(lo_s, lo_d), 0.0)

    def _tabulate(self, split_s: np.ndarray, split_d: np.ndarray, chunk: int = 1 << 23) -> None:
        """Least and varies of the split pairs, on the devices that tell them apart: a pair's
        overlap is constant on aligned runs of the gcd of its grains and repeats with the
        lcm of its periods, so devices ``0, G, 2G, ...`` below the period and the
        receivers' length see every value. A pair with many such devices tries a few
        first: one without overlap there has least 0 (exact, whatever ``varies`` says, as
        the product is 0)."""
        # Eight devices shared by every pair first (one broadcast read, no gather per pair).
        shared = np.unique((_SPREAD[:8] * self.n).astype(np.int64))
        low = np.stack([self._points(split_s[:, None], split_d[None, :], d, chunk) for d in shared]).min(axis=0)
        self.least[np.ix_(split_s, split_d)] = 0.0
        self.varies[np.ix_(split_s, split_d)] = True
        rest = np.argwhere(low > 0)
        i, j = split_s[rest[:, 0]], split_d[rest[:, 1]]
        grain = np.gcd(self.grain_s[i], self.grain_d[j])
        span = np.minimum(np.minimum(np.lcm(self.period_s[i], self.period_d[j]), self.length_d[j]), self.n)
        count = np.maximum(-(-span // grain), 1)
        least = np.full(len(i), np.inf)
        most = np.full(len(i), -np.inf)
        # Rounds of devices, each pair's in a spread order (k * _STEP mod count, a
        # permutation as _STEP is a prime above any count); a pair is done at its last
        # device or at its first without overlap.
        live = np.arange(len(i))
        for start in range(0, int(count.max(initial=0)), _ROUND):
            check_deadline("counting a re-layout off the mesh")
            live = live[(count[live] > start) & (least[live] > 0)]
            if not len(live):
                break
            k = (start + np.arange(_ROUND))[None, :] % count[live, None]
            devices = grain[live, None] * (k * _STEP % count[live, None])
            for lo in range(0, len(live), max(1, chunk // _ROUND)):
                at = live[lo:lo + max(1, chunk // _ROUND)]
                table = self._points(i[at, None], j[at, None], devices[lo:lo + len(at)], chunk)
                least[at] = np.minimum(least[at], table.min(axis=1))
                most[at] = np.maximum(most[at], table.max(axis=1))
        self.least[i, j] = least
        self.varies[i, j] = most != least

    def _points(self, i: np.ndarray, j: np.ndarray, devices: np.ndarray | int, chunk: int) -> np.ndarray:
        """The overlaps of pattern pairs ``(i, j)`` on ``devices`` (all broadcast), a device
        that does not receive for ``j`` taking the value at ``j``'s first receiver."""
        if np.ndim(devices) == 0:
            table = self.overlap(self.bs[i, devices], i, self.bd[j, devices], j)
        else:  # the same arithmetic on the precomputed block ends
            fi, fj = i * self.n + devices, j * self.n + devices
            table = np.minimum(self.hi_s.take(fi, mode="clip"), self.hi_d.take(fj, mode="clip"))
            table -= np.maximum(self.lo_s.take(fi, mode="clip"), self.lo_d.take(fj, mode="clip"))
            np.maximum(table, 0.0, out=table)
            if self.prefix[j].all() and (devices < self.length_d[j]).all():
                return table
        at = self.overlap(self.bs[i, self.first[j]], i, self.bd[j, self.first[j]], j)
        return np.where(self.gets[j, devices], table, at)

    def pair_overlaps(self, i: np.ndarray, j: np.ndarray) -> np.ndarray:
        """``(M, n)``: the overlap on every device for pattern pairs ``(i, j)``, a
        non-receiver taking its first receiver's value."""
        table = self.overlap(self.bs[i], i[:, None], self.bd[j], j[:, None])
        fill = table[np.arange(len(j)), self.first[j]][:, None]
        return np.where(self.gets[j], table, fill)


def _least_held(t: np.ndarray, src_f: np.ndarray, senders: list[Patterns], dst_f: np.ndarray,
                receivers: list[Patterns]) -> np.ndarray:
    """``(S, D)``: the least over receivers of the product of the per-axis overlaps,
    multiplied in axis order as :func:`by_device` does."""
    if len(t) == 0:
        return np.ones((len(src_f), len(dst_f)))
    whole = _whole_tiles(t, src_f, dst_f)
    axes = []
    for a in range(len(t)):
        check_deadline("counting a re-layout off the mesh")
        axes.append(_Axis(float(t[a]), senders[a], receivers[a], whole))
    held = count = zero = None
    for ax in axes:
        low = outer_take(ax.least, ax.i_of, ax.j_of)
        varies = outer_take(ax.varies, ax.i_of, ax.j_of)
        held = low if held is None else held * low
        count = varies.astype(np.int8) if count is None else count + varies
        zero = (low == 0) if zero is None else zero | (low == 0)
    # A receiver with no overlap on one axis holds nothing: the least product is 0 then.
    many = np.argwhere((count >= 2) & ~zero)
    if len(many):
        held[many[:, 0], many[:, 1]] = _joint_least(axes, many)
    return held


def _whole_tiles(t: np.ndarray, src_f: np.ndarray, dst_f: np.ndarray) -> bool:
    """Whether every tile extent is a whole number below 2**52 (so overlaps are exact)."""
    tiles = np.concatenate([t / src_f, t / dst_f], axis=0)
    return bool(np.all(tiles == np.floor(tiles)) and np.all(t < 2.0**52))


def _joint_least(axes: list[_Axis], pairs: np.ndarray, chunk: int = 1 << 22) -> np.ndarray:
    """Device by device for ``pairs`` (``(M, 2)`` source and destination rows) with two
    or more varying axes, once per distinct combination of per-axis patterns."""
    keys = np.stack([col for ax in axes for col in (ax.i_of[pairs[:, 0]], ax.j_of[pairs[:, 1]])], axis=1)
    uniq, inv = _unique_rows(keys)
    got = np.empty(len(uniq))
    step = max(1, chunk // max(1, axes[0].n))
    for lo in range(0, len(uniq), step):
        part = uniq[lo:lo + step].astype(np.int64)
        prod = None
        for a, ax in enumerate(axes):
            o = ax.pair_overlaps(part[:, 2 * a], part[:, 2 * a + 1])
            prod = o if prod is None else prod * o
        got[lo:lo + step] = prod.min(axis=1)
    return got[inv]


def _unique_rows(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct rows (sorted) and each row's index among them."""
    if len(rows) == 0:
        return rows, np.zeros(0, dtype=np.int64)
    rows = np.ascontiguousarray(rows)
    view = rows.view(np.dtype((np.void, rows.dtype.itemsize * rows.shape[1])))[:, 0]
    _, first, inv = np.unique(view, return_index=True, return_inverse=True)
    return rows[first], inv.reshape(-1)

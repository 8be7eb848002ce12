"""The bytes of a re-layout: what one device receives when a tensor changes placement.

Tiles are placed by :mod:`pase.work.layout`; this module counts the elements a
device must receive to go from one placement of a tensor to another (the
alpha-beta model, the simulator's check and the exporter's verifier all use it),
and the bytes one device sends in a collective (:func:`collective_bytes`).

Re-distribution bytes
---------------------
:func:`edge_bytes`: per device, the elements of the tile it needs that it does
not hold itself, maximised over devices; forward from the producer's output
layout to the consumer's input layout, backward (the gradient) from the
consumer's input layout (its input gradient after the consumer's own in-layer
all-reduce, which leaves it laid out like the input) to the producer's output
layout. With prime mesh axes the source and destination blocks along a tensor
axis are nested when one layout's mesh-axis tuple on that axis is a prefix of the
other's, and some device holds a disjoint block otherwise; so the least overlap
over devices is ``prod(min(src tile, dst tile))`` when every axis is nested and 0
otherwise (:func:`relayout_elements`, checked against enumeration over devices in
tests/test_layout.py). Placements off the mesh are counted one tensor axis at a time
(:mod:`pase.work.offmesh`).
"""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from pase.errors import OptionError
from pase.gather import outer_take
from pase.ir import Op, Port
from pase.work.axis_blocks import side_patterns
from pase.work.layout import (
    axis_sizes,
    dim_axes,
    owned_axes,
)
from pase.work.offmesh import received

COLLECTIVE_KINDS = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute",
                    "exchange")


# -- collective volumes ------------------------------------------------------------

def collective_bytes(kind: str, n, q):
    """Bytes one device sends (= receives) in a collective over ``q`` devices on a
    buffer of ``n`` bytes: all-reduce ``2(q-1)/q n``; all-gather ``(q-1)/q n``
    (``n`` the gathered result); reduce-scatter ``(q-1)/q n`` (``n`` the input);
    all-to-all ``(q-1)/q n``; collective-permute ``n``; ``exchange`` (pase.work's halo and
    cell re-layout messages) ``n`` like a permute. A group of one moves nothing."""
    n = np.asarray(n, dtype=np.float64)
    q = np.asarray(q, dtype=np.float64)
    if kind not in COLLECTIVE_KINDS:
        raise OptionError(f"unknown collective kind {kind!r}; allowed: {', '.join(COLLECTIVE_KINDS)}")
    if kind in ("collective-permute", "exchange"):
        out = np.where(q > 1, n, 0.0)
    else:
        out = (2.0 if kind == "all-reduce" else 1.0) * np.where(q > 1, (q - 1.0) / np.maximum(q, 1.0), 0.0) * n
    return float(out) if out.ndim == 0 else out


# -- re-distribution ---------------------------------------------------------------

def layout_rows(op: Op, port: Port, configs: np.ndarray, devices: int) -> np.ndarray:
    """What a re-layout reads of each config of ``op``'s ``port``: ``(K, rank * (L + 1) + 1)``.

    Per tensor axis its split factor, then per axis ``L`` slots (``L`` mesh axes)
    holding the indices + 1 of its mesh axes in order (0 pads), then a last column:
    1 when the config is off the mesh (its device count does not divide ``p``).
    """
    configs = np.asarray(configs, dtype=np.int64)
    L = len(axis_sizes(devices))
    rank = len(port.shape)
    owns, off = owned_axes(op, configs, devices)
    rows = np.zeros((len(configs), rank * (L + 1) + 1), dtype=np.int64)
    label = np.arange(1, L + 1, dtype=np.int64)
    for a, dims in enumerate(op.port_axes(port)):
        rows[:, a] = np.prod(configs[:, list(dims)], axis=1) if dims else 1
        if not dims:
            continue
        seq = np.concatenate([np.where(owns[:, d, :], label, 0) for d in dims], axis=1)
        # move the axes to the front, keeping their order (dims in port order, axes ascending)
        seq = np.take_along_axis(seq, np.argsort(seq == 0, axis=1, kind="stable"), axis=1)[:, :L]
        rows[:, rank + a * L: rank + (a + 1) * L] = seq
    rows[:, -1] = off
    return rows


def _unique_rows(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct rows of small non-negative ints and each row's index among them."""
    base = int(rows.max(initial=0)) + 1
    if rows.shape[1] == 0 or base ** rows.shape[1] >= 2**62:
        uniq, inv = np.unique(rows, axis=0, return_inverse=True)
        return uniq, inv.reshape(-1)
    keys = rows @ (base ** np.arange(rows.shape[1] - 1, -1, -1, dtype=np.int64))
    _, first, inv = np.unique(keys, return_index=True, return_inverse=True)
    return rows[first], inv.reshape(-1)


def _distinct(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct rows (any dtype, any width) and each row's index among them."""
    if rows.shape[1] == 0 or len(rows) == 0:
        return rows[:1], np.zeros(len(rows), dtype=np.int64)
    uniq, inv = np.unique(rows, axis=0, return_inverse=True)
    return uniq, inv.reshape(-1)


def _bits(codes: np.ndarray) -> np.ndarray:
    """Per slot, the bit of its mesh axis (0 for padding)."""
    return np.where(codes > 0, np.left_shift(np.int64(1), np.maximum(codes, 1) - 1), 0)


def relayout_elements(shape: Sequence[float], src: np.ndarray, dst: np.ndarray,
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Closed form for :func:`layout_rows` on the mesh: ``src`` ``(S, c)`` x ``dst``
    ``(D, c)`` -> ``(forward, backward, fwd_axes, bwd_axes)``, each ``(S, D)``.

    ``forward``/``backward``: the elements the worst device receives; the least
    overlap is ``prod(min(src tile, dst tile))`` when on every tensor axis one
    layout's mesh-axis tuple is a prefix of the other's, else 0. ``fwd_axes`` /
    ``bwd_axes``: bit masks of the mesh axes along which a receiver fetches (its
    sender differs from it only there): a tuple's axes from the first position
    where the two tuples differ. Computed per tensor axis on its distinct tuples.
    """
    t = np.asarray(shape, dtype=np.float64)
    src, dst = np.asarray(src), np.asarray(dst)
    rank = len(t)
    L = (src.shape[-1] - 1) // rank - 1 if rank else 0
    ts = t / src[:, :rank].astype(np.float64)
    td = t / dst[:, :rank].astype(np.float64)
    # Per axis one table of packed bits over its distinct tuples: bits 0..L-1 the forward
    # axes, L..2L-1 the backward axes, bit 2L a conflict (not nested); OR-ed over axes on
    # the distinct combinations of tuples of each side, then spread to every row pair.
    tables, tuple_s, tuple_d = [], [], []
    for a in range(rank):
        us, i = _unique_rows(src[:, rank + a * L: rank + (a + 1) * L])
        ud, j = _unique_rows(dst[:, rank + a * L: rank + (a + 1) * L])
        cs, cd = us[:, None, :], ud[None, :, :]
        differ = cs != cd
        conflict = (differ & (cs > 0) & (cd > 0)).any(axis=-1)
        changed = np.cumsum(differ, axis=-1) > 0
        fwd = np.bitwise_or.reduce(np.where(changed, _bits(cs), 0), axis=-1)
        bwd = np.bitwise_or.reduce(np.where(changed, _bits(cd), 0), axis=-1)
        tables.append(fwd | (bwd << L) | (conflict.astype(np.int64) << (2 * L)))
        tuple_s.append(i)
        tuple_d.append(j)
    if rank:
        combos_s, combo_s = _unique_rows(np.stack(tuple_s, axis=1))
        combos_d, combo_d = _unique_rows(np.stack(tuple_d, axis=1))
        packed = np.zeros((len(combos_s), len(combos_d)), dtype=np.int64)
        for a, table in enumerate(tables):
            packed |= outer_take(table, combos_s[:, a], combos_d[:, a])
        packed = outer_take(packed, combo_s, combo_d)
    else:
        packed = np.zeros((len(src), len(dst)), dtype=np.int64)
    # The overlap of the tiles, on the distinct tile shapes of each side (far fewer rows).
    us, ts_of = _distinct(ts)
    ud, td_of = _distinct(td)
    overlap = np.ones((len(us), len(ud)))
    for a in range(rank):
        overlap *= np.minimum(us[:, a][:, None], ud[:, a][None, :])
    overlap = outer_take(overlap, ts_of, td_of)
    np.putmask(overlap, packed >= (1 << (2 * L)), 0.0)  # a conflict: some device holds nothing
    forward = np.prod(td, axis=1)[None, :] - overlap
    np.maximum(forward, 0.0, out=forward)
    overlap = np.subtract(np.prod(ts, axis=1)[:, None], overlap, out=overlap)
    backward = np.maximum(overlap, 0.0, out=overlap)
    low = (1 << L) - 1
    fwd_axes = packed & low
    packed >>= L
    packed &= low
    return forward, backward, fwd_axes, packed


def received_elements(shape: Sequence[float], src_blocks: np.ndarray, src_factors: Sequence[int],
                      dst_blocks: np.ndarray, dst_factors: Sequence[int],
                      holds: np.ndarray | None = None, needs: np.ndarray | None = None) -> np.ndarray:
    """Device by device: ``(p,)`` elements each device needs for its ``dst`` tile
    and does not hold in its ``src`` tile.

    ``src_blocks``/``dst_blocks`` are :func:`port_blocks`; ``holds``/``needs`` mark the
    devices that hold a source tile / need a destination tile (default: rows not ``-1``).
    Works for any placement; :func:`relayout_elements` is its closed form on the mesh.
    """
    t = np.asarray(shape, dtype=np.float64)
    ts = t / np.asarray(src_factors, dtype=np.float64)
    td = t / np.asarray(dst_factors, dtype=np.float64)
    if holds is None:
        holds = (src_blocks >= 0).all(axis=1)
    if needs is None:
        needs = (dst_blocks >= 0).all(axis=1)
    lo_s, lo_d = src_blocks * ts, dst_blocks * td
    per_axis = np.maximum(np.minimum(lo_s + ts, lo_d + td) - np.maximum(lo_s, lo_d), 0.0)
    held = np.where(holds, np.prod(per_axis, axis=-1), 0.0)
    return np.where(needs, np.maximum(float(np.prod(td)) - held, 0.0), 0.0)


_ROWS: dict[tuple, np.ndarray] = {}


def placement_rows(op: Op, port: Port, configs: np.ndarray, devices: int) -> np.ndarray:
    """:func:`layout_rows` plus, for configs off the mesh, the config itself (whose
    blocks depend on all its factors): equal rows of one op's port place it alike.
    Memoised (a Problem build asks once for the edge key and once for the costs)."""
    configs = np.asarray(configs, dtype=np.int64)
    key = (op.dim_names, tuple(d.role for d in op.dims), tuple(map(tuple, op.port_axes(port))),
           len(port.shape), int(devices), configs.shape, configs.tobytes())
    rows = _ROWS.get(key)
    if rows is None:
        if len(_ROWS) > 256:
            _ROWS.clear()
        rows = layout_rows(op, port, configs, devices)
        rows = _ROWS[key] = np.concatenate([rows, np.where(rows[:, -1:] > 0, configs, 0)], axis=1)
        rows.flags.writeable = False
    return rows


def t_of(shape: Sequence[float], factors: np.ndarray) -> np.ndarray:
    """Tile extents per row of split ``factors``."""
    return np.asarray(shape, dtype=np.float64) / factors


def relayout_matrix(producer: Op, output: Port, src_configs: np.ndarray,
                    consumer: Op, input: Port, dst_configs: np.ndarray, devices: int,
                    small: bool = False, src_extra: np.ndarray | None = None,
                    dst_extra: np.ndarray | None = None) -> tuple:
    """``(forward, backward, fwd_axes, bwd_axes)`` for every config pair: ``(K_u, K_v)``
    each (elements per device, worst device; mesh-axis masks as in :func:`relayout_elements`,
    all axes when either side is off the mesh).

    The closed form runs once per distinct pair of :func:`placement_rows`; pairs with
    a side off the mesh are enumerated device by device. With ``small`` returns
    ``(parts on distinct rows, src_of, dst_of, src rows, dst rows)`` instead of
    expanding; ``src_extra``/``dst_extra`` (``(K, e)``) are columns a caller appends
    to the rows (so distinct rows keep them apart).
    """
    src_configs = np.asarray(src_configs, dtype=np.int64)
    dst_configs = np.asarray(dst_configs, dtype=np.int64)
    src_rows = placement_rows(producer, output, src_configs, devices)
    dst_rows = placement_rows(consumer, input, dst_configs, devices)
    if src_extra is not None:
        src_rows = np.concatenate([src_rows, src_extra], axis=1)
    if dst_extra is not None:
        dst_rows = np.concatenate([dst_rows, dst_extra], axis=1)
    src, first_s, src_of = np.unique(src_rows, axis=0, return_index=True, return_inverse=True)
    dst, first_d, dst_of = np.unique(dst_rows, axis=0, return_index=True, return_inverse=True)
    src_of, dst_of = src_of.reshape(-1), dst_of.reshape(-1)
    width = len(output.shape) * (len(axis_sizes(devices)) + 1) + 1
    parts = list(relayout_elements(output.shape, src[:, :width], dst[:, :width]))
    off_s, off_d = src[:, width - 1] > 0, dst[:, width - 1] > 0
    if off_s.any() or off_d.any():
        _off_mesh_parts(parts, producer, output, src_configs[first_s], src, consumer, input,
                        dst_configs[first_d], dst, devices)
    if small:
        return parts, src_of, dst_of, src, dst
    return tuple(outer_take(part, src_of, dst_of) for part in parts)


def _off_mesh_parts(parts: list, producer: Op, output: Port, src_configs: np.ndarray, src: np.ndarray,
                    consumer: Op, input: Port, dst_configs: np.ndarray, dst: np.ndarray,
                    devices: int) -> None:
    """Fill ``parts`` (on distinct rows ``src`` x ``dst``) where a side is off the mesh.

    An op off the mesh leaves device p-1 idle, so a side on the mesh that needs a tile
    there receives all of it: forward into an on-mesh consumer, backward into an on-mesh
    producer. The other direction is counted (:func:`pase.work.offmesh.received`) on the
    ranks ``0 .. P-1`` of the side off the mesh, the only ones receiving from it or for it.
    """
    rank, L = len(output.shape), len(axis_sizes(devices))
    off_s, off_d = src[:, rank * (L + 1)] > 0, dst[:, rank * (L + 1)] > 0
    sf, df = src[:, :rank].astype(np.float64), dst[:, :rank].astype(np.float64)
    full = (1 << L) - 1
    tile_s, tile_d = np.prod(t_of(output.shape, sf), axis=1), np.prod(t_of(output.shape, df), axis=1)
    count_s = np.prod(src_configs, axis=1)
    count_d = np.prod(dst_configs, axis=1)
    S, J, on = np.flatnonzero(off_s), np.flatnonzero(off_d), np.flatnonzero(~off_s)

    def count(senders, s_rows, s_cfg, s_op, s_port, receivers, r_rows, r_cfg, r_op, r_port, n):
        snd, held_s = side_patterns(s_op, s_port, s_cfg[senders], s_rows[senders], devices, n, False)
        rcv, held_r = side_patterns(r_op, r_port, r_cfg[receivers], r_rows[receivers], devices, n, True)
        return received(output.shape, s_rows[senders, :rank].astype(np.float64), snd,
                        r_rows[receivers, :rank].astype(np.float64), rcv,
                        held_s[:, None] < held_r[None, :], held_r > 0)

    if len(S):
        if len(J):
            n = int(count_d[J].max())
            parts[0][np.ix_(S, J)] = count(S, src, src_configs, producer, output,
                                           J, dst, dst_configs, consumer, input, n)
        parts[0][np.ix_(S, np.flatnonzero(~off_d))] = tile_d[~off_d][None, :]
        everyone = np.arange(len(dst))
        parts[1][S] = count(everyone, dst, dst_configs, consumer, input,
                            S, src, src_configs, producer, output, int(count_s[S].max())).T
        parts[2][S] = parts[3][S] = full
    if len(J):
        parts[0][np.ix_(on, J)] = count(on, src, src_configs, producer, output,
                                        J, dst, dst_configs, consumer, input, int(count_d[J].max()))
        parts[1][np.ix_(on, J)] = tile_s[on][:, None]
        parts[2][:, J] = parts[3][:, J] = full


def _config_vector(op: Op, config: Mapping[str, int] | Sequence[int]) -> np.ndarray:
    if isinstance(config, Mapping):
        unknown = set(config) - set(op.dim_names)
        if unknown:
            raise OptionError(f"op {op.name!r} has no dim {sorted(unknown)[0]!r}; "
                              f"its dims: {', '.join(op.dim_names)}")
        return np.array([[int(config.get(n, 1)) for n in op.dim_names]], dtype=np.int64)
    vec = np.asarray(list(config), dtype=np.int64).reshape(1, -1)
    if vec.shape[1] != len(op.dims):
        raise OptionError(f"op {op.name!r} has {len(op.dims)} dims ({', '.join(op.dim_names)}), "
                          f"got a config of {vec.shape[1]} factors")
    return vec


def edge_bytes(producer: Op, output: Port, src_config: Mapping[str, int] | Sequence[int],
               consumer: Op, input: Port, dst_config: Mapping[str, int] | Sequence[int],
               devices: int, bytes_per_element: float = 4,
               reduce_scatter: bool = False) -> tuple[float, float]:
    """``(forward, backward)``: bytes ONE device receives (the most over the ``devices``
    devices) to re-lay ``output`` of ``producer`` as ``input`` of ``consumer``
    forward, and its gradient back, under this module's placement.

    ``reduce_scatter`` does not change an edge's bytes (an all-reduce that only feeds a
    slice stays a local slice on the edge; :func:`reduce_scatters` says when the
    all-reduce itself becomes a reduce-scatter); it is accepted so callers can pass a
    model's options.
    """
    fwd, bwd, _, _ = relayout_matrix(producer, output, _config_vector(producer, src_config),
                                     consumer, input, _config_vector(consumer, dst_config), int(devices))
    return float(fwd[0, 0]) * bytes_per_element, float(bwd[0, 0]) * bytes_per_element


def reduce_scatters(producer: Op, output: Port, src_config: Mapping[str, int] | Sequence[int],
                    consumer: Op, input: Port, dst_config: Mapping[str, int] | Sequence[int],
                    devices: int) -> tuple[bool, bool]:
    """``(forward, backward)``: whether the producer's output all-reduce / the
    consumer's input-gradient all-reduce (``pase.work.ops`` collectives tagged
    ``port="out"`` / ``"in<i>"``) is only sliced by the other side of this edge,
    so that a reduce-scatter suffices (the alpha-beta ``reduce_scatter`` rule): the
    edge moves no bytes that way and the other side's layout splits the tensor over
    every mesh axis of the group. The one-consumer condition is the caller's.
    """
    from pase.work.ops import op_work  # ops imports this module's neighbours

    p = int(devices)
    cu, cv = _config_vector(producer, src_config), _config_vector(consumer, dst_config)
    fwd, bwd = edge_bytes(producer, output, cu[0], consumer, input, cv[0], p, 1)
    rows_u, rows_v = layout_rows(producer, output, cu, p), layout_rows(consumer, input, cv, p)
    rank, L = len(output.shape), len(axis_sizes(p))

    def axes_of(rows):
        return {int(c) - 1 for c in rows[0, rank:rank * (L + 1)] if c > 0}

    def group(op, cfg, tag):
        if tag is None or dim_axes(op, cfg[0], p) is None:
            return set()
        axes = dim_axes(op, cfg[0], p)
        return {i for c in op_work(op, cfg).collectives if c.port == tag for d in c.dims for i in axes[d]}

    out_tag = "out" if producer.outputs and producer.outputs[0] is output else None
    in_tag = next((f"in{i}" for i, q in enumerate(consumer.inputs) if q is input), None)
    g_out, g_in = group(producer, cu, out_tag), group(consumer, cv, in_tag)
    return (bool(g_out) and fwd == 0 and g_out <= axes_of(rows_v),
            bool(g_in) and bwd == 0 and g_in <= axes_of(rows_u))

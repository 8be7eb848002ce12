"""Read the collectives of a compiled XLA program from its HLO text.

:func:`parse_collectives` takes ``compiled.as_text()`` (or any HLO module text)
and returns one :class:`HloCollective` per all-reduce, all-gather,
reduce-scatter, all-to-all and collective-permute. Pure text processing: no jax.

What it understands:

- synchronous forms and the asynchronous ``-start``/``-done`` pairs (counted once,
  at ``-start``); collectives wrapped in an ``async-start`` computation appear as
  plain instructions inside it and are counted there, once;
- array and tuple results (``(f32[1,4,8]{2,1,0}, /*index=1*/f32[1,4,8]{2,1,0})``),
  element types from ``pred`` to ``c128``;
- replica groups in their three printed forms: explicit lists
  ``{{0,1},{2,3}}``, iota ``[2,4]<=[8]`` or ``[4,2]<=[2,4]T(1,0)`` (``[groups,
  size]`` read from ``iota(N)`` reshaped, transposed and flattened), and Shardy's
  mesh and axes ``mesh['a'=2,'b'=4] {'b'}`` (optionally ``device_ids=(...)`` and
  sub-axes ``'b':(1)2``); ``{}`` means one group of every device;
- ``source_target_pairs={{0,1},{1,0}}`` of a collective-permute;
- ``metadata={op_name="..."}``: the pase scope the collective comes from
  (``op/NAME``, ``edge/SRC->DST`` or ``out/NAME``, the innermost one named) and its
  direction, ``backward`` when the name passes through JAX's ``transpose(...)``.

Bytes per device follow one convention (buffer ``n`` bytes, group of ``q``):
all-reduce ``2(q-1)/q n``; all-gather ``(q-1)/q n`` with ``n`` the gathered
result; reduce-scatter ``(q-1)/q n`` with ``n`` its input (``q`` times the
result); all-to-all ``(q-1)/q n``; collective-permute ``n`` for a device that
sends (``pase.work.relayout.collective_bytes``).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Sequence

from pase.errors import PaseError
from pase.work.relayout import collective_bytes

KINDS = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute")

# bytes per element of each HLO element type
ELEMENT_BYTES = {
    "pred": 1, "s2": 0.25, "u2": 0.25, "s4": 0.5, "u4": 0.5, "s8": 1, "u8": 1, "s16": 2, "u16": 2,
    "s32": 4, "u32": 4, "s64": 8, "u64": 8, "f16": 2, "bf16": 2, "f32": 4, "f64": 8, "c64": 8,
    "c128": 16, "f8e4m3fn": 1, "f8e5m2": 1, "f8e4m3": 1, "f8e3m4": 1, "f8e4m3b11fnuz": 1,
    "f8e4m3fnuz": 1, "f8e5m2fnuz": 1, "f8e8m0fnu": 1, "f4e2m1fn": 0.5, "token": 0,
}


class HloError(PaseError):
    """HLO text that cannot be read (one line saying where)."""


@dataclass(frozen=True)
class HloCollective:
    """One collective of a compiled program.

    ``buffer_bytes`` is ``n`` of the convention (per device); ``group_size`` ``q``;
    ``groups`` the device groups (pairs for a collective-permute); ``bytes`` what
    one device moves. ``scope`` and ``target`` name where it comes from (``op`` and
    the op's name, ``edge`` and ``SRC->DST``, ``out`` and the producer's name, or
    None), ``direction`` is ``forward`` or ``backward``; ``line`` is the HLO line.
    """

    kind: str
    name: str
    shape: str
    buffer_bytes: float
    group_size: int
    groups: tuple[tuple[int, ...], ...]
    bytes: float
    op_name: str
    scope: str | None
    target: str | None
    direction: str
    line: str

    @property
    def key(self) -> str | None:
        """``op/NAME``, ``edge/SRC->DST`` or ``out/NAME`` (None when unattributed)."""
        return None if self.scope is None else f"{self.scope}/{self.target}"


# -- shapes -----------------------------------------------------------------------------

_ARRAY = re.compile(r"\b([a-z][a-z0-9]*)\[([0-9,]*)\]")


def shape_arrays(shape: str) -> list[tuple[str, tuple[int, ...]]]:
    """Every array of a (possibly tuple, possibly nested) HLO shape: ``[(type, dims)]``.

    Layouts (``{1,0}``) and index comments are ignored; ``token[]`` counts zero bytes.
    """
    shape = re.sub(r"/\*.*?\*/", "", shape)
    shape = re.sub(r"\{[^{}]*\}", "", shape)  # layouts
    out = []
    for m in _ARRAY.finditer(shape):
        dtype = m.group(1)
        if dtype not in ELEMENT_BYTES:
            raise HloError(f"unknown HLO element type {dtype!r} in shape {shape.strip()!r}")
        out.append((dtype, tuple(int(d) for d in m.group(2).split(",") if d)))
    if not out and "token" not in shape and shape.strip() not in ("()", ""):
        raise HloError(f"cannot read HLO shape {shape.strip()!r}")
    return out


def array_bytes(arrays: Sequence[tuple[str, tuple[int, ...]]]) -> float:
    return float(sum(ELEMENT_BYTES[t] * math.prod(dims) for t, dims in arrays))


def _tuple_parts(shape: str) -> list[str]:
    """The top-level elements of a tuple shape ``(a, (b, c), d)``; ``[shape]`` otherwise."""
    s = re.sub(r"/\*.*?\*/", "", shape).strip()
    if not s.startswith("("):
        return [s]
    parts, depth, start = [], 0, 1
    for i, ch in enumerate(s):
        if ch in "({[":
            depth += 1
        elif ch in ")}]":
            depth -= 1
            if depth == 0:
                parts.append(s[start:i])
                break
        elif ch == "," and depth == 1:
            parts.append(s[start:i])
            start = i + 1
    return [p.strip() for p in parts if p.strip()]


# -- replica groups ---------------------------------------------------------------------

def _ints(text: str) -> list[int]:
    return [int(x) for x in re.findall(r"-?\d+", text)]


def iota_devices(dims: Sequence[int], reshape: Sequence[int], perm: Sequence[int] | None) -> list[int]:
    """``iota(prod(reshape))`` reshaped to ``reshape``, transposed by ``perm``, flattened
    (XLA's iota tile assignment); ``dims`` only checks the count."""
    import numpy as np

    total = math.prod(reshape)
    if math.prod(dims) != total:
        raise HloError(f"iota list {list(dims)}<={list(reshape)}: {math.prod(dims)} != {total} devices")
    array = np.arange(total).reshape(tuple(reshape))
    if perm:
        if sorted(perm) != list(range(len(reshape))):
            raise HloError(f"iota transpose T{tuple(perm)} is not a permutation of {len(reshape)} axes")
        array = array.transpose(tuple(perm))
    return [int(x) for x in array.reshape(-1)]


_IOTA = re.compile(r"\[([0-9,]+)\]<=\[([0-9,]+)\](?:T\(([0-9,]+)\))?")


def parse_iota(text: str) -> tuple[tuple[int, ...], ...]:
    """Groups of an iota replica-group list ``[G,S]<=[N]`` or ``[G,S]<=[a,b]T(1,0)``."""
    m = _IOTA.fullmatch(text.strip())
    if not m:
        raise HloError(f"cannot read iota replica groups {text!r}")
    dims = _ints(m.group(1))
    reshape = _ints(m.group(2))
    perm = _ints(m.group(3)) if m.group(3) else None
    flat = iota_devices(dims, reshape, perm)
    size = dims[-1] if len(dims) > 1 else len(flat)
    return tuple(tuple(flat[i:i + size]) for i in range(0, len(flat), size))


def parse_list_groups(text: str) -> tuple[tuple[int, ...], ...]:
    """Groups of an explicit list ``{{0,1},{2,3}}`` (``{}``: no groups given)."""
    inner = text.strip()
    if not (inner.startswith("{") and inner.endswith("}")):
        raise HloError(f"cannot read replica groups {text!r}")
    return tuple(tuple(_ints(g)) for g in re.findall(r"\{([^{}]*)\}", inner[1:-1]))


_MESH = re.compile(r"mesh\[(?P<axes>[^\]]*)\](?:\s*,\s*device_ids=\((?P<ids>[^)]*(?:\)[^)]*)?)\))?"
                   r"\s*\{(?P<group>[^{}]*)\}")


def _axis_name(text: str) -> str:
    return text.strip().strip("'\"")


def parse_mesh_groups(text: str) -> tuple[tuple[int, ...], ...]:
    """Groups of Shardy's mesh-and-axes form ``mesh['a'=2,'b'=4] {'b'}``.

    Devices sit on the mesh in row-major order of the axes (or as ``device_ids``
    lists them, explicitly or as an iota); a group is the devices whose
    coordinates differ only along the listed axes, ordered by those axes in the
    listed order. A sub-axis ``'a':(pre)size`` is the middle factor when axis ``a``
    is read as ``[pre, size, rest]``.
    """
    m = _MESH.search(text)
    if not m:
        raise HloError(f"cannot read mesh replica groups {text.strip()!r}")
    axes: list[tuple[str, int]] = []
    for part in filter(None, (p.strip() for p in m.group("axes").split(","))):
        name, _, size = part.rpartition("=")
        axes.append((_axis_name(name), int(size)))
    sizes = [s for _, s in axes]
    total = math.prod(sizes)
    ids_text = (m.group("ids") or "").strip()
    if not ids_text:
        device_ids = list(range(total))
    elif "<=" in ids_text or "T(" in ids_text:
        # an iota: ``[dims]<=[reshape]T(perm)`` or, as Shardy prints it, ``[reshape]T(perm)``
        im = _IOTA.fullmatch(ids_text) or _IOTA.fullmatch(f"[{total}]<={ids_text}")
        if not im:
            raise HloError(f"cannot read mesh device_ids ({ids_text})")
        device_ids = iota_devices(_ints(im.group(1)), _ints(im.group(2)),
                                  _ints(im.group(3)) if im.group(3) else None)
    else:
        device_ids = _ints(re.sub(r"^\[[0-9,]*\]", "", ids_text))
    if len(device_ids) != total:
        raise HloError(f"mesh of {total} devices lists {len(device_ids)} device ids")
    names = [n for n, _ in axes]
    # the grouped (sub-)axes: (axis index, pre, size)
    grouped = []
    for part in filter(None, (p.strip() for p in m.group("group").split(","))):
        sub = re.fullmatch(r"(.+?):\((\d+)\)(\d+)", part)
        name = _axis_name(sub.group(1) if sub else part)
        if name not in names:
            raise HloError(f"replica group axis {name!r} is not a mesh axis ({', '.join(names)})")
        i = names.index(name)
        pre, size = (int(sub.group(2)), int(sub.group(3))) if sub else (1, sizes[i])
        if sizes[i] % (pre * size):
            raise HloError(f"sub-axis {part!r} does not divide mesh axis {name}={sizes[i]}")
        grouped.append((i, pre, size))
    groups: dict[tuple, list[tuple[tuple[int, ...], int]]] = {}
    for flat in range(total):
        coords, rest = [], flat
        for s in reversed(sizes):
            coords.append(rest % s)
            rest //= s
        coords.reverse()
        digits = [(coords[i] // (sizes[i] // (pre * size))) % size for i, pre, size in grouped]
        # the coordinate with the grouped digits zeroed identifies the group
        base = list(coords)
        for (i, pre, size), d in zip(grouped, digits):
            base[i] -= d * (sizes[i] // (pre * size))
        groups.setdefault(tuple(base), []).append((tuple(digits), device_ids[flat]))
    return tuple(tuple(dev for _, dev in sorted(members)) for members in groups.values())


def parse_groups(text: str) -> tuple[tuple[int, ...], ...]:
    """Replica groups in any printed form (the value after ``replica_groups=``)."""
    text = text.strip()
    if text.startswith("mesh["):
        return parse_mesh_groups(text)
    if text.startswith("["):
        return parse_iota(text)
    return parse_list_groups(text)


# -- instructions -----------------------------------------------------------------------

_OPCODE = re.compile(r"\s(" + "|".join(KINDS) + r")(-start|-done)?\(")
_NAME = re.compile(r"^\s*(?:ROOT\s+)?%?([^\s=]+)\s*=\s*")
_SCOPE = re.compile(r"(?:^|[/(])(op|edge|out|tied)/(.+?)(?=/|\)|$)")


def _attribute(line: str, key: str) -> str | None:
    """The value of ``key=...`` at the top level of an instruction's attribute list."""
    m = re.search(r"[,\s]" + re.escape(key) + r"=", line)
    if not m:
        return None
    i = m.end()
    if line.startswith("mesh[", i):  # mesh[...] (, device_ids=(...))? {...}
        mm = _MESH.match(line, i)
        if not mm:
            raise HloError(f"cannot read {key} in: {line.strip()[:200]}")
        return mm.group(0)
    depth, j = 0, i
    while j < len(line):
        ch = line[j]
        if ch in "{[(":
            depth += 1
        elif ch in "}])":
            depth -= 1
            if depth < 0:
                break
        elif ch == "," and depth == 0:
            break
        j += 1
    return line[i:j]


def _balanced(text: str) -> bool:
    depth = 0
    for ch in text:
        depth += ch == "("
        depth -= ch == ")"
        if depth < 0:
            return False
    return depth == 0


def split_merged(op_name: str) -> list[str]:
    """The original names of a merged ``op_name``.

    When XLA combines collectives (or fuses instructions) it merges their names
    as ``PREFIX(rest1:rest2:...)``, PREFIX the common start; each original name
    is ``PREFIX + rest``. A name that is not merged is returned alone.
    """
    if ":" not in op_name or not op_name.endswith(")"):
        return [op_name]
    for i, ch in enumerate(op_name):
        if ch != "(":
            continue
        parts = op_name[i + 1:-1].split(":")
        if len(parts) < 2:
            continue
        names = [op_name[:i] + part for part in parts]
        if all(_balanced(n) for n in names):
            return names
    return [op_name]


def attribution(op_name: str) -> tuple[str | None, str | None, str]:
    """(scope, target, direction) of a metadata ``op_name``: the innermost ``op/``,
    ``edge/``, ``out/`` or ``tied/`` scope; ``backward`` when it passes through ``transpose(``."""
    direction = "backward" if "transpose(" in op_name else "forward"
    found = list(_SCOPE.finditer(op_name))
    if not found:
        return None, None, direction
    last = found[-1]
    return last.group(1), last.group(2), direction


def parse_collectives(hlo: str, devices: int | None = None) -> list[HloCollective]:
    """Every collective of ``hlo`` (module text), in order; see the module docstring.

    ``devices`` is the device count a ``replica_groups={}`` spans (default: the
    module's ``num_partitions``, else its ``replica_count``).
    """
    if devices is None:
        m = re.search(r"num_partitions=(\d+)", hlo) or re.search(r"replica_count=(\d+)", hlo)
        devices = int(m.group(1)) if m else None
    out = []
    for line in hlo.splitlines():
        op = _OPCODE.search(line)
        if not op or " = " not in line[:op.start() + 1]:
            continue
        kind, suffix = op.group(1), op.group(2)
        if suffix == "-done":
            continue
        nm = _NAME.match(line)
        if not nm:
            continue
        shape = line[nm.end():op.start()].strip()
        out.extend(_collective(kind, suffix, nm.group(1), shape, line, devices))
    return out


def _results(kind: str, suffix: str | None, shape: str) -> list[float]:
    """Bytes per device of each result (one per tuple element; before the convention)."""
    if suffix == "-start" and kind != "all-reduce":
        parts = _tuple_parts(shape)
        if len(parts) >= 2:  # (operands, results[, contexts])
            shape = parts[1]
    return [array_bytes([a]) for a in shape_arrays(shape)]


def _collective(kind: str, suffix: str | None, name: str, shape: str, line: str,
                devices: int | None) -> list[HloCollective]:
    """The collective of one instruction: one record, or one per tuple element when
    its name merges several origins (XLA's combiners), element ``i`` from name ``i``."""
    results = _results(kind, suffix, shape)
    if kind == "collective-permute":
        pairs_text = _attribute(line, "source_target_pairs") or "{}"
        pairs = tuple(p for p in parse_list_groups(pairs_text) if len(p) == 2)
        sends = any(s != t for s, t in pairs)
        groups, q = pairs, 2 if sends else 1
        scale = 1.0 if sends else 0.0
    else:
        text = _attribute(line, "replica_groups")
        groups = parse_groups(text) if text is not None else ()
        if not groups:
            if devices is None:
                raise HloError(f"{name}: replica_groups={{}} and no device count "
                               f"(num_partitions) in the module")
            groups = (tuple(range(devices)),)
        sizes = {len(g) for g in groups}
        if len(sizes) != 1:
            raise HloError(f"{name}: replica groups of unequal sizes {sorted(sizes)}")
        q = sizes.pop()
        scale = float(q) if kind == "reduce-scatter" else 1.0
    op_name = ""
    meta = re.search(r'metadata=\{[^}]*?op_name="((?:[^"\\]|\\.)*)"', line)
    if meta:
        op_name = meta.group(1)
    names = split_merged(op_name)
    if len(names) == len(results) and len(names) > 1:
        pieces = list(zip(names, results))
    else:
        pieces = [(op_name, sum(results))]
    out = []
    for piece_name, result in pieces:
        n = result * scale
        scope, target, direction = attribution(piece_name)
        out.append(HloCollective(kind, name, shape, n, q, groups, collective_bytes(kind, n, q),
                                 piece_name, scope, target, direction, line.strip()))
    return out

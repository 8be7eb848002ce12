"""The importer's bookkeeping: axis atoms, pending ops, and their emission as IR ops.

Every tensor axis the importer sees is a product of *atoms* (sizes with an
identity and a role). Ops read and write atoms, not torch axes, so a view that
splits an axis (``(b, l, 3e) -> (b, l, 3, h, d)``) refines the atom in place:
the op that made the tensor gets the finer dims too, and the view costs nothing.
A permute only reorders a tensor's view; the data keeps its producer's layout,
which is the layout every IR consumer reads.

- ``unify`` makes two atoms one (both operands of an add);
- ``link`` ties two atoms that must be cut alike without being one (the
  contracted axes of a product: ``x`` of a linear and its weight);
- ``lock`` forbids cutting an atom (the spatial axes of a convolution, the axis
  of a softmax); a view that would need to cut a locked atom becomes a real
  reshape (Ravel + Unravel).

A :class:`Pending` op records ports as atom lists; :func:`emit` turns it into
an :class:`pase.ir.Op` once every atom is final (its leaves are the op's dims).
"""
from __future__ import annotations

import math
import string
from dataclasses import dataclass, field
from typing import Any

from pase.ir import Dim, Op, Port

# Lower wins when two atoms with roles become one (an add of a projection's
# output, role parameter, to the residual stream, role channel).
ROLE_RANK = {"batch": 0, "expert": 1, "heads": 2, "vocabulary": 3, "sequence": 4, "spatial": 5,
             "window": 6, "channel": 7, "parameter": 8, "reduction": 9, "layer": 10, "other": 11}

LETTERS = string.ascii_letters


class Conflict(Exception):
    """An atom cannot be cut where a view needs it (locked, or sizes that do not divide)."""


class Atoms:
    """Union-find over atoms, with refinement into children and cut-alike links."""

    def __init__(self) -> None:
        self.size: list[int] = []
        self.parent: list[int] = []
        self.role: list[str] = []
        self.locked: list[bool] = []
        self.kids: dict[int, list[int]] = {}
        self.links: dict[int, set[int]] = {}

    def new(self, size: int, role: str = "other") -> int:
        self.size.append(int(size))
        self.parent.append(len(self.parent))
        self.role.append(role)
        self.locked.append(False)
        return len(self.size) - 1

    def find(self, a: int) -> int:
        root = a
        while self.parent[root] != root:
            root = self.parent[root]
        while self.parent[a] != root:
            self.parent[a], a = root, self.parent[a]
        return root

    def leaves(self, a: int) -> list[int]:
        r = self.find(a)
        kids = self.kids.get(r)
        if not kids:
            return [r]
        return [leaf for k in kids for leaf in self.leaves(k)]

    def leaf_list(self, atoms: list[int]) -> list[int]:
        return [leaf for a in atoms for leaf in self.leaves(a)]

    def set_role(self, a: int, role: str, force: bool = False) -> None:
        for leaf in self.leaves(a):
            if force or ROLE_RANK[role] < ROLE_RANK[self.role[leaf]]:
                self.role[leaf] = role

    def lock(self, atoms: list[int]) -> None:
        for leaf in self.leaf_list(atoms):
            self.locked[leaf] = True

    # -- cutting -----------------------------------------------------------------
    def _split(self, leaf: int, sizes: list[int], seen: set[int]) -> None:
        leaf = self.find(leaf)
        if leaf in seen:
            return
        seen.add(leaf)
        if self.kids.get(leaf):
            raise Conflict("already cut")
        if self.locked[leaf]:
            raise Conflict(f"axis of size {self.size[leaf]} is locked")
        kids = [self.new(s, self.role[leaf]) for s in sizes]
        self.kids[leaf] = kids
        for other in list(self.links.get(leaf, ())):
            self._split(other, sizes, seen)
            for x, y in zip(kids, self.kids[self.find(other)]):
                self._link_leaves(x, y)

    def cut(self, atoms: list[int], bounds: list[int]) -> list[int]:
        """Leaves of ``atoms`` cut so every cumulative size in ``bounds`` is a leaf boundary."""
        for q in bounds:
            while True:
                leaves, p = self.leaf_list(atoms), 1
                for leaf in leaves:
                    s = self.size[leaf]
                    if p < q < p * s:
                        if q % p or (p * s) % q:
                            raise Conflict(f"sizes {s} and {q // p} do not divide")
                        self._split(leaf, [q // p, p * s // q], set())
                        break
                    p *= s
                else:
                    break
        return self.leaf_list(atoms)

    @staticmethod
    def _bounds(sizes: list[int]) -> list[int]:
        out, p = [], 1
        for s in sizes:
            p *= s
            out.append(p)
        return out

    def _common(self, a: list[int], b: list[int]) -> tuple[list[int], list[int]]:
        ba = self._bounds([self.size[x] for x in self.leaf_list(a)])
        bb = self._bounds([self.size[x] for x in self.leaf_list(b)])
        bounds = sorted(set(ba) | set(bb))
        for _ in range(4):  # cutting one side may cut a linked atom on the other
            la, lb = self.cut(a, bounds), self.cut(b, bounds)
            if [self.size[x] for x in la] == [self.size[x] for x in lb]:
                return la, lb
            bounds = sorted(set(bounds) | set(self._bounds([self.size[x] for x in la]))
                            | set(self._bounds([self.size[x] for x in lb])))
        raise Conflict("axes cannot be cut alike")

    def unify(self, a: list[int], b: list[int]) -> None:
        """Make the axes ``a`` and ``b`` (atom lists of one total size) the same atoms."""
        if math.prod(self.size[x] for x in self.leaf_list(a)) != \
                math.prod(self.size[x] for x in self.leaf_list(b)):
            raise Conflict("sizes differ")
        la, lb = self._common(a, b)
        for x, y in zip(la, lb):
            self._union(x, y)

    def link(self, a: list[int], b: list[int]) -> list[tuple[int, int]]:
        """Cut ``a`` and ``b`` alike and keep them so; returns the leaf pairs."""
        la, lb = self._common(a, b)
        for x, y in zip(la, lb):
            self._link_leaves(x, y)
        return list(zip(la, lb))

    def _link_leaves(self, x: int, y: int) -> None:
        x, y = self.find(x), self.find(y)
        if x != y:
            self.links.setdefault(x, set()).add(y)
            self.links.setdefault(y, set()).add(x)

    def _union(self, x: int, y: int) -> None:
        x, y = self.find(x), self.find(y)
        if x == y:
            return
        if ROLE_RANK[self.role[y]] < ROLE_RANK[self.role[x]]:
            self.role[x] = self.role[y]
        self.locked[x] = self.locked[x] or self.locked[y]
        self.parent[y] = x
        links = self.links.pop(y, set())
        for other in links:
            self.links.get(other, set()).discard(y)
            self._link_leaves(x, other)


@dataclass
class PortSpec:
    """A tensor an op reads or writes: its data atoms in layout order.

    ``alias`` maps atoms of this port to the op's dim atoms where they differ (a
    convolution's input height to its output height, a contracted weight axis to
    the activation's). ``extents`` (weights only) overrides the shape: an axis
    with extent given and atom None is unmapped (a broadcast bias).
    """

    atoms: list[int]
    source: tuple["Pending", int] | None = None
    alias: list[tuple[int, int]] = field(default_factory=list)
    param: str | None = None
    raw: list[tuple[int, int | None]] | None = None
    user: int | None = None  # the model's input this port reads (its index)
    # An atom read as several op dims, major first (a grouped conv's channels: [g c]).
    multi: list[tuple[int, list[int]]] = field(default_factory=list)


@dataclass
class AxisOf:
    """An attribute that is the op's axis index of an atom (resolved at emission)."""

    atom: int


@dataclass
class Pending:
    """An op recorded during the walk, emitted once every atom is final.

    ``order`` says how its dims are ordered: ``einsum`` (output axes, then the
    contracted ones), ``input`` (the first input's axes), ``output`` (the first
    output's) or ``conv`` (``b [g] c h w r s n``: the handler names the dims in ``names``).
    """

    name: str
    kind: str
    inputs: list[PortSpec]
    outputs: list[PortSpec]
    weights: list[PortSpec] = field(default_factory=list)
    attrs: dict[str, Any] = field(default_factory=dict)
    pinned: list[int] = field(default_factory=list)
    order: str = "einsum"
    aten: list[str] = field(default_factory=list)
    module: str = ""
    contiguous: bool = False
    counted: bool = False  # a product torch's FlopCounterMode counts
    dead: bool = False
    names: dict[int, str] = field(default_factory=dict)  # leaf -> dim name, set by emit
    node: Any = None  # the FX node it was made from (the FLOP check compares per node)
    # (atom, dim name) in dim order, for kinds whose schema names their dims (MoEDispatch's
    # ``x b c e l``); each atom must still be one leaf when the op is emitted.
    fixed: list[tuple[int, str]] = field(default_factory=list)


def _leaf_map(atoms: Atoms, port: PortSpec) -> dict[int, int]:
    out: dict[int, int] = {}
    for src, dst in port.alias:
        ls, ld = atoms.leaves(src), atoms.leaves(dst)
        if len(ls) != len(ld):
            raise Conflict("an aliased axis was cut on one side only")
        out.update(zip(ls, ld))
    return out


def mapped_axes(atoms: Atoms, port: PortSpec) -> list[tuple[int, ...]]:
    """Per axis of ``port``, the op dims (leaves) it maps to, in layout order."""
    m = _leaf_map(atoms, port)
    multi = {atoms.leaves(src)[0]: tuple(atoms.leaves(d)[0] for d in dims)
             for src, dims in port.multi}
    return [multi.get(leaf) or (m.get(leaf, leaf),) for leaf in atoms.leaf_list(port.atoms)]


def mapped(atoms: Atoms, port: PortSpec) -> list[int]:
    """The op dims (leaves) ``port``'s axes map to, in layout order."""
    return [d for axis in mapped_axes(atoms, port) for d in axis]


def _one_leaf(atoms: Atoms, a: int, op: str) -> int:
    leaves = atoms.leaves(a)
    if len(leaves) != 1:
        raise Conflict(f"op {op!r} needs its axis of size {atoms.size[atoms.find(a)]} whole, but "
                       f"a view cut it")
    return leaves[0]


def emit(atoms: Atoms, p: Pending) -> Op:
    """The IR op of ``p`` with its dims at the atoms' final leaves."""
    if p.fixed:
        dims = [_one_leaf(atoms, a, p.name) for a, _ in p.fixed]
    elif p.order == "input":
        dims = mapped(atoms, p.inputs[0])
    elif p.order == "output":
        dims = mapped(atoms, p.outputs[0])
    else:  # einsum / conv: output axes, then the contracted ones in order of appearance
        dims = list(dict.fromkeys(mapped(atoms, p.outputs[0])))
        for port in p.inputs + p.weights:
            if port.raw is None:
                dims += [d for d in mapped(atoms, port) if d not in dims]
    if len(set(dims)) != len(dims):
        raise Conflict(f"op {p.name!r} reads one axis twice")
    if p.fixed:
        names = {d: n for d, (_, n) in zip(dims, p.fixed)}
    elif p.order == "conv":  # the handler named every dim atom (pase.schema's Conv letters)
        names = {atoms.leaves(a)[0]: n for a, n in p.names.items()}
        dims = sorted(dims, key=lambda d: "bgcdhwqrsn".index(names[d]))
    else:
        names = {d: LETTERS[i] if i < len(LETTERS) else f"d{i}" for i, d in enumerate(dims)}

    def port(spec: PortSpec, source: tuple[str, int] | None = None) -> Port:
        if spec.raw is not None:
            return Port(tuple(e for e, _ in spec.raw),
                        tuple(() if a is None else (names[atoms.leaves(a)[0]],)
                              for _, a in spec.raw))
        leaves = atoms.leaf_list(spec.atoms)
        return Port(tuple(atoms.size[x] for x in leaves),
                    tuple(tuple(names[d] for d in axis) for axis in mapped_axes(atoms, spec)),
                    source)

    def flat(spec: PortSpec, source: tuple[str, int] | None = None) -> Port:
        """The 1-D side of a reshape: its one axis split by every dim, in order."""
        return Port((math.prod(atoms.size[d] for d in dims),), (tuple(names[d] for d in dims),),
                    source)

    def source_of(s: PortSpec) -> tuple[str, int] | None:
        return None if s.source is None else (s.source[0].name, s.source[1])

    if p.kind == "Unravel":
        inputs = (flat(p.inputs[0], source_of(p.inputs[0])),)
    else:
        inputs = tuple(port(s, source_of(s)) for s in p.inputs)
    outputs = (flat(p.outputs[0]),) if p.kind == "Ravel" else tuple(port(s) for s in p.outputs)
    weights = tuple(port(w) for w in p.weights)
    attrs: dict[str, Any] = {}
    for key, value in p.attrs.items():
        if isinstance(value, AxisOf):
            value = dims.index(atoms.leaves(value.atom)[0])
        elif isinstance(value, list) and value and isinstance(value[0], AxisOf):
            value = sorted({dims.index(leaf) for v in value for leaf in atoms.leaves(v.atom)})
        attrs[key] = value
    if p.kind in ("Einsum", "Embedding"):
        operands = list(inputs) + list(weights[:-1] if attrs.get("bias") else weights)
        letters = ["".join(a[0] for a in q.dims) for q in operands]
        attrs["eq"] = f"{letters[0]},{letters[1]}->{''.join(a[0] for a in outputs[0].dims)}"
    p.names = dict(names)
    op_dims = tuple(Dim(names[d], atoms.size[d], atoms.role[d]) for d in dims)
    pinned = frozenset(names[leaf] for a in p.pinned for leaf in atoms.leaves(a))
    return Op(p.name, p.kind, op_dims, inputs=inputs, outputs=outputs, weights=weights,
              pinned=pinned, contiguous=p.contiguous, attrs=attrs)

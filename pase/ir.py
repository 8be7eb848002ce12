"""The graph IR: ops with named iteration spaces, the tensors they read and write.

An :class:`Op` owns an ordered iteration space of named :class:`Dim` s. A
configuration splits each dim some number of ways. Every tensor an op reads or
writes (a :class:`Port`) says, per tensor axis, which of the op's dims split it:
the axis is split by the product of their factors (none: unsplit). That one rule
covers plain layers (axis ``b`` <- dim ``b``), convolutions (input ``h`` <- output
dim ``h``), reshapes (the flat axis <- every dim) and concatenations.

A :class:`Graph` is ops in build order; a port's ``source`` names the producing
op and output index, or is None for graph inputs and weights (which add no edges).
Graphs validate on construction and round-trip through a versioned JSON schema
(see ``docs/graph-schema.md``).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

from pase.errors import GraphError

SCHEMA = "pase.graph"
SCHEMA_VERSION = 1

ROLES = (
    "batch",       # samples; data parallelism splits it
    "sequence",    # tokens / time steps
    "spatial",     # image height and width
    "window",      # convolution filter extent
    "channel",     # features of an activation (input channels, model width)
    "parameter",   # output features of a weight (output channels, FC units, FFN hidden)
    "reduction",   # contracted dimension of a GEMM not covered by another role
    "heads",       # attention heads
    "vocabulary",  # token vocabulary / classes
    "layer",       # stacked layers (LSTM)
    "other",
)


@dataclass(frozen=True)
class Dim:
    """One dimension of an op's iteration space."""

    name: str
    size: int
    role: str = "other"


@dataclass(frozen=True)
class Port:
    """A tensor an op reads or writes.

    ``dims[a]`` lists the op dims whose split factors multiply to split axis ``a``.
    ``source`` is ``(producer op name, output index)`` for inputs made by an op.
    """

    shape: tuple[int, ...]
    dims: tuple[tuple[str, ...], ...]
    source: tuple[str, int] | None = None


@dataclass(frozen=True)
class Connection:
    """A tensor flowing from an op's output to another op's input."""

    src: str
    src_output: int
    dst: str
    dst_input: int


@dataclass(frozen=True)
class Op:
    """A layer: a kind, a named iteration space, ports and attributes.

    ``pinned`` dims are never split. ``contiguous`` ops (reshapes) only allow
    configs that keep each device's block contiguous in memory.
    """

    name: str
    kind: str
    dims: tuple[Dim, ...]
    inputs: tuple[Port, ...] = ()
    outputs: tuple[Port, ...] = ()
    weights: tuple[Port, ...] = ()
    pinned: frozenset[str] = frozenset()
    contiguous: bool = False
    attrs: Mapping[str, Any] = field(default_factory=dict)

    @property
    def dim_names(self) -> tuple[str, ...]:
        return tuple(d.name for d in self.dims)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(d.size for d in self.dims)

    def dim_index(self, name: str) -> int:
        try:
            return self.dim_names.index(name)
        except ValueError:
            raise GraphError(f"op {self.name!r} has no dim {name!r}; dims: "
                             f"{', '.join(self.dim_names)}") from None

    def port_axes(self, port: Port) -> list[list[int]]:
        """Per tensor axis, the indices of the op dims that split it."""
        return [[self.dim_index(n) for n in axis] for axis in port.dims]


class Graph:
    """Ops in build order, validated on construction.

    Raises GraphError on duplicate names, sizes < 1, dangling references, shape
    mismatches between producer and consumer, cycles, and (for more than one op)
    a graph that is not connected.
    """

    def __init__(self, name: str, ops: Iterable[Op] = (), attrs: Mapping[str, Any] | None = None):
        self.name = name
        self.attrs: dict[str, Any] = dict(attrs or {})
        self.ops: list[Op] = list(ops)
        self._index = {}
        for i, op in enumerate(self.ops):
            if op.name in self._index:
                raise GraphError(f"duplicate op name {op.name!r} (ops {self._index[op.name]} and {i})")
            self._index[op.name] = i
        for op in self.ops:
            _check_op(op)
        self._connections = self._link()
        self._check_acyclic()
        self._check_connected()

    # -- access --------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.ops)

    def __iter__(self):
        return iter(self.ops)

    def __contains__(self, name: str) -> bool:
        return name in self._index

    def op(self, name: str) -> Op:
        try:
            return self.ops[self._index[name]]
        except KeyError:
            raise GraphError(f"graph {self.name!r} has no op {name!r}") from None

    def index(self, name: str) -> int:
        self.op(name)
        return self._index[name]

    @property
    def connections(self) -> list[Connection]:
        """Every producer-output -> consumer-input link, in consumer build order."""
        return list(self._connections)

    def vertex_pairs(self) -> list[tuple[int, int]]:
        """Distinct (producer, consumer) index pairs, in order of first appearance."""
        seen: dict[tuple[int, int], None] = {}
        for c in self._connections:
            seen.setdefault((self._index[c.src], self._index[c.dst]), None)
        return list(seen)

    # -- validation ----------------------------------------------------------
    def _link(self) -> list[Connection]:
        links = []
        for op in self.ops:
            for i, port in enumerate(op.inputs):
                if port.source is None:
                    continue
                src_name, out = port.source
                if src_name not in self._index:
                    raise GraphError(f"op {op.name!r} input {i} reads unknown op {src_name!r}")
                src = self.ops[self._index[src_name]]
                if not 0 <= out < len(src.outputs):
                    raise GraphError(f"op {op.name!r} input {i} reads output {out} of {src_name!r}, "
                                     f"which has {len(src.outputs)} output(s)")
                if src.outputs[out].shape != port.shape:
                    raise GraphError(f"shape mismatch on {src_name!r} output {out} -> {op.name!r} "
                                     f"input {i}: {src.outputs[out].shape} vs {port.shape}")
                links.append(Connection(src_name, out, op.name, i))
        return links

    def _check_acyclic(self) -> None:
        import networkx as nx

        g = nx.DiGraph([(c.src, c.dst) for c in self._connections])
        try:
            cycle = nx.find_cycle(g)
        except nx.NetworkXNoCycle:
            return
        path = " -> ".join([u for u, _ in cycle] + [cycle[0][0]])
        raise GraphError(f"graph {self.name!r} has a cycle: {path}")

    def _check_connected(self) -> None:
        if len(self.ops) < 2:
            return
        parent = list(range(len(self.ops)))

        def find(i: int) -> int:
            while parent[i] != i:
                parent[i] = parent[parent[i]]
                i = parent[i]
            return i

        for u, v in self.vertex_pairs():
            parent[find(u)] = find(v)
        roots = {find(i) for i in range(len(self.ops))}
        if len(roots) > 1:
            lonely = [op.name for i, op in enumerate(self.ops) if find(i) != find(0)][:5]
            raise GraphError(f"graph {self.name!r} is not connected ({len(roots)} parts); "
                             f"ops not reachable from {self.ops[0].name!r} include {lonely}")

    # -- JSON ----------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "version": SCHEMA_VERSION, "name": self.name,
                "attrs": dict(self.attrs), "ops": [_op_to_dict(op) for op in self.ops]}

    def to_json(self, path: str | Path | None = None, indent: int | None = 1) -> str:
        text = json.dumps(self.to_dict(), indent=indent)
        if path is not None:
            Path(path).write_text(text)
        return text

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Graph":
        if not isinstance(data, Mapping) or data.get("schema") != SCHEMA:
            raise GraphError(f"not a pase graph: expected \"schema\": \"{SCHEMA}\"")
        if data.get("version") != SCHEMA_VERSION:
            raise GraphError(f"graph schema version {data.get('version')!r} is not supported; "
                             f"this pase reads version {SCHEMA_VERSION}")
        try:
            ops = [_op_from_dict(d) for d in data["ops"]]
            return cls(str(data["name"]), ops, data.get("attrs", {}))
        except (KeyError, TypeError, ValueError) as exc:
            if isinstance(exc, GraphError):
                raise
            raise GraphError(f"malformed graph JSON: {type(exc).__name__}: {exc}") from exc

    @classmethod
    def from_json(cls, text_or_path: str | Path) -> "Graph":
        text = str(text_or_path)
        if not text.lstrip().startswith("{"):
            try:
                text = Path(text).read_text()
            except OSError as exc:
                raise GraphError(f"cannot read graph file {text_or_path}: {exc.strerror}") from exc
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise GraphError(f"graph file is not valid JSON: {exc}") from exc
        return cls.from_dict(data)

    def __repr__(self) -> str:
        return f"Graph({self.name!r}, {len(self.ops)} ops, {len(self.vertex_pairs())} edges)"


def _check_op(op: Op) -> None:
    where = f"op {op.name!r} ({op.kind})"
    names = [d.name for d in op.dims]
    if len(set(names)) != len(names):
        raise GraphError(f"{where} has duplicate dim names: {names}")
    for d in op.dims:
        if not isinstance(d.size, int) or d.size < 1:
            raise GraphError(f"{where} dim {d.name!r} has size {d.size!r}; sizes must be integers >= 1")
        if d.role not in ROLES:
            raise GraphError(f"{where} dim {d.name!r} has role {d.role!r}; allowed: {', '.join(ROLES)}")
    for p in op.pinned:
        if p not in names:
            raise GraphError(f"{where} pins unknown dim {p!r}; dims: {', '.join(names)}")
    for kind, ports in (("input", op.inputs), ("output", op.outputs), ("weight", op.weights)):
        for i, port in enumerate(ports):
            if len(port.dims) != len(port.shape):
                raise GraphError(f"{where} {kind} {i} has {len(port.shape)} axes but "
                                 f"{len(port.dims)} dim mappings")
            if any((not isinstance(s, int)) or s < 1 for s in port.shape):
                raise GraphError(f"{where} {kind} {i} has shape {port.shape}; sizes must be >= 1")
            for axis in port.dims:
                for n in axis:
                    if n not in names:
                        raise GraphError(f"{where} {kind} {i} maps an axis onto unknown dim {n!r}; "
                                         f"dims: {', '.join(names)}")


def _port_to_dict(p: Port) -> dict[str, Any]:
    d: dict[str, Any] = {"shape": list(p.shape), "dims": [list(a) for a in p.dims]}
    if p.source is not None:
        d["source"] = {"op": p.source[0], "output": p.source[1]}
    return d


def _port_from_dict(d: Mapping[str, Any]) -> Port:
    src = d.get("source")
    return Port(tuple(int(s) for s in d["shape"]), tuple(tuple(str(n) for n in a) for a in d["dims"]),
                None if src is None else (str(src["op"]), int(src.get("output", 0))))


def _op_to_dict(op: Op) -> dict[str, Any]:
    return {
        "name": op.name, "kind": op.kind,
        "dims": [{"name": d.name, "size": d.size, "role": d.role} for d in op.dims],
        "pinned": sorted(op.pinned), "contiguous": op.contiguous,
        "inputs": [_port_to_dict(p) for p in op.inputs],
        "outputs": [_port_to_dict(p) for p in op.outputs],
        "weights": [_port_to_dict(p) for p in op.weights],
        "attrs": _jsonable(op.attrs),
    }


def _op_from_dict(d: Mapping[str, Any]) -> Op:
    return Op(
        name=str(d["name"]), kind=str(d["kind"]),
        dims=tuple(Dim(str(x["name"]), x["size"], str(x.get("role", "other"))) for x in d["dims"]),
        inputs=tuple(_port_from_dict(p) for p in d.get("inputs", [])),
        outputs=tuple(_port_from_dict(p) for p in d.get("outputs", [])),
        weights=tuple(_port_from_dict(p) for p in d.get("weights", [])),
        pinned=frozenset(str(p) for p in d.get("pinned", [])),
        contiguous=bool(d.get("contiguous", False)),
        attrs=_tuplify(d.get("attrs", {})),
    )


def _jsonable(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


def _tuplify(value: Any) -> Any:
    """JSON lists back to tuples, so attrs compare equal after a round trip."""
    if isinstance(value, Mapping):
        return {k: _tuplify(v) for k, v in value.items()}
    if isinstance(value, list):
        return tuple(_tuplify(v) for v in value)
    return value

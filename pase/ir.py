"""The graph IR: ops with named iteration spaces, the tensors they read and write.

An :class:`Op` owns an ordered iteration space of named :class:`Dim` s. A
configuration splits each dim some number of ways. Every tensor an op reads or
writes (a :class:`Port`) says, per tensor axis, which of the op's dims split it:
the axis is split by the product of their factors (none: unsplit). That one rule
covers plain layers (axis ``b`` <- dim ``b``), convolutions (input ``h`` <- output
dim ``h``), reshapes (the flat axis <- every dim) and concatenations.

A :class:`Graph` is ops in build order; a port's ``source`` names the producing
op and output index, or is None for graph inputs and weights (which add no edges).

Ops and graphs are immutable values: an op's ``attrs`` is a read-only
:class:`FrozenDict`, a graph's ``ops`` a tuple, and both hash and compare by
value, so a graph cannot change under a Problem built from it. Graphs validate on
construction, each op against the schema of its kind (:mod:`pase.schema`,
``docs/ops.md``), and round-trip through a versioned JSON schema
(``docs/graph-schema.md``); :func:`read_graph_file` reads one from a file.
"""
from __future__ import annotations

import json
import math
import os
from collections import abc
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

from pase import schema
from pase.errors import GraphError
from pase.files import write_text_atomic
from pase.strictjson import DuplicateKeyError, name_problem
from pase.strictjson import loads as strict_loads

SCHEMA = "pase.graph"
SCHEMA_VERSION = 1

# Largest graph file read. The biggest built-in graph (ResNet-101, 245 ops) writes
# about 0.3 MiB of JSON, so this allows graphs some 200 times larger; a bigger file
# is more likely a mistake than a model whose Problem could be built.
MAX_GRAPH_FILE_BYTES = 64 * 2**20

# Deepest nesting of lists and objects inside an attribute value. Every attribute
# pase knows is at most two deep; the limit keeps pathological JSON from exhausting
# Python's recursion.
MAX_ATTR_DEPTH = 16

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
    "expert",      # experts of a mixture-of-experts layer; splitting it is expert parallelism
    "other",
)


class FrozenDict(Mapping[str, Any]):
    """A read-only, hashable mapping (an op's or a graph's ``attrs``).

    Compares equal to any mapping with the same items.

    >>> a = FrozenDict({"pw": 1})
    >>> a["pw"], a == {"pw": 1}, hash(a) == hash(FrozenDict(pw=1))
    (1, True, True)
    """

    __slots__ = ("_data", "_hash")

    def __init__(self, *args: Any, **kwargs: Any):
        object.__setattr__(self, "_data", dict(*args, **kwargs))
        object.__setattr__(self, "_hash", None)

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __hash__(self) -> int:
        if self._hash is None:
            object.__setattr__(self, "_hash", hash(frozenset(self._data.items())))
        return self._hash  # type: ignore[return-value]

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("FrozenDict is read-only")

    def __reduce__(self):
        return (FrozenDict, (self._data,))

    def __repr__(self) -> str:
        return f"FrozenDict({self._data!r})"


def freeze(value: Any, where: str = "attribute", depth: int = 0) -> Any:
    """A hashable, read-only copy of an attribute value.

    Lists and tuples become tuples, mappings FrozenDicts (string keys), sets
    frozensets, numpy scalars and arrays Python numbers and tuples.
    """
    if depth > MAX_ATTR_DEPTH:
        raise GraphError(f"{where} nests lists or objects more than {MAX_ATTR_DEPTH} levels deep")
    if isinstance(value, (str, bytes, bool, int, float, type(None))):
        return value
    if isinstance(value, Mapping):
        for k in value:
            if not isinstance(k, str):
                raise GraphError(f"{where} has a non-string key {k!r}; keys must be strings")
        return FrozenDict({k: freeze(v, f"{where}[{k!r}]", depth + 1) for k, v in value.items()})
    if isinstance(value, (list, tuple)):
        return tuple(freeze(v, where, depth + 1) for v in value)
    if isinstance(value, (set, frozenset)):
        return frozenset(freeze(v, where, depth + 1) for v in value)
    tolist = getattr(value, "tolist", None)  # numpy scalars and arrays
    if callable(tolist):
        return freeze(tolist(), where, depth)
    try:
        hash(value)
    except TypeError:
        raise GraphError(f"{where} is a {type(value).__name__}, which cannot be frozen; use "
                         f"numbers, strings, booleans, lists and mappings") from None
    return value


def _int_or_same(value: Any) -> Any:
    """numpy integers to int (so dims and shapes hash and serialise); others unchanged."""
    if isinstance(value, bool) or isinstance(value, int):
        return value
    tolist = getattr(value, "tolist", None)
    if callable(tolist):
        plain = tolist()
        if isinstance(plain, int) and not isinstance(plain, bool):
            return plain
    return value


def _as_tuple(value: Any, what: str) -> tuple:
    if type(value) is tuple:
        return value
    if isinstance(value, (str, bytes)) or not isinstance(value, abc.Iterable):
        raise GraphError(f"{what} must be a sequence, got {value!r}")
    return tuple(value)


@dataclass(frozen=True)
class Dim:
    """One dimension of an op's iteration space."""

    name: str
    size: int
    role: str = "other"

    def __post_init__(self) -> None:
        object.__setattr__(self, "size", _int_or_same(self.size))


@dataclass(frozen=True)
class Port:
    """A tensor an op reads or writes.

    ``dims[a]`` lists the op dims whose split factors multiply to split axis ``a``.
    ``source`` is ``(producer op name, output index)`` for inputs made by an op.
    """

    shape: tuple[int, ...]
    dims: tuple[tuple[str, ...], ...]
    source: tuple[str, int] | None = None

    def __post_init__(self) -> None:
        shape = tuple(_int_or_same(s) for s in _as_tuple(self.shape, "a port's shape"))
        dims = tuple(_as_tuple(axis, "a port axis's dims")
                     for axis in _as_tuple(self.dims, "a port's dims"))
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "dims", dims)
        if self.source is not None:
            src = _as_tuple(self.source, "a port's source")
            object.__setattr__(self, "source", src[:1] + tuple(_int_or_same(s) for s in src[1:]))


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
    configs that keep each device's block contiguous in memory. ``attrs`` is
    read-only (a :class:`FrozenDict`; lists become tuples); what each kind
    allows is in :mod:`pase.schema`. Ops hash and compare by value.
    """

    name: str
    kind: str
    dims: tuple[Dim, ...]
    inputs: tuple[Port, ...] = ()
    outputs: tuple[Port, ...] = ()
    weights: tuple[Port, ...] = ()
    pinned: frozenset[str] = frozenset()
    contiguous: bool = False
    attrs: Mapping[str, Any] = field(default_factory=FrozenDict)

    def __post_init__(self) -> None:
        where = f"op {self.name!r}"
        for name in ("dims", "inputs", "outputs", "weights"):
            object.__setattr__(self, name, _as_tuple(getattr(self, name), f"{where} {name}"))
        object.__setattr__(self, "pinned", frozenset(_as_tuple(self.pinned, f"{where} pinned")))
        if not isinstance(self.attrs, Mapping):
            raise GraphError(f"{where} attrs must be a mapping of names to values, "
                             f"got {self.attrs!r}")
        object.__setattr__(self, "attrs", freeze(self.attrs, f"{where} attrs"))

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

    def is_parameter(self, port: Port) -> bool:
        """A weight with no batch-role axis: trained and synchronised (a weight with a
        batch axis is data, such as an embedding's one-hot ids)."""
        roles = {d.name: d.role for d in self.dims}
        return port in self.weights and not any(roles[n] == "batch" for axis in port.dims
                                                for n in axis)

    def port_axes(self, port: Port) -> list[list[int]]:
        """Per tensor axis, the indices of the op dims that split it."""
        return [[self.dim_index(n) for n in axis] for axis in port.dims]


class Graph:
    """Ops in build order: an immutable value, validated on construction.

    Raises GraphError when the graph has no ops, on duplicate names, an op that
    breaks the schema of its kind (sizes, attributes, dims against port shapes:
    see :mod:`pase.schema`), dangling references, shape mismatches between
    producer and consumer, cycles, and (for more than one op) a graph that is not
    connected. ``ops`` is a tuple and ``attrs`` a read-only mapping; graphs hash
    and compare by name, attrs and ops.
    """

    __slots__ = ("_name", "_attrs", "_ops", "_index", "_connections", "_pairs", "_hash")

    def __init__(self, name: str, ops: Iterable[Op] = (), attrs: Mapping[str, Any] | None = None,
                 *, check_ops: bool = True):
        """``check_ops=False`` skips :func:`check_op` for ops already checked by it
        (GraphBuilder checks each op as it is added); the graph-level checks always run."""
        if not isinstance(name, str):
            raise GraphError(f"a graph's name must be a string, got {name!r}")
        if name_problem(name):
            raise GraphError(f"the graph name {name!r} {name_problem(name)}")
        ops = tuple(ops)
        if not ops:
            raise GraphError(f"graph {name!r} has no ops; a graph needs at least one op")
        for i, op in enumerate(ops):
            if not isinstance(op, Op):
                raise GraphError(f"graph {name!r} item {i} is a {type(op).__name__}, not an Op")
        if attrs is not None and not isinstance(attrs, Mapping):
            raise GraphError(f"graph {name!r} attrs must be a mapping, got {attrs!r}")
        frozen = freeze(dict(attrs or {}), f"graph {name!r} attrs")
        schema.check_graph_attrs(name, frozen)
        index: dict[str, int] = {}
        for i, op in enumerate(ops):
            if check_ops:
                check_op(op)
            if op.name in index:
                raise GraphError(f"duplicate op name {op.name!r} (ops {index[op.name]} and {i})")
            index[op.name] = i
        set_ = object.__setattr__
        set_(self, "_name", name)
        set_(self, "_attrs", frozen)
        set_(self, "_ops", ops)
        set_(self, "_index", index)
        set_(self, "_hash", None)
        connections = self._link()
        set_(self, "_connections", connections)
        seen: dict[tuple[int, int], None] = {}
        for c in connections:
            seen.setdefault((index[c.src], index[c.dst]), None)
        set_(self, "_pairs", tuple(seen))
        self._check_acyclic()
        self._check_connected()

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"a Graph is immutable (cannot set {name!r}); "
                             f"build a new one with GraphBuilder or Graph(name, ops, attrs)")

    def __delattr__(self, name: str) -> None:
        raise AttributeError("a Graph is immutable")

    def __reduce__(self):
        return (Graph, (self._name, self._ops, dict(self._attrs)))

    # -- access --------------------------------------------------------------
    @property
    def name(self) -> str:
        return self._name

    @property
    def ops(self) -> tuple[Op, ...]:
        """The ops in build order."""
        return self._ops

    @property
    def attrs(self) -> Mapping[str, Any]:
        """Graph-level attributes (``cutoff``, ``batch``...), read-only."""
        return self._attrs

    def __len__(self) -> int:
        return len(self._ops)

    def __iter__(self) -> Iterator[Op]:
        return iter(self._ops)

    def __contains__(self, name: object) -> bool:
        return name in self._index

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Graph):
            return NotImplemented
        return (self._name, self._attrs, self._ops) == (other._name, other._attrs, other._ops)

    def __hash__(self) -> int:
        if self._hash is None:
            object.__setattr__(self, "_hash", hash((self._name, self._attrs, self._ops)))
        return self._hash  # type: ignore[return-value]

    def op(self, name: str) -> Op:
        try:
            return self._ops[self._index[name]]
        except (KeyError, TypeError):
            raise GraphError(f"graph {self._name!r} has no op {name!r}") from None

    def index(self, name: str) -> int:
        self.op(name)
        return self._index[name]

    @property
    def connections(self) -> list[Connection]:
        """Every producer-output -> consumer-input link, in consumer build order."""
        return list(self._connections)

    def vertex_pairs(self) -> list[tuple[int, int]]:
        """Distinct (producer, consumer) index pairs, in order of first appearance."""
        return list(self._pairs)

    # -- validation ----------------------------------------------------------
    def _link(self) -> tuple[Connection, ...]:
        links = []
        for op in self._ops:
            for i, port in enumerate(op.inputs):
                if port.source is None:
                    continue
                src_name, out = port.source
                if src_name not in self._index:
                    raise GraphError(f"op {op.name!r} input {i} reads unknown op {src_name!r}")
                src = self._ops[self._index[src_name]]
                if not 0 <= out < len(src.outputs):
                    raise GraphError(f"op {op.name!r} input {i} reads output {out} of {src_name!r}, "
                                     f"which has {len(src.outputs)} output(s)")
                if src.outputs[out].shape != port.shape:
                    raise GraphError(f"shape mismatch on {src_name!r} output {out} -> {op.name!r} "
                                     f"input {i}: {src.outputs[out].shape} vs {port.shape}")
                links.append(Connection(src_name, out, op.name, i))
        return tuple(links)

    def _check_acyclic(self) -> None:
        import networkx as nx

        g = nx.DiGraph([(c.src, c.dst) for c in self._connections])
        try:
            cycle = nx.find_cycle(g)
        except nx.NetworkXNoCycle:
            return
        path = " -> ".join([u for u, _ in cycle] + [cycle[0][0]])
        raise GraphError(f"graph {self._name!r} has a cycle: {path}")

    def _check_connected(self) -> None:
        if len(self._ops) < 2:
            return
        parent = list(range(len(self._ops)))

        def find(i: int) -> int:
            while parent[i] != i:
                parent[i] = parent[parent[i]]
                i = parent[i]
            return i

        for u, v in self._pairs:
            parent[find(u)] = find(v)
        roots = {find(i) for i in range(len(self._ops))}
        if len(roots) > 1:
            lonely = [op.name for i, op in enumerate(self._ops) if find(i) != find(0)][:5]
            raise GraphError(f"graph {self._name!r} is not connected ({len(roots)} parts); "
                             f"ops not reachable from {self._ops[0].name!r} include {lonely}")

    # -- JSON ----------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "version": SCHEMA_VERSION, "name": self._name,
                "attrs": _jsonable(self._attrs), "ops": [_op_to_dict(op) for op in self._ops]}

    def to_json(self, path: str | Path | None = None, indent: int | None = 1) -> str:
        text = json.dumps(self.to_dict(), indent=indent)
        if path is not None:
            write_text_atomic(path, text, what="graph file")
        return text

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Graph":
        """A Graph from the parsed JSON schema; GraphError names what is wrong."""
        if not isinstance(data, Mapping) or data.get("schema") != SCHEMA:
            raise GraphError(f"not a pase graph: expected \"schema\": \"{SCHEMA}\"")
        version = data.get("version")
        if type(version) is not int or version != SCHEMA_VERSION:
            raise GraphError(f"graph schema version {version!r} is not supported; "
                             f"this pase reads version {SCHEMA_VERSION}")
        _only_keys(data, _GRAPH_KEYS, "the graph")
        name = data.get("name")
        if not isinstance(name, str):
            raise GraphError(f"the graph's \"name\" must be a string, got {_short(name)}")
        attrs = data.get("attrs", {})
        if not isinstance(attrs, Mapping):
            raise GraphError(f"graph {name!r} \"attrs\" must be an object, got {_short(attrs)}")
        ops = data.get("ops")
        if not isinstance(ops, list):
            raise GraphError(f"graph {name!r} \"ops\" must be a list of op objects, "
                             f"got {_short(ops)}")
        try:
            return cls(name, [_op_from_dict(d, i) for i, d in enumerate(ops)], attrs)
        except GraphError:
            raise
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            raise GraphError(f"malformed graph JSON: {type(exc).__name__}: {exc}") from exc

    @classmethod
    def from_json(cls, text_or_path: str | Path) -> "Graph":
        """A Graph from JSON text (a string starting with ``{``) or a file path."""
        if isinstance(text_or_path, Path) or not str(text_or_path).lstrip().startswith("{"):
            return read_graph_file(text_or_path)
        return cls.from_dict(_parse_json(str(text_or_path), "graph JSON"))

    def __repr__(self) -> str:
        return f"Graph({self._name!r}, {len(self._ops)} ops, {len(self._pairs)} edges)"


def read_graph_file(path: str | Path) -> Graph:
    """Read a graph JSON file; every problem is a one-line GraphError naming the file.

    Refuses files over :data:`MAX_GRAPH_FILE_BYTES`, files that are not UTF-8,
    JSON nested too deeply to parse, and graphs that fail validation.
    """
    label = f"graph file {str(path)!r}"
    limit = f"{MAX_GRAPH_FILE_BYTES // 2**20} MiB"
    try:
        p = Path(path)
        if p.is_file() and os.path.getsize(p) > MAX_GRAPH_FILE_BYTES:
            raise GraphError(f"{label} has {os.path.getsize(p)} bytes, more than the {limit} "
                             f"allowed (pase.ir.MAX_GRAPH_FILE_BYTES)")
        with p.open("rb") as f:
            raw = f.read(MAX_GRAPH_FILE_BYTES + 1)
    except OSError as exc:
        raise GraphError(f"cannot read {label}: {exc.strerror or exc}") from exc
    if len(raw) > MAX_GRAPH_FILE_BYTES:
        raise GraphError(f"{label} is larger than the {limit} allowed "
                         f"(pase.ir.MAX_GRAPH_FILE_BYTES)")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise GraphError(f"{label} is not UTF-8 text: byte 0x{raw[exc.start]:02x} at offset "
                         f"{exc.start}") from None
    data = _parse_json(text, label)
    try:
        return Graph.from_dict(data)
    except GraphError as exc:
        raise GraphError(f"{label}: {exc}") from exc


def _parse_json(text: str, label: str) -> Any:
    try:
        return strict_loads(text)
    except DuplicateKeyError as exc:
        raise GraphError(f"{label}: {exc}") from None
    except RecursionError:
        raise GraphError(f"{label} nests lists or objects too deeply for the JSON reader; "
                         f"a graph needs at most a few levels") from None
    except ValueError as exc:  # json.JSONDecodeError, or an integer with too many digits
        raise GraphError(f"{label} is not valid JSON: {exc}") from None


# -- generic (kind-independent) op checks -------------------------------------------

def _is_size(value: Any) -> bool:
    return type(value) is int and 1 <= value <= schema.MAX_SIZE


_SIZES = f"integers in 1..2**{int(math.log2(schema.MAX_SIZE))}"


def check_op(op: Op) -> None:
    """Check one op: kind-independent rules (names, sizes, roles, port mappings), then
    the schema of its kind (:func:`pase.schema.check_op`). GraphError otherwise."""
    if not isinstance(op.name, str) or not op.name:
        raise GraphError(f"an op has name {op.name!r}; op names must be non-empty strings")
    if name_problem(op.name):
        raise GraphError(f"the op name {op.name!r} {name_problem(op.name)}")
    schema.schema_of(op)  # a known kind, so messages may quote it
    where = f"op {op.name!r} ({op.kind})"
    for d in op.dims:
        if not isinstance(d, Dim):
            raise GraphError(f"{where} has a dim {d!r} that is not a Dim")
        if not isinstance(d.name, str) or not d.name or not d.name.isprintable():
            raise GraphError(f"{where} has a dim named {d.name!r}; dim names must be non-empty "
                             f"strings of printable characters")
        if not _is_size(d.size):
            raise GraphError(f"{where} dim {d.name!r} has size {_short(d.size)}; sizes must be {_SIZES}")
        if d.role not in ROLES:
            raise GraphError(f"{where} dim {d.name!r} has role {d.role!r}; allowed: {', '.join(ROLES)}")
    names = [d.name for d in op.dims]
    if len(set(names)) != len(names):
        raise GraphError(f"{where} has duplicate dim names: {names}")
    for p in sorted(op.pinned, key=str):
        if p not in names:
            raise GraphError(f"{where} pins unknown dim {p!r}; dims: {', '.join(names)}")
    if not isinstance(op.contiguous, bool):
        raise GraphError(f"{where} has contiguous={op.contiguous!r}; allowed: true or false")
    for kind, ports in (("input", op.inputs), ("output", op.outputs), ("weight", op.weights)):
        for i, port in enumerate(ports):
            if not isinstance(port, Port):
                raise GraphError(f"{where} {kind} {i} is not a Port: {_short(port)}")
            if len(port.dims) != len(port.shape):
                raise GraphError(f"{where} {kind} {i} has {len(port.shape)} axes but "
                                 f"{len(port.dims)} dim mappings")
            if not all(_is_size(s) for s in port.shape):
                raise GraphError(f"{where} {kind} {i} has shape {_short(port.shape)}; "
                                 f"sizes must be {_SIZES}")
            used: set[str] = set()
            for axis in port.dims:
                for n in axis:
                    if n not in names:
                        raise GraphError(f"{where} {kind} {i} maps an axis onto unknown dim {n!r}; "
                                         f"dims: {', '.join(names)}")
                    if n in used:
                        raise GraphError(f"{where} {kind} {i} maps dim {n!r} onto two axes; "
                                         f"a dim splits at most one axis of a tensor")
                    used.add(n)
            if port.source is not None:
                if kind != "input":
                    raise GraphError(f"{where} {kind} {i} has a source; only inputs read other ops")
                ok = (len(port.source) == 2 and isinstance(port.source[0], str)
                      and isinstance(port.source[1], int) and not isinstance(port.source[1], bool)
                      and port.source[1] >= 0)
                if not ok:
                    raise GraphError(f"{where} input {i} has source {_short(port.source)}; "
                                     f"allowed: (op name, output index >= 0)")
    schema.check_op(op)


# -- JSON fields -----------------------------------------------------------------

_GRAPH_KEYS = ("schema", "version", "name", "attrs", "ops")
_OP_KEYS = ("name", "kind", "dims", "pinned", "contiguous", "inputs", "outputs", "weights", "attrs")
_DIM_KEYS = ("name", "size", "role")
_PORT_KEYS = ("shape", "dims", "source")
_SOURCE_KEYS = ("op", "output")


def _short(value: Any) -> str:
    text = json.dumps(value) if isinstance(value, (str, int, float, bool, type(None))) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _only_keys(obj: Mapping[str, Any], allowed: tuple[str, ...], where: str) -> None:
    for key in obj:
        if key not in allowed:
            raise GraphError(f"{where} has unknown field {key!r}; allowed: {', '.join(allowed)}")


def _object(value: Any, where: str, what: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise GraphError(f"{where} must be an object ({what}), got {_short(value)}")
    return value


def _list(value: Any, where: str, what: str) -> list:
    if not isinstance(value, list):
        raise GraphError(f"{where} must be a list ({what}), got {_short(value)}")
    return value


def _string(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise GraphError(f"{where} must be a string, got {_short(value)}")
    return value


def _port_to_dict(p: Port) -> dict[str, Any]:
    d: dict[str, Any] = {"shape": list(p.shape), "dims": [list(a) for a in p.dims]}
    if p.source is not None:
        d["source"] = {"op": p.source[0], "output": p.source[1]}
    return d


def _port_from_dict(d: Any, where: str) -> Port:
    d = _object(d, where, "with \"shape\", \"dims\" and an optional \"source\"")
    _only_keys(d, _PORT_KEYS, where)
    for key in ("shape", "dims"):
        if key not in d:
            raise GraphError(f"{where} lacks field {key!r}")
    shape = _list(d["shape"], f"{where} \"shape\"", "one integer per axis")
    axes = _list(d["dims"], f"{where} \"dims\"", "per axis, a list of dim names")
    for a, axis in enumerate(axes):
        _list(axis, f"{where} \"dims\"[{a}]", "the dim names that split this axis")
        for n in axis:
            _string(n, f"{where} \"dims\"[{a}] entry")
    src = d.get("source")
    source = None
    if src is not None:
        src = _object(src, f"{where} \"source\"", "{\"op\": name, \"output\": index}")
        _only_keys(src, _SOURCE_KEYS, f"{where} \"source\"")
        op_name = _string(src.get("op"), f"{where} \"source\" \"op\"")
        out = src.get("output", 0)
        if not isinstance(out, int) or isinstance(out, bool) or out < 0:
            raise GraphError(f"{where} \"source\" \"output\" must be an integer >= 0, got {_short(out)}")
        source = (op_name, out)
    return Port(tuple(shape), tuple(tuple(axis) for axis in axes), source)


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


def _op_from_dict(d: Any, i: int) -> Op:
    d = _object(d, f"ops[{i}]", "an op")
    name = d.get("name")
    where = f"op {name!r} (ops[{i}])" if isinstance(name, str) else f"ops[{i}]"
    _only_keys(d, _OP_KEYS, where)
    _string(name, f"ops[{i}] \"name\"")
    kind = _string(d.get("kind"), f"{where} \"kind\"")
    dims = []
    for j, x in enumerate(_list(d.get("dims"), f"{where} \"dims\"", "{name, size, role} objects")):
        x = _object(x, f"{where} dims[{j}]", "{\"name\", \"size\", \"role\"}")
        _only_keys(x, _DIM_KEYS, f"{where} dims[{j}]")
        if "size" not in x:
            raise GraphError(f"{where} dims[{j}] lacks field 'size'")
        dims.append(Dim(_string(x.get("name"), f"{where} dims[{j}] \"name\""), x["size"],
                        _string(x.get("role", "other"), f"{where} dims[{j}] \"role\"")))
    ports = {}
    for key in ("inputs", "outputs", "weights"):
        ports[key] = tuple(_port_from_dict(p, f"{where} {key}[{k}]")
                           for k, p in enumerate(_list(d.get(key, []), f"{where} \"{key}\"",
                                                       "port objects")))
    pinned = [_string(p, f"{where} \"pinned\" entry")
              for p in _list(d.get("pinned", []), f"{where} \"pinned\"", "dim names")]
    contiguous = d.get("contiguous", False)
    if not isinstance(contiguous, bool):
        raise GraphError(f"{where} \"contiguous\" must be true or false, got {_short(contiguous)}")
    attrs = _object(d.get("attrs", {}), f"{where} \"attrs\"", "attribute names to values")
    return Op(name=name, kind=kind, dims=tuple(dims), inputs=ports["inputs"],
              outputs=ports["outputs"], weights=ports["weights"], pinned=frozenset(pinned),
              contiguous=contiguous, attrs=attrs)


def _jsonable(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_jsonable(v) for v in value]
    return value

"""The cluster model: nodes of identical devices, fast links inside a node, slower between.

A :class:`Cluster` is ``nodes x devices_per_node`` devices, each with a peak
speed and memory, joined by an intra-node :class:`Link` and an inter-node one.
Device ranks are numbered node by node (rank ``r`` lives on node
``r // devices_per_node``). Presets describe real machines; ``NAMExK`` is ``K``
nodes of preset ``NAME`` (``dgx-a100x2``), and a preset without ``xK`` grows to
as many nodes as ``devices`` needs (:mod:`pase.cluster.presets`).

Bandwidths are GB/s in one direction per device (10^9 bytes), latencies
microseconds, memory GiB, speeds TFLOP/s.

Heterogeneous clusters
----------------------
A cluster can also be made of groups (:class:`Group`) of nodes of different device
types (``dgx-a100x2+dgx1-v100x2``; docs/heterogeneous.md). Groups are ordered
fastest device first (stable for ties), and groups of one type (same device,
links and devices per node) merge, so a composition of one type is the plain
homogeneous cluster. Every group must have the same number of devices per node
(ranks still fill nodes in order). The cluster's own ``device``, ``intra`` and
``inter`` are then the slowest of its groups (conservative for any code that
does not look at the groups); :meth:`Cluster.view` gives the homogeneous view of
the first ``n`` ranks and :meth:`Cluster.prefixes` the rank counts of the group
prefixes an op may be placed on.
"""
from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from pase.errors import OptionError
from pase.files import regular_file, write_text_atomic
from pase.strictjson import DuplicateKeyError, name_problem
from pase.strictjson import loads as strict_loads

SCHEMA = "pase.cluster"
SCHEMA_VERSION = 1
LINK_CLASSES = ("intra", "inter")  # the two kinds of link a message can cross


# The most devices a cluster may hold: far beyond any machine built, small enough that
# every rank and group size stays a machine integer in numpy.
MAX_DEVICES = 2**24


def node_of(rank, devices_per_node: int):
    """The node of a device rank, or of each rank of an integer array.

    The one place that decides node membership (the cost models, the device
    mapping and the simulator all ask it): ranks fill nodes in order, so rank
    ``r`` is on node ``r // devices_per_node``, and a higher rank is never on a
    lower node.
    """
    return rank // devices_per_node


# -- the numbers a cluster is made of: each checked where it enters ------------------------

# field -> (least, most, unit, 0 allowed as "unknown"). The bounds are far outside any real
# machine yet keep every time, byte count and ratio the models compute finite (a peak of
# 1e-320 TFLOP/s would make a step infinitely long, a memory of 1e308 GiB an infinite byte count).
DEVICE_RANGES = {
    "peak_tflops": (1e-6, 1e6, "TFLOP/s", False),
    "memory_gib": (1e-6, 2.0**20, "GiB (1 PiB)", False),
    "bf16_tflops": (1e-6, 1e6, "TFLOP/s", True),
    "fp8_tflops": (1e-6, 1e6, "TFLOP/s", True),
    "mxfp8_tflops": (1e-6, 1e6, "TFLOP/s", True),
    "nvfp4_tflops": (1e-6, 1e6, "TFLOP/s", True),
    "fp32_tflops": (1e-6, 1e6, "TFLOP/s", True),
    "hbm_gbps": (1e-6, 1e6, "GB/s", True),
}
LINK_RANGES = {
    "bandwidth_gbps": (1e-6, 1e6, "GB/s", False),
    "latency_us": (0.0, 1e6, "us (1 s)", False),
}


def number_problem(value: Any, least: float, most: float, unit: str, zero_unknown: bool) -> str | None:
    """Why ``value`` cannot be a cluster figure in ``[least, most]`` (``unit``; 0 meaning
    unknown when ``zero_unknown``), or None when it can."""
    ok = not isinstance(value, bool) and isinstance(value, (int, float)) and (
        (zero_unknown and value == 0) or least <= value <= most)  # NaN and inf fail
    if ok:
        return None
    shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
    return (f"must be a finite number from {least:g} to {most:.10g} {unit}"
            f"{' (or 0: unknown)' if zero_unknown else ''}, got {shown}")


def check_numbers(values: Mapping[str, Any], ranges: Mapping[str, tuple], prefix: str) -> None:
    """OptionError ``{prefix}{field} must be ...`` for the first figure of ``values`` out of
    its range (fields absent from ``values`` are left to the constructor to miss)."""
    for key, rule in ranges.items():
        if key in values:
            problem = number_problem(values[key], *rule)
            if problem:
                raise OptionError(f"{prefix}{key} {problem}")


@dataclass(frozen=True)
class Link:
    """A link class: bandwidth per device and direction (GB/s), latency (us)."""

    bandwidth_gbps: float
    latency_us: float

    def __post_init__(self) -> None:
        check_numbers(vars(self), LINK_RANGES, "link: ")

    @property
    def bytes_per_second(self) -> float:
        return self.bandwidth_gbps * 1e9

    @property
    def latency_s(self) -> float:
        return self.latency_us * 1e-6


# The precisions a device's dense peak can be asked for (pase.perf). mxfp8 and nvfp4 are the
# block-scaled formats (OCP MX fp8; NVIDIA's fp4 with fp8 scales per 16 values) that Blackwell's
# tensor cores run natively; Hopper has fp8 but neither of them.
PRECISIONS = ("bf16", "fp16", "fp8", "mxfp8", "nvfp4", "fp32")


@dataclass(frozen=True)
class Device:
    """One accelerator: peak TFLOP/s (at ``precision``) and memory in GiB.

    The data-sheet figures the performance model reads (:mod:`pase.perf`) are
    optional (0: unknown): the dense tensor-core peaks in bf16/fp16, fp8 and the
    block-scaled mxfp8 and nvfp4, the fp32 peak (no tensor cores), and the HBM
    bandwidth in GB/s. Every figure is checked on construction
    (:data:`DEVICE_RANGES`): finite, positive (or 0 where 0 means unknown) and
    inside a range no real device leaves.
    """

    name: str
    peak_tflops: float
    memory_gib: float
    precision: str = "fp32"
    bf16_tflops: float = 0.0
    fp8_tflops: float = 0.0
    fp32_tflops: float = 0.0
    hbm_gbps: float = 0.0
    mxfp8_tflops: float = 0.0  # after hbm_gbps: Device(...) calls by position keep their meaning
    nvfp4_tflops: float = 0.0

    def __post_init__(self) -> None:
        for key in ("name", "precision"):
            if not isinstance(getattr(self, key), str):
                raise OptionError(f"device {key} must be a string, got {getattr(self, key)!r:.40}")
        check_numbers(vars(self), DEVICE_RANGES, f"device {self.name!r}: ")

    @property
    def memory_bytes(self) -> float:
        return self.memory_gib * 2**30

    def peak(self, precision: str) -> float:
        """Dense peak TFLOP/s at ``precision`` (one of :data:`PRECISIONS`); an
        OptionError names the device and what it has when the figure is unknown.

        A figure of 0 falls back to ``peak_tflops`` only when ``precision`` names that
        precision (``fp16-tensor`` answers bf16 and fp16); mxfp8 never falls back to fp8,
        as a device with fp8 need not run the MX formats (Hopper does not)."""
        if precision not in PRECISIONS:
            raise OptionError(f"unknown precision {precision!r}; allowed: {', '.join(PRECISIONS)}")
        figure = self._peak_or_zero(precision)
        if figure > 0:
            return figure
        # fp16 is listed only where it is not bf16's figure under another name
        have = [p for p in PRECISIONS if self._peak_or_zero(p) > 0
                and not (p == "fp16" and self.bf16_tflops > 0)]
        raise OptionError(f"device {self.name!r} has no {precision} peak; it has: "
                          f"{', '.join(have or [self.precision])}")

    def _peak_or_zero(self, precision: str) -> float:
        known = {"bf16": self.bf16_tflops, "fp16": self.bf16_tflops, "fp8": self.fp8_tflops,
                 "mxfp8": self.mxfp8_tflops, "nvfp4": self.nvfp4_tflops, "fp32": self.fp32_tflops}
        if known[precision] > 0:
            return float(known[precision])
        # the headline precision: "fp8" inside "fp8-tensor" but not inside "mxfp8"
        named = re.search(rf"(?<![a-z0-9]){precision}(?![0-9])", self.precision)
        if named or (precision in ("bf16", "fp16") and "16" in self.precision):
            return float(self.peak_tflops)
        return 0.0


@dataclass(frozen=True)
class Group:
    """``nodes`` nodes of one device type inside a heterogeneous cluster."""

    name: str
    nodes: int
    devices_per_node: int
    device: Device
    intra: Link
    inter: Link

    def __post_init__(self) -> None:
        _check_shape(f"group {self.name!r}", self)

    @property
    def devices(self) -> int:
        return self.nodes * self.devices_per_node

    def kind(self) -> tuple:
        """What makes two groups one device type."""
        return (self.device, self.intra, self.inter, self.devices_per_node)


@dataclass(frozen=True)
class Cluster:
    """``nodes`` x ``devices_per_node`` devices: identical ones, or ``groups`` of types."""

    name: str
    nodes: int
    devices_per_node: int
    device: Device
    intra: Link
    inter: Link
    source: str = ""
    groups: tuple[Group, ...] = ()

    def __post_init__(self) -> None:
        _check_shape(f"cluster {self.name!r}", self)
        if not isinstance(self.source, str):
            raise OptionError(f"cluster {self.name!r}: source must be a string, got "
                              f"{type(self.source).__name__}")

    @property
    def devices(self) -> int:
        return self.nodes * self.devices_per_node

    # -- groups (heterogeneous clusters) ----------------------------------------
    @property
    def heterogeneous(self) -> bool:
        return len(self.groups) > 1

    def prefixes(self, devices: int | None = None) -> tuple[int, ...]:
        """Rank counts of the group prefixes shorter than ``devices`` (default all):
        ``(16,)`` for 16 A100 then 16 V100; ``()`` on a homogeneous cluster."""
        p = self.devices if devices is None else int(devices)
        out, total = [], 0
        for g in self.groups[:-1]:
            total += g.devices
            if total < p:
                out.append(total)
        return tuple(out)

    def group_of(self, rank):
        """The group index of a rank, or of each rank of an integer array."""
        bounds = [0]
        for g in self.groups:
            bounds.append(bounds[-1] + g.devices)
        return np.searchsorted(np.asarray(bounds[1:]), rank, side="right") if self.groups \
            else np.zeros_like(np.asarray(rank))

    def device_at(self, rank: int) -> Device:
        return self.groups[int(self.group_of(rank))].device if self.groups else self.device

    def speeds(self, devices: int | None = None) -> np.ndarray:
        """Peak TFLOP/s of ranks ``0 .. devices - 1``."""
        p = self.devices if devices is None else int(devices)
        if not self.groups:
            return np.full(p, float(self.device.peak_tflops))
        table = np.asarray([g.device.peak_tflops for g in self.groups], dtype=np.float64)
        return table[self.group_of(np.arange(p))]

    def view(self, devices: int) -> "Cluster":
        """The homogeneous cluster ranks ``0 .. devices - 1`` behave as (no groups): the
        groups they touch, with the slowest device (speed; memory: the least), intra
        link and NIC among them. A homogeneous cluster is its own view."""
        if not self.groups:
            return self
        touched = self.groups[:int(self.group_of(max(int(devices), 1) - 1)) + 1]
        name = self.name if len(touched) == len(self.groups) else "+".join(g.name for g in touched)
        return replace(_slowest(name, touched, self.source), groups=())

    def node_of(self, rank):
        """The node of a device rank, or of each rank of an integer array (:func:`node_of`)."""
        return node_of(rank, self.devices_per_node)

    def spans_nodes(self, devices):
        """Whether ranks ``0 .. devices - 1`` occupy more than one node (element-wise on arrays).

        An op split ``P`` ways runs on those ranks (see :mod:`pase.work`).
        """
        return self.node_of(devices - 1) > 0

    def link(self, kind: str) -> Link:
        """The ``"intra"``-node or ``"inter"``-node link."""
        if kind not in LINK_CLASSES:
            raise OptionError(f"unknown link class {kind!r}; allowed: {', '.join(LINK_CLASSES)}")
        return self.intra if kind == "intra" else self.inter

    def link_between(self, a: int, b: int) -> str:
        """The link class a message from rank ``a`` to rank ``b`` crosses: ``"intra"`` or ``"inter"``."""
        return "intra" if self.node_of(a) == self.node_of(b) else "inter"

    def with_nodes(self, nodes: int) -> "Cluster":
        if self.groups:
            raise OptionError(f"cluster {self.name!r} is made of groups; give the node count of "
                              f"each part (dgx-a100x2+dgx1-v100x2)")
        base = re.sub(r"x\d+$", "", self.name)
        return replace(self, name=base if nodes == 1 else f"{base}x{nodes}", nodes=nodes)

    # -- JSON ----------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        if not self.groups:
            d.pop("groups")
            return {"schema": SCHEMA, "version": SCHEMA_VERSION, **d}
        return {"schema": SCHEMA, "version": SCHEMA_VERSION, "name": self.name, "source": self.source,
                "groups": d["groups"]}

    def to_json(self, path: str | Path | None = None) -> str:
        text = json.dumps(self.to_dict(), indent=1)
        if path is not None:
            write_text_atomic(path, text + "\n", what="cluster file")
        return text

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Cluster":
        if not isinstance(data, Mapping) or data.get("schema") != SCHEMA:
            raise OptionError(f"not a pase cluster: expected \"schema\": \"{SCHEMA}\"")
        if data.get("version") != SCHEMA_VERSION:
            raise OptionError(f"cluster schema version {data.get('version')!r} is not supported; "
                              f"this pase reads version {SCHEMA_VERSION}")
        if "groups" in data:
            _only_fields(data, _GROUPS_FIELDS, "the cluster",
                         " (a cluster of \"groups\" takes its nodes, devices and links from them)")
            return _groups_from_dict(data)
        _only_fields(data, _CLUSTER_FIELDS, "the cluster")
        try:
            return cls(name=_name(data["name"], "the cluster"), nodes=data["nodes"],
                       devices_per_node=data["devices_per_node"],
                       device=_device(data["device"], "the cluster"),
                       intra=_link(data["intra"], "the cluster", "intra"),
                       inter=_link(data["inter"], "the cluster", "inter"),
                       source=str(data.get("source", "")))
        except (KeyError, TypeError) as exc:
            raise OptionError(f"malformed cluster JSON: {type(exc).__name__}: {exc}; fields: name, "
                              f"nodes, devices_per_node, device{{name, peak_tflops, memory_gib, "
                              f"precision}}, intra{{bandwidth_gbps, latency_us}}, inter{{...}}") from exc

    @classmethod
    def from_json(cls, path: str | Path) -> "Cluster":
        regular_file(path, "cluster file")  # a FIFO would block the read
        try:
            data = strict_loads(Path(path).read_bytes().decode("utf-8"))
        except OSError as exc:
            raise OptionError(f"cannot read cluster file {path}: {exc.strerror}") from exc
        except DuplicateKeyError as exc:
            raise OptionError(f"cluster file {path}: {exc}") from None
        except json.JSONDecodeError as exc:
            raise OptionError(f"cluster file {path} is not valid JSON: {exc}") from exc
        except (ValueError, RecursionError) as exc:  # not UTF-8, an integer of 5000 digits...
            raise OptionError(f"cluster file {path} is not valid UTF-8 JSON "
                              f"({type(exc).__name__})") from exc
        try:
            return cls.from_dict(data)
        except OptionError as exc:
            raise OptionError(f"cluster file {path}: {exc}") from None


def _check_shape(where: str, c: "Cluster | Group") -> None:
    """A cluster's or group's node counts and parts (the device's and links' figures were
    checked when they were made, in their own __post_init__)."""
    for label, value in (("nodes", c.nodes), ("devices_per_node", c.devices_per_node)):
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_DEVICES:
            raise OptionError(f"{where}: {label} must be an integer from 1 to {MAX_DEVICES}, "
                              f"got {value!r:.40}")
    if c.nodes * c.devices_per_node > MAX_DEVICES:
        raise OptionError(f"{where} has {c.nodes} x {c.devices_per_node} devices; at most "
                          f"{MAX_DEVICES} are supported")
    for label, value, kind in (("device", c.device, Device), ("intra", c.intra, Link),
                               ("inter", c.inter, Link)):
        if not isinstance(value, kind):
            raise OptionError(f"{where}: {label} must be a {kind.__name__}, got {type(value).__name__}")


# The fields of cluster JSON, as Cluster.to_dict writes them: anything else is a typo that
# would otherwise be ignored (a "memory_gb" leaving the device's memory unset).
_CLUSTER_FIELDS = ("schema", "version", "name", "nodes", "devices_per_node", "device", "intra",
                   "inter", "source")
_GROUPS_FIELDS = ("schema", "version", "name", "source", "groups")
_GROUP_FIELDS = ("name", "nodes", "devices_per_node", "device", "intra", "inter")
_DEVICE_FIELDS = tuple(Device.__dataclass_fields__)
_LINK_FIELDS = tuple(Link.__dataclass_fields__)


def _only_fields(data: Any, allowed: tuple[str, ...], where: str, why: str = "") -> None:
    if not isinstance(data, Mapping):
        raise OptionError(f"malformed cluster JSON: {where} must be an object with fields "
                          f"{', '.join(allowed)}; got {type(data).__name__}")
    for key in data:
        if key not in allowed:
            shown = json.dumps(key) if len(json.dumps(key)) <= 60 else json.dumps(key)[:57] + "..."
            raise OptionError(f"{where} has unknown field {shown}; allowed: "
                              f"{', '.join(allowed)}{why}")


def _name(value: Any, where: str) -> str:
    """A cluster, group or device name: printed in tables, so a string without control
    characters (a number is taken as its text, as before)."""
    name = str(value)
    problem = name_problem(name)
    if problem:
        raise OptionError(f"{where} has the name {name!r}, which {problem}")
    return name


def _device(data: Any, where: str) -> Device:
    _only_fields(data, _DEVICE_FIELDS, f"{where}'s \"device\"")
    if "name" in data:
        data = {**data, "name": _name(data["name"], f"{where}'s \"device\"")}
    check_numbers(data, DEVICE_RANGES, _prefix(where, "device"))
    if "precision" in data and not isinstance(data["precision"], str):
        raise OptionError(f"{_prefix(where, 'device')}precision must be a string such as "
                          f"\"fp16-tensor\", got {json.dumps(data['precision'])[:40]}")
    return Device(**data)


def _link(data: Any, where: str, kind: str) -> Link:
    _only_fields(data, _LINK_FIELDS, f"{where}'s \"{kind}\"")
    check_numbers(data, LINK_RANGES, _prefix(where, kind))
    return Link(**data)


def _prefix(where: str, field: str) -> str:
    """How a figure of cluster JSON is named: ``device.hbm_gbps``, ``group 1: intra.latency_us``."""
    return f"{field}." if where == "the cluster" else f"{where}: {field}."


# -- heterogeneous clusters -----------------------------------------------------

def _slowest_link(links: Sequence[Link]) -> Link:
    return Link(min(x.bandwidth_gbps for x in links), max(x.latency_us for x in links))


def _slowest(name: str, groups: Sequence[Group], source: str = "") -> Cluster:
    """A homogeneous cluster over ``groups``: the slowest device (its memory the least),
    the slowest intra link and NIC; ``groups`` kept when they are of several types."""
    if len(groups) == 1:
        g = groups[0]
        return Cluster(name, g.nodes, g.devices_per_node, g.device, g.intra, g.inter, source)
    slow = min(groups, key=lambda g: g.device.peak_tflops).device
    device = Device(" + ".join(g.device.name for g in groups), slow.peak_tflops,
                    min(g.device.memory_gib for g in groups), slow.precision)
    return Cluster(name, sum(g.nodes for g in groups), groups[0].devices_per_node, device,
                   _slowest_link([g.intra for g in groups]), _slowest_link([g.inter for g in groups]),
                   source, tuple(groups))


def compose(parts: Sequence["Cluster | Group"], name: str | None = None, source: str = "") -> Cluster:
    """A cluster of the nodes of ``parts`` (clusters or groups), fastest device type first
    (stable), groups of one type merged; one type gives the plain homogeneous cluster."""
    groups: list[Group] = []
    for part in parts:
        if isinstance(part, Cluster):
            groups += list(part.groups) or [Group(part.name, part.nodes, part.devices_per_node,
                                                  part.device, part.intra, part.inter)]
        else:  # checked as a cluster of its own
            Cluster(part.name, part.nodes, part.devices_per_node, part.device, part.intra, part.inter)
            groups.append(part)
    if not groups:
        raise OptionError("a cluster needs at least one group of nodes")
    per_node = {g.devices_per_node for g in groups}
    if len(per_node) > 1:
        raise OptionError(f"cluster groups must have the same devices per node, got "
                          f"{', '.join(f'{g.name}: {g.devices_per_node}' for g in groups)}")
    merged: dict[tuple, Group] = {}
    for g in sorted(groups, key=lambda g: -g.device.peak_tflops):
        if g.kind() in merged:
            first = merged[g.kind()]
            g = replace(first, nodes=first.nodes + g.nodes)
        merged[g.kind()] = g
    out = list(merged.values())
    for g in out:  # group names say their node counts
        g_name = re.sub(r"x\d+$", "", g.name)
        out[out.index(g)] = replace(g, name=g_name if g.nodes == 1 else f"{g_name}x{g.nodes}")
    name = name if name is not None else "+".join(g.name for g in out)
    total = sum(g.devices for g in out)
    if total > MAX_DEVICES:
        raise OptionError(f"cluster {name!r} has {total} devices; at most {MAX_DEVICES} are supported")
    return _slowest(name, out, source)


def _groups_from_dict(data: Mapping[str, Any]) -> Cluster:
    groups = data["groups"]
    if not isinstance(groups, (list, tuple)) or not groups:
        raise OptionError("malformed cluster JSON: \"groups\" must be a non-empty list")
    parts = []
    for i, g in enumerate(groups):
        where = f"group {i}"
        _only_fields(g, _GROUP_FIELDS, where)
        try:
            one = Cluster(name=_name(g["name"], where), nodes=g["nodes"],
                          devices_per_node=g["devices_per_node"], device=_device(g["device"], where),
                          intra=_link(g["intra"], where, "intra"),
                          inter=_link(g["inter"], where, "inter"))
        except (KeyError, TypeError) as exc:
            raise OptionError(f"malformed cluster JSON: group {i}: {type(exc).__name__}: {exc}; fields: "
                              f"name, nodes, devices_per_node, device{{name, peak_tflops, memory_gib, "
                              f"precision}}, intra{{bandwidth_gbps, latency_us}}, inter{{...}}") from exc
        parts.append(one)
    name = _name(data.get("name", ""), "the cluster") or None
    return compose(parts, name, str(data.get("source", "")))


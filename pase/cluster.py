"""Clusters: nodes of identical devices, fast links inside a node, slower between.

A :class:`Cluster` is ``nodes x devices_per_node`` devices, each with a peak
speed and memory, joined by an intra-node :class:`Link` and an inter-node one.
Device ranks are numbered node by node (rank ``r`` lives on node
``r // devices_per_node``). Presets describe real machines; ``NAMExK`` is ``K``
nodes of preset ``NAME`` (``dgx-a100x2``), and a preset without ``xK`` grows to
as many nodes as ``devices`` needs.

Bandwidths are GB/s in one direction per device (10^9 bytes), latencies
microseconds, memory GiB, speeds TFLOP/s.
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Mapping

from pase.errors import OptionError, UnknownNameError

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


@dataclass(frozen=True)
class Link:
    """A link class: bandwidth per device and direction (GB/s), latency (us)."""

    bandwidth_gbps: float
    latency_us: float

    @property
    def bytes_per_second(self) -> float:
        return self.bandwidth_gbps * 1e9

    @property
    def latency_s(self) -> float:
        return self.latency_us * 1e-6


@dataclass(frozen=True)
class Device:
    """One accelerator: peak TFLOP/s (at ``precision``) and memory in GiB."""

    name: str
    peak_tflops: float
    memory_gib: float
    precision: str = "fp32"

    @property
    def memory_bytes(self) -> float:
        return self.memory_gib * 2**30


@dataclass(frozen=True)
class Cluster:
    """``nodes`` x ``devices_per_node`` identical devices."""

    name: str
    nodes: int
    devices_per_node: int
    device: Device
    intra: Link
    inter: Link
    source: str = ""

    def __post_init__(self) -> None:
        for label, value in (("nodes", self.nodes), ("devices_per_node", self.devices_per_node)):
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_DEVICES:
                raise OptionError(f"cluster {self.name!r}: {label} must be an integer from 1 to "
                                  f"{MAX_DEVICES}, got {value!r}")
        if self.nodes * self.devices_per_node > MAX_DEVICES:
            raise OptionError(f"cluster {self.name!r} has {self.nodes} x {self.devices_per_node} "
                              f"devices; at most {MAX_DEVICES} are supported")
        checks = (("device.peak_tflops", self.device.peak_tflops),
                  ("device.memory_gib", self.device.memory_gib),
                  ("intra.bandwidth_gbps", self.intra.bandwidth_gbps),
                  ("inter.bandwidth_gbps", self.inter.bandwidth_gbps))
        for label, value in checks:
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0 \
                    or math.isinf(value):
                raise OptionError(f"cluster {self.name!r}: {label} must be a positive number, "
                                  f"got {value!r}")
        for label, value in (("intra.latency_us", self.intra.latency_us),
                             ("inter.latency_us", self.inter.latency_us)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0 \
                    or math.isinf(value):
                raise OptionError(f"cluster {self.name!r}: {label} must be a number >= 0, got {value!r}")

    @property
    def devices(self) -> int:
        return self.nodes * self.devices_per_node

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
        base = re.sub(r"x\d+$", "", self.name)
        return replace(self, name=base if nodes == 1 else f"{base}x{nodes}", nodes=nodes)

    # -- JSON ----------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        return {"schema": SCHEMA, "version": SCHEMA_VERSION, **d}

    def to_json(self, path: str | Path | None = None) -> str:
        text = json.dumps(self.to_dict(), indent=1)
        if path is not None:
            Path(path).write_text(text + "\n")
        return text

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Cluster":
        if not isinstance(data, Mapping) or data.get("schema") != SCHEMA:
            raise OptionError(f"not a pase cluster: expected \"schema\": \"{SCHEMA}\"")
        if data.get("version") != SCHEMA_VERSION:
            raise OptionError(f"cluster schema version {data.get('version')!r} is not supported; "
                              f"this pase reads version {SCHEMA_VERSION}")
        try:
            return cls(name=str(data["name"]), nodes=data["nodes"],
                       devices_per_node=data["devices_per_node"], device=Device(**data["device"]),
                       intra=Link(**data["intra"]), inter=Link(**data["inter"]),
                       source=str(data.get("source", "")))
        except (KeyError, TypeError) as exc:
            raise OptionError(f"malformed cluster JSON: {type(exc).__name__}: {exc}; fields: name, "
                              f"nodes, devices_per_node, device{{name, peak_tflops, memory_gib, "
                              f"precision}}, intra{{bandwidth_gbps, latency_us}}, inter{{...}}") from exc

    @classmethod
    def from_json(cls, path: str | Path) -> "Cluster":
        try:
            data = json.loads(Path(path).read_text())
        except OSError as exc:
            raise OptionError(f"cannot read cluster file {path}: {exc.strerror}") from exc
        except json.JSONDecodeError as exc:
            raise OptionError(f"cluster file {path} is not valid JSON: {exc}") from exc
        except (UnicodeDecodeError, RecursionError) as exc:
            raise OptionError(f"cluster file {path} is not valid UTF-8 JSON "
                              f"({type(exc).__name__})") from exc
        return cls.from_dict(data)


# Inter-node fabrics: bandwidth per GPU and direction. EDR InfiniBand is
# 100 Gb/s = 12.5 GB/s per port; HDR 200 Gb/s = 25 GB/s; NDR 400 Gb/s = 50 GB/s.
_EDR_ONE_PORT = Link(12.5, 5.0)

PRESETS: dict[str, Cluster] = {
    "gtx1080ti": Cluster(
        "gtx1080ti", 1, 8, Device("GTX 1080 Ti", 11.3, 11.0, "fp32"),
        intra=Link(12.0, 10.0), inter=_EDR_ONE_PORT,
        source="PaSE paper system 1: 8 GTX 1080 Ti per node on PCIe 3.0 x16 with peer-to-peer "
               "(15.75 GB/s raw, ~12 GB/s measured copies); 11.3 TFLOP/s fp32 and 11 GB per "
               "NVIDIA's spec sheet; nodes joined by one EDR InfiniBand port (12.5 GB/s)."),
    "rtx2080ti": Cluster(
        "rtx2080ti", 1, 8, Device("RTX 2080 Ti", 13.4, 11.0, "fp32"),
        intra=Link(6.0, 20.0), inter=_EDR_ONE_PORT,
        source="PaSE paper system 2: 8 RTX 2080 Ti per node on PCIe 3.0 without peer-to-peer, so "
               "device-to-device copies are staged through host memory (two PCIe crossings, "
               "~6 GB/s); 13.4 TFLOP/s fp32 and 11 GB per NVIDIA's spec sheet; nodes joined by "
               "EDR InfiniBand (12.5 GB/s)."),
    "dgx1-v100": Cluster(
        "dgx1-v100", 1, 8, Device("V100 SXM2 32GB", 125.0, 32.0, "fp16-tensor"),
        intra=Link(150.0, 3.0), inter=Link(6.25, 5.0),
        source="NVIDIA DGX-1 with V100: 6 NVLink 2.0 links of 25 GB/s per direction per GPU "
               "(hybrid cube-mesh, modelled as 150 GB/s); 125 TFLOP/s fp16 tensor, 32 GB HBM2; "
               "4 EDR InfiniBand ports per node (50 GB/s per node = 6.25 GB/s per GPU)."),
    "dgx-a100": Cluster(
        "dgx-a100", 1, 8, Device("A100 SXM4 40GB", 312.0, 40.0, "fp16-tensor"),
        intra=Link(300.0, 3.0), inter=Link(25.0, 5.0),
        source="NVIDIA DGX A100: NVLink 3 through NVSwitch, 600 GB/s bidirectional per GPU "
               "(300 GB/s per direction); 312 TFLOP/s fp16 tensor (dense), 40 GB HBM2; "
               "8 HDR InfiniBand ports (200 Gb/s = 25 GB/s per GPU)."),
    "h100-sxm": Cluster(
        "h100-sxm", 1, 8, Device("H100 SXM5 80GB", 989.0, 80.0, "fp16-tensor"),
        intra=Link(450.0, 2.0), inter=Link(50.0, 5.0),
        source="NVIDIA DGX H100 / HGX H100 node: NVLink 4 through NVSwitch, 900 GB/s "
               "bidirectional per GPU (450 GB/s per direction); 989 TFLOP/s fp16 tensor (dense), "
               "80 GB HBM3; 8 NDR InfiniBand ports (400 Gb/s = 50 GB/s per GPU)."),
}


def preset_names() -> list[str]:
    return sorted(PRESETS)


def get_cluster(spec: "str | Path | Cluster", devices: int | None = None) -> Cluster:
    """A cluster from a preset name (``dgx-a100``, ``dgx-a100x2``), a JSON path, or a Cluster.

    A preset without ``xK`` gets as many nodes as ``devices`` needs; a cluster
    with fewer devices than ``devices`` is an error.
    """
    if isinstance(spec, Cluster):
        cluster = spec
    else:
        text = str(spec)
        match = re.fullmatch(r"(.+?)x(\d+)", text)
        if text in PRESETS:
            cluster = PRESETS[text]
            if devices is not None and devices > cluster.devices:
                cluster = cluster.with_nodes(math.ceil(devices / cluster.devices_per_node))
        elif match and match.group(1) in PRESETS:
            nodes = int(match.group(2))
            if nodes < 1:
                raise OptionError(f"cluster {text!r}: the node count must be >= 1")
            cluster = PRESETS[match.group(1)].with_nodes(nodes)
        elif text.endswith(".json") or Path(text).is_file():
            cluster = Cluster.from_json(text)
        else:
            raise UnknownNameError(f"unknown cluster {text!r}; presets: {', '.join(preset_names())} "
                                   f"(add xN for N nodes, e.g. dgx-a100x2), or a cluster JSON file")
    if devices is not None and devices > cluster.devices:
        raise OptionError(f"cluster {cluster.name!r} has {cluster.devices} devices "
                          f"({cluster.nodes} x {cluster.devices_per_node}); {devices} requested")
    return cluster

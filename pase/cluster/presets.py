"""Named clusters (presets of real machines) and the cluster specs pase reads.

:func:`get_cluster` turns a spec into a :class:`~pase.cluster.Cluster`: a preset
name (``dgx-a100``; ``NAMExK`` for ``K`` nodes), a cluster JSON file, a
composition of those joined by ``+`` (``dgx-a100x2+dgx1-v100x2``, a heterogeneous
cluster: :func:`pase.cluster.compose`), or a Cluster.
"""
from __future__ import annotations

import math
import re
from pathlib import Path

from pase.cluster.model import Cluster, Device, Link, compose
from pase.errors import OptionError, UnknownNameError

# Inter-node fabrics: bandwidth per GPU and direction. EDR InfiniBand is
# 100 Gb/s = 12.5 GB/s per port; HDR 200 Gb/s = 25 GB/s; NDR 400 Gb/s = 50 GB/s.
_EDR_ONE_PORT = Link(12.5, 5.0)

PRESETS: dict[str, Cluster] = {
    "gtx1080ti": Cluster(
        "gtx1080ti", 1, 8, Device("GTX 1080 Ti", 11.3, 11.0, "fp32", fp32_tflops=11.3, hbm_gbps=484.0),
        intra=Link(12.0, 10.0), inter=_EDR_ONE_PORT,
        source="PaSE paper system 1: 8 GTX 1080 Ti per node on PCIe 3.0 x16 with peer-to-peer "
               "(15.75 GB/s raw, ~12 GB/s measured copies); 11.3 TFLOP/s fp32 and 11 GB per "
               "NVIDIA's spec sheet; nodes joined by one EDR InfiniBand port (12.5 GB/s)."),
    "rtx2080ti": Cluster(
        "rtx2080ti", 1, 8, Device("RTX 2080 Ti", 13.4, 11.0, "fp32", fp32_tflops=13.4, hbm_gbps=616.0),
        intra=Link(6.0, 20.0), inter=_EDR_ONE_PORT,
        source="PaSE paper system 2: 8 RTX 2080 Ti per node on PCIe 3.0 without peer-to-peer, so "
               "device-to-device copies are staged through host memory (two PCIe crossings, "
               "~6 GB/s); 13.4 TFLOP/s fp32 and 11 GB per NVIDIA's spec sheet; nodes joined by "
               "EDR InfiniBand (12.5 GB/s)."),
    "dgx1-v100": Cluster(
        "dgx1-v100", 1, 8, Device("V100 SXM2 32GB", 125.0, 32.0, "fp16-tensor", fp32_tflops=15.7,
                                 hbm_gbps=900.0),
        intra=Link(150.0, 3.0), inter=Link(6.25, 5.0),
        source="NVIDIA DGX-1 with V100: 6 NVLink 2.0 links of 25 GB/s per direction per GPU "
               "(hybrid cube-mesh, modelled as 150 GB/s); 125 TFLOP/s fp16 tensor, 32 GB HBM2; "
               "4 EDR InfiniBand ports per node (50 GB/s per node = 6.25 GB/s per GPU)."),
    "dgx-a100": Cluster(
        "dgx-a100", 1, 8, Device("A100 SXM4 40GB", 312.0, 40.0, "fp16-tensor", bf16_tflops=312.0,
                                fp32_tflops=19.5, hbm_gbps=1555.0),
        intra=Link(300.0, 3.0), inter=Link(25.0, 5.0),
        source="NVIDIA DGX A100: NVLink 3 through NVSwitch, 600 GB/s bidirectional per GPU "
               "(300 GB/s per direction); 312 TFLOP/s bf16/fp16 tensor (dense), 19.5 fp32, 40 GB "
               "HBM2 at 1,555 GB/s (NVIDIA A100 data sheet); "
               "8 HDR InfiniBand ports (200 Gb/s = 25 GB/s per GPU)."),
    "h100-sxm": Cluster(
        "h100-sxm", 1, 8, Device("H100 SXM5 80GB", 989.0, 80.0, "fp16-tensor", bf16_tflops=989.0,
                                fp8_tflops=1979.0, fp32_tflops=66.9, hbm_gbps=3350.0),
        intra=Link(450.0, 2.0), inter=Link(50.0, 5.0),
        source="NVIDIA DGX H100 / HGX H100 node: NVLink 4 through NVSwitch, 900 GB/s "
               "bidirectional per GPU (450 GB/s per direction); 989 TFLOP/s bf16/fp16 tensor and "
               "1,979 fp8 (dense), 66.9 fp32, 80 GB HBM3 at 3,350 GB/s (NVIDIA H100 data sheet); "
               "8 NDR InfiniBand ports (400 Gb/s = 50 GB/s per GPU)."),
    "dgx-a100-80gb": Cluster(
        "dgx-a100-80gb", 1, 8, Device("A100 SXM4 80GB", 312.0, 80.0, "fp16-tensor",
                                      bf16_tflops=312.0, fp32_tflops=19.5, hbm_gbps=2039.0),
        intra=Link(300.0, 3.0), inter=Link(25.0, 5.0),
        source="NVIDIA DGX A100 640GB: as dgx-a100, with 80 GB HBM2e at 2,039 GB/s per GPU "
               "(NVIDIA A100 data sheet); 8 HDR InfiniBand ports (200 Gb/s = 25 GB/s per GPU), "
               "as on Selene and on 1,600 Gb/s-per-node RoCE clusters."),
}


PRESETS["mixed-a100-v100"] = compose(
    [PRESETS["dgx-a100"].with_nodes(2), PRESETS["dgx1-v100"].with_nodes(2)], "mixed-a100-v100",
    source="Two DGX A100 and two DGX-1 V100 nodes on one fabric (the presets' figures): ranks 0-15 "
           "are A100s, 16-31 V100s; a link between the two kinds runs at the slower end's speed.")


def preset_names() -> list[str]:
    return sorted(PRESETS)


def get_cluster(spec: "str | Path | Cluster", devices: int | None = None) -> Cluster:
    """A cluster from a preset name (``dgx-a100``, ``dgx-a100x2``), a JSON path, or a Cluster.

    A preset without ``xK`` gets as many nodes as ``devices`` needs; a cluster
    with fewer devices than ``devices`` is an error.
    """
    if isinstance(spec, Cluster):
        cluster = spec
    elif "+" in str(spec) and not Path(str(spec)).is_file():
        cluster = _composition(str(spec))
    elif str(spec) in PRESETS:
        cluster = PRESETS[str(spec)]
        if devices is not None and devices > cluster.devices and not cluster.groups:
            cluster = cluster.with_nodes(math.ceil(devices / cluster.devices_per_node))
    else:
        cluster = _part(str(spec))
    if devices is not None and devices > cluster.devices:
        raise OptionError(f"cluster {cluster.name!r} has {cluster.devices} devices "
                          f"({cluster.nodes} x {cluster.devices_per_node}); {devices} requested")
    return cluster


def _part(text: str) -> Cluster:
    """One part of a composition: ``NAME``, ``NAMExK`` or a cluster JSON path (1 node by default)."""
    match = re.fullmatch(r"(.+?)x(\d+)", text)
    if text in PRESETS:
        return PRESETS[text]
    if match and match.group(1) in PRESETS:
        nodes = int(match.group(2))
        if nodes < 1:
            raise OptionError(f"cluster {text!r}: the node count must be >= 1")
        return PRESETS[match.group(1)].with_nodes(nodes)
    if text.endswith(".json") or Path(text).is_file():
        return Cluster.from_json(text)
    raise UnknownNameError(f"unknown cluster {text!r}; presets: {', '.join(preset_names())} "
                           f"(add xN for N nodes, e.g. dgx-a100x2), or a cluster JSON file")


def _composition(text: str) -> Cluster:
    """``dgx-a100x2+dgx1-v100x2``: the nodes of each part, as one heterogeneous cluster."""
    parts = [t.strip() for t in text.split("+")]
    if any(not t for t in parts):
        raise OptionError(f"malformed cluster composition {text!r}: parts are joined by single '+' "
                          f"signs, each a preset with an optional xN node count or a cluster JSON "
                          f"file (dgx-a100x2+dgx1-v100x2)")
    return compose([_part(t) for t in parts], text)

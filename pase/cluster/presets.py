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
# 100 Gb/s = 12.5 GB/s per port; HDR 200 Gb/s = 25 GB/s; NDR 400 Gb/s = 50 GB/s
# (ConnectX-7); XDR 800 Gb/s = 100 GB/s (ConnectX-8).
_EDR_ONE_PORT = Link(12.5, 5.0)
_CX7_400G = Link(50.0, 5.0)
_CX8_800G = Link(100.0, 5.0)
# NVLink 5 through NVSwitch: 1.8 TB/s bidirectional per Blackwell GPU, 900 GB/s per direction.
_NVLINK5 = Link(900.0, 2.0)

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
    # Today's machines. NVIDIA's sheets headline tensor-core speeds "with sparsity"; the
    # dense figure (what training runs at) is half of it, except Blackwell Ultra's fp4,
    # whose sheets give the dense figure beside the sparse one. mxfp8 is the sheets'
    # "FP8/FP6" figure: Blackwell's tensor cores run MX-scaled fp8 at the fp8 rate.
    "dgx-h200": Cluster(
        "dgx-h200", 1, 8, Device("H200 SXM 141GB", 989.0, 141.0, "fp16-tensor", bf16_tflops=989.0,
                                fp8_tflops=1979.0, fp32_tflops=67.0, hbm_gbps=4800.0),
        intra=Link(450.0, 2.0), inter=_CX7_400G,
        source="NVIDIA DGX H200 / HGX H200 (NVIDIA H200 data sheet): 8 H200 SXM, 141 GB HBM3e at "
               "4.8 TB/s each; 1,979 TFLOP/s bf16/fp16 and 3,958 fp8 tensor with sparsity "
               "(989 and 1,979 dense, as h100-sxm: the same Hopper silicon, so no MX or fp4 "
               "formats), 67 fp32; NVLink 4 through NVSwitch, 900 GB/s bidirectional per GPU "
               "(450 GB/s per direction); 8 ConnectX-7 ports at 400 Gb/s (50 GB/s per GPU)."),
    "dgx-b200": Cluster(
        "dgx-b200", 1, 8, Device("B200 180GB", 2250.0, 180.0, "fp16-tensor", bf16_tflops=2250.0,
                                fp8_tflops=4500.0, fp32_tflops=75.0, hbm_gbps=8000.0,
                                mxfp8_tflops=4500.0, nvfp4_tflops=9000.0),
        intra=_NVLINK5, inter=_CX7_400G,
        source="NVIDIA DGX B200 data sheet: 8 Blackwell GPUs, 1,440 GB HBM3e (180 GB each) at "
               "64 TB/s (8 TB/s each); 72 PFLOP/s fp8 and 144 fp4 with sparsity, i.e. 4.5 PF "
               "fp8/mxfp8 and 9 PF nvfp4 dense per GPU; HGX B200 sheet: 36 PFLOP/s bf16/fp16 with "
               "sparsity (2.25 PF dense per GPU), 600 TFLOP/s fp32 (75 per GPU); NVLink 5 through "
               "two NVSwitch chips, 14.4 TB/s in all = 1.8 TB/s bidirectional per GPU (900 GB/s "
               "per direction); 8 single-port ConnectX-7 at 400 Gb/s (50 GB/s per GPU)."),
    "dgx-b300": Cluster(
        "dgx-b300", 1, 8, Device("B300 288GB", 2250.0, 288.0, "fp16-tensor", bf16_tflops=2250.0,
                                fp8_tflops=4500.0, fp32_tflops=75.0, hbm_gbps=8000.0,
                                mxfp8_tflops=4500.0, nvfp4_tflops=13500.0),
        intra=_NVLINK5, inter=_CX8_800G,
        source="NVIDIA DGX B300 data sheet: 8 Blackwell Ultra GPUs, 2.3 TB HBM3e (288 GB each, "
               "8 TB/s); HGX B300 sheet: fp4 144 PFLOP/s with sparsity and 108 dense (13.5 PF "
               "nvfp4 dense per GPU, 1.5x B200's), fp8/fp6 72 and bf16/fp16 36 PFLOP/s with "
               "sparsity (4.5 PF fp8/mxfp8 and 2.25 PF bf16 dense per GPU), 600 TFLOP/s fp32 "
               "(75 per GPU); NVLink 5, 1.8 TB/s bidirectional per GPU (900 GB/s per direction); "
               "8 ConnectX-8 SuperNICs at 800 Gb/s (100 GB/s per GPU)."),
    "gb200-nvl72": Cluster(
        "gb200-nvl72", 1, 72, Device("GB200 GPU 186GB", 2500.0, 186.0, "fp16-tensor",
                                     bf16_tflops=2500.0, fp8_tflops=5000.0, fp32_tflops=80.0,
                                     hbm_gbps=8000.0, mxfp8_tflops=5000.0, nvfp4_tflops=10000.0),
        intra=_NVLINK5, inter=_CX7_400G,
        source="NVIDIA GB200 NVL72 data sheet: one rack of 36 Grace CPUs and 72 Blackwell GPUs "
               "in one NVLink domain (a node here); per rack with sparsity 1,440 PFLOP/s fp4, 720 "
               "fp8/fp6 and 360 bf16/fp16, i.e. 10 PF nvfp4, 5 PF fp8/mxfp8 and 2.5 PF bf16 dense "
               "per GPU; 5,760 TFLOP/s fp32 (80 per GPU); up to 13.4 TB HBM3e at 576 TB/s (186 GB "
               "and 8 TB/s per GPU); NVLink 5 switches, 130 TB/s = 1.8 TB/s bidirectional per GPU "
               "(900 GB/s per direction); between racks one 400 Gb/s ConnectX-7 per GPU "
               "(50 GB/s)."),
    "gb300-nvl72": Cluster(
        "gb300-nvl72", 1, 72, Device("GB300 GPU 288GB", 2500.0, 288.0, "fp16-tensor",
                                     bf16_tflops=2500.0, fp8_tflops=5000.0, hbm_gbps=8000.0,
                                     mxfp8_tflops=5000.0, nvfp4_tflops=15000.0),
        intra=_NVLINK5, inter=_CX8_800G,
        source="NVIDIA GB300 NVL72 data sheet: one rack of 36 Grace CPUs and 72 Blackwell Ultra "
               "GPUs in one NVLink domain (a node here); per rack fp4 1,440 PFLOP/s with sparsity "
               "and 1,080 dense (15 PF nvfp4 dense per GPU), fp8/fp6 720 and bf16/fp16 360 "
               "PFLOP/s with sparsity (5 PF fp8/mxfp8 and 2.5 PF bf16 dense per GPU); fp32 left "
               "unknown; up to 20.7 TB HBM3e at 576 TB/s (288 GB and 8 TB/s per GPU); NVLink 5, "
               "130 TB/s = 900 GB/s per direction per GPU; between racks one ConnectX-8 SuperNIC "
               "at 800 Gb/s per GPU (100 GB/s)."),
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

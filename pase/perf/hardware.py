"""What a device type achieves in practice, as fractions of its data sheet.

The data sheet (:class:`pase.cluster.Device`, :class:`pase.cluster.Link`) gives
peaks; real kernels and collectives reach less. :class:`Achieved` holds the
few physical constants the performance model (:mod:`pase.perf`) needs per device
type: how close large GEMMs come to the dense peak and how fast small ones fall
off, what a fused attention kernel reaches, the HBM fraction memory-bound
kernels reach, the fixed cost of one kernel, and the bus-bandwidth fraction
NCCL reaches on NVLink and on the network.

Each figure says where it comes from: a public measurement, or the calibration
row of ``benchmarks/data/calibration.json`` it was fitted on
(``benchmarks/published.py`` prints the fit). No constant is per row or per
model: they describe the hardware.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from pase.cluster import Cluster, Device


@dataclass(frozen=True)
class Achieved:
    """Achieved fractions of a device type's data-sheet peaks.

    A GEMM of per-device sizes ``M x N x K`` (``batch`` of them) runs at
    ``gemm * waves * K / (K + gemm_half)`` of the dense peak. ``waves`` is the wave
    quantisation of NVIDIA's GEMM guide: the output is cut into 128 x 128 tiles,
    one per streaming multiprocessor at a time, and the last wave runs part-empty;
    ``K / (K + gemm_half)`` is the fixed cost of each tile (prologue, epilogue)
    against its main loop over ``K``, which makes a short ``K`` slow.
    """

    gemm: float
    gemm_half: float
    sms: int
    attention: float
    hbm: float
    launch_s: float
    nvlink: float
    network: float
    overlap: float
    source: str
    # efficiency of the linear GEMMs at a low precision, as a fraction of its own peak:
    # ((precision, fraction), ...); a precision not listed gets 0.85 of ``gemm``
    low_gemm: tuple = ()
    # MoE experts' grouped GEMMs against dense ones of the same shapes (one kernel walks
    # many small problems; routing leaves their sizes uneven)
    grouped: float = 1.0
    # seconds per routed token copy a MoE layer spends beside its GEMMs and bytes (sorting,
    # permutation and their index kernels, the host sync on the tokens per expert), forward;
    # twice that backward
    moe_copy_s: float = 0.0

    def low_precision_gemm(self, precision: str) -> float:
        return dict(self.low_gemm).get(precision, 0.85 * self.gemm)

    def overlapped(self, comm: float, compute: float) -> float:
        """Seconds a collective of ``comm`` seconds adds when it runs beside ``compute``
        seconds of kernels: the part that does not fit under them, plus ``overlap`` of
        the part that does (NCCL's kernels take streaming multiprocessors and HBM
        bandwidth from the compute they hide behind)."""
        return np.maximum(0.0, comm - compute) + self.overlap * np.minimum(comm, compute)

    def gemm_efficiency(self, m: float, n: float, k: float, batch: float = 1.0) -> float:
        tiles = batch * np.ceil(m / 128) * np.ceil(n / 128)  # scalars or arrays of configs
        waves = tiles / (np.ceil(tiles / self.sms) * self.sms)
        return self.gemm * waves * k / (k + self.gemm_half)


# Fitted with benchmarks/calibrate.py on benchmarks/data/calibration.json (see each source).
A100 = Achieved(
    gemm=0.80, gemm_half=93.0, sms=108, attention=0.192, hbm=0.80, launch_s=6e-6, nvlink=0.78,
    network=0.85, overlap=0.15,
    source="gemm 0.80: cuBLAS bf16 on large GEMMs reaches about 250 of the 312 TFLOP/s peak "
           "(NVIDIA Deep Learning Performance guide, Matrix Multiplication Background), kept by "
           "the fit; gemm_half 93 and attention 0.192 fitted on the 8 A100 rows (Megatron-LM "
           "22B/175B, MosaicML 125M-70B; the 125M row, attention 30% of its FLOP, fixes "
           "attention); overlap 0.15: NCCL kernels beside GEMMs take SMs and HBM bandwidth, "
           "10-20% in published overlap studies (not fitted); 108 SMs (A100 data sheet); NVLink bus bandwidth about 230 of 300 GB/s "
           "and the network about 85% of 25 GB/s per GPU (nccl-tests all_reduce_perf on DGX "
           "A100: about 185 GB/s per node across nodes); HBM about 80% of the data sheet "
           "(stream copies); about 6 us per kernel (launch and tail).")
H100 = Achieved(
    gemm=0.571, gemm_half=128.0, sms=132, attention=0.175, hbm=0.80, launch_s=6e-6, nvlink=0.80,
    network=0.85, overlap=0.15,
    low_gemm=(("fp8", 0.896),),
    source="low_gemm fp8 0.896 fitted on the 11 H100 rows of benchmarks/data/runs-2024-2026.json "
           "with the 3 older ones (NeMo's Llama 3 70B and GPT-3 fp8 runs, torchtitan's Llama 3.1, "
           "NeMo AutoModel's MoE; the older constants kept), ranks in Megatron-Core's order "
           "(tp-cp-ep-dp-pp); near the 0.9 bound: the four Llama 3 70B rows at tp4 pp8 stay "
           "18-21% slow, which is not the GEMMs' speed; "
           "gemm 0.571 fitted on the MosaicML 7B row on 8 H100 (about 565 TFLOP/s on large "
           "GEMMs in that PyTorch stack); attention 0.175 on the 1.3B row at sequence 32,768 "
           "(attention is 73% of its FLOP); network 0.85 of 50 GB/s per GPU as on A100 "
           "(nccl-tests), not fitted: fitted on the 13B row on 64 H100, the only multi-node "
           "H100 row (its fabric is not published), it came out at 0.26, which would make every "
           "DGX H100 run's exposed traffic 3x too slow; that row is -13% instead; overlap as A100; gemm_half 128 (not fitted: larger tiles than "
           "A100); 132 SMs (H100 SXM data sheet); NVLink 4 bus bandwidth about 360 of 450 GB/s "
           "(nccl-tests on HGX H100).")
GENERIC = Achieved(
    gemm=0.70, gemm_half=64.0, sms=100, attention=0.35, hbm=0.75, launch_s=8e-6, nvlink=0.75,
    network=0.80, overlap=0.15,
    source="No calibration: middle-of-the-road fractions for a device pase has no rows for.")

# Blackwell. Not fitted: gemm_half 128 (Hopper's tiles), 148 SMs (B200, GB200) and 160
# (B300, GB300) from the data sheets, HBM, NVLink and network fractions and the overlap tax
# as on H100. Fitted with `python benchmarks/calibrate_runs.py DEVICE --fit ...` on the
# device's rows of benchmarks/data/runs-2024-2026.json (NeMo / Megatron-Bridge 25.09-26.08,
# their MXFP8, FP8 and NVFP4 recipes): gemm (bf16), attention, low_gemm per precision and
# grouped, bounded by what kernels are measured to reach (GEMMs 0.9, attention 0.75).
# ``grouped`` is low: it carries the routing machinery pase does not price op by op
# (permutation kernels, the host sync on the tokens per expert, uneven loads). When the
# layout path took Megatron-Core's rank order (tp-cp-ep-dp-pp), GB300's and B200's rows
# moved and were refitted; GB200's and B300's did not move, and their constants stand.
_BLACKWELL = dict(gemm_half=128.0, hbm=0.80, launch_s=6e-6, nvlink=0.80, network=0.85,
                  overlap=0.15)
GB200 = Achieved(
    gemm=0.748, attention=0.744, sms=148, low_gemm=(("fp8", 0.774), ("mxfp8", 0.387)),
    grouped=0.318, **_BLACKWELL,
    source="fitted on the 26 GB200 rows (Llama 3 8B/70B/405B, Mixtral, Qwen3, gpt-oss, "
           "Llama 4 Scout, Nemotron 3 Super): median |error| 12.6%")
GB300 = Achieved(
    gemm=0.564, attention=0.744, sms=160,
    low_gemm=(("fp8", 0.658), ("mxfp8", 0.631), ("nvfp4", 0.471)), grouped=0.997,
    moe_copy_s=1.872e-8, **_BLACKWELL,
    source="fitted on the 23 GB300 rows (Llama 3 8B/70B, Llama 3.1 405B, Qwen3 235B, "
           "gpt-oss, DeepSeek-V3, Nemotron 3 Super): gemm, attention and low_gemm with "
           "grouped, then grouped and moe_copy_s; fp8, mxfp8 and moe_copy_s refitted with "
           "ranks in Megatron-Core's order (tp-cp-ep-dp-pp; gemm, kept, would have fallen to "
           "0.34 on the one bf16 row, gpt-oss-120b's MoE): median |error| 4.0%")
# DGX B200 and B300 have few rows, all but three of them MoE: their bf16 GEMM and attention
# fractions are the rack parts' (the same silicon), and only the low precisions and
# ``grouped`` are fitted on their own rows.
B200 = dataclasses.replace(
    GB200, low_gemm=(("fp8", 0.400), ("mxfp8", 0.452)), grouped=0.973, moe_copy_s=1.51e-7,
    source="gemm and attention as GB200; low_gemm, grouped and moe_copy_s fitted together on "
           "the 7 B200 rows (Llama 3 8B/70B, DeepSeek-V3, gpt-oss; only 3 are MoE: "
           "DeepSeek-V3 on 256, gpt-oss-120b on 64), ranks in Megatron-Core's order "
           "(tp-cp-ep-dp-pp): median |error| 7.9%")
B300 = dataclasses.replace(
    GB300, low_gemm=(("fp8", 0.658), ("mxfp8", 0.465), ("nvfp4", 0.471)), grouped=0.304,
    moe_copy_s=0.0,
    source="gemm, attention, fp8 and nvfp4 as GB300; mxfp8 and grouped fitted on the 9 B300 "
           "rows (gpt-oss-120b, Nemotron 3 Nano): median |error| 4.5%")

# Name fragments, most specific first ("GB200" holds "B200"). H200 is H100's chip with
# faster, larger HBM (the data sheet's bandwidth is the device's): H100's fractions.
_BY_NAME = (("GB300", GB300), ("GB200", GB200), ("B300", B300), ("B200", B200), ("H200", H100),
            ("A100", A100), ("H100", H100))


def achieved(device: Device) -> Achieved:
    """The achieved fractions of ``device``'s type (by its name), else :data:`GENERIC`."""
    for key, value in _BY_NAME:
        if key in device.name:
            return value
    return GENERIC

# The alpha-beta teaching model's constants: the data sheet taken at its word. Every
# fraction is 1 (a GEMM of any shape at the dense peak, attention too, HBM and both links at
# their raw figures, so a bus bandwidth is the raw link's), no launch cost, and no collective
# hides behind compute (``overlap`` 1: ``overlapped`` charges all of it). With these,
# pase.perf.comms prices the textbook ring, hierarchical across nodes.
_IDEAL_PRECISIONS = ("fp32", "tf32", "bf16", "fp16", "fp8", "mxfp8", "nvfp4")
IDEAL = Achieved(
    gemm=1.0, gemm_half=0.0, sms=1, attention=1.0, hbm=1.0, launch_s=0.0, nvlink=1.0,
    network=1.0, overlap=1.0, low_gemm=tuple((p, 1.0) for p in _IDEAL_PRECISIONS),
    source="Idealised, not measured: every efficiency 1, no launch cost, no overlap "
           "(the alpha-beta teaching model, docs/cost-model.md).")


def achieved_by_rank(cluster: Cluster, devices: int) -> tuple[Achieved, ...]:
    """Per rank ``0 .. devices - 1``, the achieved fractions of its own device type: on a
    mixed cluster each group's type keeps its own constants (a homogeneous one repeats
    its device's)."""
    if not cluster.groups:
        return (achieved(cluster.device),) * int(devices)
    per_group = [achieved(g.device) for g in cluster.groups]
    return tuple(per_group[int(i)] for i in cluster.group_of(np.arange(int(devices))))


def achieved_of_view(cluster: Cluster, devices: int) -> Achieved:
    """The constants ranks ``0 .. devices - 1`` run at when priced as one homogeneous
    cluster (:meth:`pase.cluster.Cluster.view`): those of the slowest device type they
    touch (the view's device is a composite whose name is no type's)."""
    if not cluster.groups:
        return achieved(cluster.device)
    touched = cluster.groups[:int(cluster.group_of(max(int(devices), 1) - 1)) + 1]
    return achieved(min(touched, key=lambda g: g.device.peak_tflops).device)

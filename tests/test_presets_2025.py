"""Today's machines: each preset's figures are its data sheet's, stated here as NVIDIA's
sheets state them (tensor-core speeds with sparsity, so the dense figure is half; totals
for the whole system divided by its GPUs), and the block-scaled precisions (mxfp8,
nvfp4) are refused where the hardware lacks them and survive a trip through JSON."""
from __future__ import annotations

import json

import pytest

from pase.cli import main
from pase.cluster import PRECISIONS, PRESETS, Cluster, Device, get_cluster
from pase.errors import OptionError

TB, PF = 1000.0, 1000.0  # GB per TB; TFLOP/s per PFLOP/s

# preset -> (GPUs per node, the sheet's figures per GPU). Speeds are dense TFLOP/s,
# memory GB, bandwidths GB/s per direction; network from its Gb/s (8 bits a byte).
SHEETS = {
    # H200 data sheet: 1,979 TFLOP/s bf16 and 3,958 fp8 with sparsity (bf16 dense is 989.4,
    # rounded to 989 as h100-sxm has it), 67 fp32, 141 GB at 4.8 TB/s, NVLink 900 GB/s
    # both ways; DGX H200: 8 x 400 Gb/s ConnectX-7.
    "dgx-h200": (8, dict(bf16=1979 / 2, fp8=3958 / 2, mxfp8=0, nvfp4=0, fp32=67,
                         memory=141, hbm=4.8 * TB, nvlink=900 / 2, network=400 / 8)),
    # DGX B200: 1,440 GB and 64 TB/s for 8 GPUs, 72 PF fp8 and 144 PF fp4 with sparsity,
    # NVLink 14.4 TB/s in all, 8 x 400 Gb/s ConnectX-7; HGX B200: 36 PF bf16 with sparsity
    # and 600 TFLOP/s fp32 for 8 GPUs.
    "dgx-b200": (8, dict(bf16=36 * PF / 8 / 2, fp8=72 * PF / 8 / 2, mxfp8=72 * PF / 8 / 2,
                         nvfp4=144 * PF / 8 / 2, fp32=600 / 8, memory=1440 / 8,
                         hbm=64 * TB / 8, nvlink=14.4 * TB / 8 / 2, network=400 / 8)),
    # DGX B300: 2.3 TB for 8 GPUs (288 GB each), 8 x 800 Gb/s ConnectX-8; HGX B300: fp4
    # 108 PF dense (beside 144 sparse), fp8/fp6 72 and bf16 36 PF with sparsity, 600 TFLOP/s
    # fp32, for 8 GPUs; 8 TB/s HBM3e and NVLink 5's 1.8 TB/s both ways per GPU.
    "dgx-b300": (8, dict(bf16=36 * PF / 8 / 2, fp8=72 * PF / 8 / 2, mxfp8=72 * PF / 8 / 2,
                         nvfp4=108 * PF / 8, fp32=600 / 8, memory=288, hbm=8 * TB,
                         nvlink=1.8 * TB / 2, network=800 / 8)),
    # GB200 NVL72, per rack of 72: 1,440 PF fp4, 720 fp8/fp6, 360 bf16 with sparsity,
    # 5,760 TFLOP/s fp32, 13.4 TB HBM3e at 576 TB/s, NVLink 130 TB/s; 400 Gb/s ConnectX-7
    # per GPU.
    "gb200-nvl72": (72, dict(bf16=360 * PF / 72 / 2, fp8=720 * PF / 72 / 2,
                             mxfp8=720 * PF / 72 / 2, nvfp4=1440 * PF / 72 / 2, fp32=5760 / 72,
                             memory=round(13.4 * TB / 72), hbm=576 * TB / 72,
                             nvlink=1.8 * TB / 2, network=400 / 8)),
    # GB300 NVL72, per rack of 72: fp4 1,080 PF dense (beside 1,440 sparse), 720 fp8/fp6 and
    # 360 bf16 with sparsity, 20.7 TB HBM3e at 576 TB/s; one 800 Gb/s ConnectX-8 per GPU.
    "gb300-nvl72": (72, dict(bf16=360 * PF / 72 / 2, fp8=720 * PF / 72 / 2,
                             mxfp8=720 * PF / 72 / 2, nvfp4=1080 * PF / 72, fp32=0,
                             memory=round(20.7 * TB / 72), hbm=576 * TB / 72,
                             nvlink=1.8 * TB / 2, network=800 / 8)),
}


@pytest.mark.parametrize("name", sorted(SHEETS))
def test_each_preset_holds_its_data_sheet_figures(name):
    per_node, sheet = SHEETS[name]
    c = PRESETS[name]
    d = c.device
    assert c.devices_per_node == per_node and c.nodes == 1
    held = dict(bf16=d.bf16_tflops, fp8=d.fp8_tflops, mxfp8=d.mxfp8_tflops, nvfp4=d.nvfp4_tflops,
                fp32=d.fp32_tflops, memory=d.memory_gib, hbm=d.hbm_gbps,
                nvlink=c.intra.bandwidth_gbps, network=c.inter.bandwidth_gbps)
    # 0.5 TFLOP/s of slack: the sheets print whole numbers (H200's 1,979 is 2 x 989.4)
    assert held == pytest.approx(sheet, abs=0.5)
    assert d.peak_tflops == d.bf16_tflops and d.peak("fp16") == d.bf16_tflops
    assert c.intra.latency_us == 2.0 and c.inter.latency_us == 5.0
    assert "NVIDIA" in c.source and "sparsity" in c.source


def test_hopper_has_fp8_but_no_block_scaled_formats():
    h100 = PRESETS["h100-sxm"].device
    assert h100.peak("fp8") == 1979.0 and h100.mxfp8_tflops == h100.nvfp4_tflops == 0
    for precision in ("mxfp8", "nvfp4"):
        with pytest.raises(OptionError) as caught:
            h100.peak(precision)
        assert str(caught.value) == (f"device 'H100 SXM5 80GB' has no {precision} peak; "
                                     f"it has: bf16, fp8, fp32")


def test_the_precisions_and_their_peaks_on_blackwell():
    assert PRECISIONS == ("bf16", "fp16", "fp8", "mxfp8", "nvfp4", "fp32")
    b300 = PRESETS["dgx-b300"].device
    assert [b300.peak(p) for p in PRECISIONS] == [2250, 2250, 4500, 4500, 13500, 75]
    # a headline precision answers for itself only: "fp8" is not read inside "mxfp8"
    mx = Device("mx-only", 100.0, 8.0, "mxfp8")
    assert mx.peak("mxfp8") == 100.0
    with pytest.raises(OptionError, match=r"^device 'mx-only' has no fp8 peak; it has: mxfp8$"):
        mx.peak("fp8")
    with pytest.raises(OptionError, match=r"^device 'GB300 GPU 288GB' has no fp32 peak; it has: "
                                          r"bf16, fp8, mxfp8, nvfp4$"):
        PRESETS["gb300-nvl72"].device.peak("fp32")


def test_a_negative_block_scaled_figure_is_refused_naming_it(tmp_path):
    for field in ("mxfp8_tflops", "nvfp4_tflops"):
        data = PRESETS["dgx-b200"].to_dict()
        data["device"][field] = -1
        path = tmp_path / f"{field}.json"
        path.write_text(json.dumps(data))
        with pytest.raises(OptionError, match=rf"^cluster file {path}: device\.{field} must be a "
                                              rf"finite number from 1e-06 to 1000000 TFLOP/s "
                                              rf"\(or 0: unknown\), got -1$"):
            get_cluster(str(path))


@pytest.mark.parametrize("name", sorted(SHEETS))
def test_the_new_figures_survive_json(name, tmp_path):
    path = tmp_path / "c.json"
    PRESETS[name].to_json(path)
    data = json.loads(path.read_text())["device"]
    assert data["mxfp8_tflops"] == PRESETS[name].device.mxfp8_tflops
    assert data["nvfp4_tflops"] == PRESETS[name].device.nvfp4_tflops
    assert Cluster.from_json(path) == PRESETS[name]


def test_a_file_written_before_the_block_scaled_figures_still_loads(tmp_path):
    # dgx-a100's JSON as pase wrote it before mxfp8_tflops and nvfp4_tflops existed
    old = {"schema": "pase.cluster", "version": 1, "name": "dgx-a100", "nodes": 1,
           "devices_per_node": 8,
           "device": {"name": "A100 SXM4 40GB", "peak_tflops": 312.0, "memory_gib": 40.0,
                      "precision": "fp16-tensor", "bf16_tflops": 312.0, "fp8_tflops": 0.0,
                      "fp32_tflops": 19.5, "hbm_gbps": 1555.0},
           "intra": {"bandwidth_gbps": 300.0, "latency_us": 3.0},
           "inter": {"bandwidth_gbps": 25.0, "latency_us": 5.0}, "source": "old"}
    path = tmp_path / "old.json"
    path.write_text(json.dumps(old))
    c = get_cluster(str(path))
    assert c.device.mxfp8_tflops == c.device.nvfp4_tflops == 0 and c.device.peak("bf16") == 312
    with pytest.raises(OptionError, match="has no mxfp8 peak; it has: bf16, fp32$"):
        c.device.peak("mxfp8")


def test_a_rack_preset_grows_by_whole_racks():
    c = get_cluster("gb200-nvl72", 256)
    assert (c.name, c.nodes, c.devices_per_node, c.devices) == ("gb200-nvl72x4", 4, 72, 288)
    assert c.link_between(0, 71) == "intra" and c.link_between(71, 72) == "inter"
    assert get_cluster("dgx-b300x2").devices == 16


def test_evaluate_prices_a_layout_on_four_racks(capsys):
    code = main(["evaluate", "llama3-8b", "-p", "256", "--cluster", "gb200-nvl72", "--layout",
                 "tp=1,dp=256", "--micro-batch", "1", "--global-batch", "256", "--format", "json"])
    out = capsys.readouterr()
    data = json.loads(out.out)
    assert code == 0 and out.err == "" and data["cluster"] == "gb200-nvl72x4"
    assert data["layout"]["precision"] == "bf16" and 0 < data["mfu"] < 1
    # the device memory is the preset's 186 GB (taken as GiB)
    assert data["device_memory_bytes"] == 186 * 2**30


def test_the_listing_names_them_within_the_terminal_width(capsys):
    assert main(["clusters"]) == 0
    out = capsys.readouterr().out
    for name in SHEETS:
        assert f"\n{name} " in out
    assert max(len(line) for line in out.splitlines()) <= 100

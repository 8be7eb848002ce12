"""Every figure of a cluster is checked where it enters: finite, positive (0 where it means
unknown) and inside a range no real machine leaves; a bad one is one line naming it."""
from __future__ import annotations

import json
import re

import pytest

from pase.cli import main
from pase.cluster import PRESETS, Cluster, Device, Group, Link, get_cluster
from pase.errors import OptionError

GOOD = PRESETS["dgx-a100"].to_dict()

# (part, field, value, what the message names): json.dumps writes NaN and Infinity as
# JavaScript does, which Python's JSON reader (and so pase's) accepts
BAD = [
    ("device", "hbm_gbps", -1, "device.hbm_gbps must be a finite number from 1e-06 to 1000000 "
                               r"GB/s \(or 0: unknown\), got -1"),
    ("device", "bf16_tflops", -100.0, "device.bf16_tflops must be"),
    ("device", "peak_tflops", float("inf"), "device.peak_tflops must be a finite number"),
    ("device", "bf16_tflops", float("inf"), "device.bf16_tflops must be a finite number"),
    ("device", "memory_gib", 1e308, "device.memory_gib must be a finite number from 1e-06 to "
                                    "1048576 GiB"),
    ("device", "hbm_gbps", float("nan"), "device.hbm_gbps must be a finite number"),
    ("device", "memory_gib", "80", "device.memory_gib must be a finite number .*got '80'"),
    ("device", "fp32_tflops", True, "device.fp32_tflops must be a finite number .*got True"),
    ("device", "peak_tflops", 1e-320, "device.peak_tflops must be a finite number from 1e-06"),
    ("device", "precision", 16, "device.precision must be a string"),
    ("intra", "bandwidth_gbps", 0, "intra.bandwidth_gbps must be a finite number from 1e-06"),
    ("inter", "latency_us", 5e6, "inter.latency_us must be a finite number from 0 to 1000000 us"),
    ("inter", "latency_us", None, "inter.latency_us must be a finite number .*got None"),
]


def bad_file(tmp_path, part, field, value):
    data = json.loads(json.dumps(GOOD))
    data[part][field] = value
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    return path


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("part, field, value, message", BAD)
def test_evaluate_refuses_an_impossible_figure(capsys, tmp_path, part, field, value, message):
    path = bad_file(tmp_path, part, field, value)
    code, out, err = run(capsys, "evaluate", "gpt2", "-p", 8, "--cluster", path, "--layout",
                         "tp=2,dp=4", "--micro-batch", 1, "--global-batch", 8)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith(f"pase: error: cluster file {path}: ")
    assert re.search(message, err), err


@pytest.mark.parametrize("part, field, value", [("device", "hbm_gbps", -1),
                                                ("device", "memory_gib", 1e308),
                                                ("device", "hbm_gbps", float("nan"))])
def test_the_layout_search_refuses_it_before_searching(capsys, tmp_path, part, field, value):
    path = bad_file(tmp_path, part, field, value)
    code, out, err = run(capsys, "solve", "gpt2", "-p", 8, "--cluster", path, "--layouts",
                         "--global-batch", 8)
    assert code == 2 and out == "" and "layouts priced" not in err
    assert err.count("\n") == 1 and f"device.{field} must be a finite number" in err


def test_a_group_names_where_its_figure_is(tmp_path):
    data = PRESETS["mixed-a100-v100"].to_dict()
    data["groups"][1]["intra"]["bandwidth_gbps"] = -3
    path = tmp_path / "mixed.json"
    path.write_text(json.dumps(data))
    with pytest.raises(OptionError, match=r"mixed\.json: group 1: intra\.bandwidth_gbps must be a "
                                          r"finite number from 1e-06 to 1000000 GB/s, got -3$"):
        get_cluster(str(path))


def test_zero_means_unknown_only_where_documented(tmp_path):
    data = json.loads(json.dumps(GOOD))
    data["device"].update(hbm_gbps=0, bf16_tflops=0, fp8_tflops=0, fp32_tflops=0)
    data["inter"]["latency_us"] = 0
    path = tmp_path / "unknowns.json"
    path.write_text(json.dumps(data))
    cluster = get_cluster(str(path))
    assert cluster.device.hbm_gbps == 0 and cluster.device.peak("fp16") == 312.0
    for field in ("peak_tflops", "memory_gib"):
        with pytest.raises(OptionError, match=f"{field} must be a finite number from 1e-06"):
            get_cluster(str(bad_file(tmp_path, "device", field, 0)))


def test_figures_made_in_python_are_checked_too():
    with pytest.raises(OptionError, match=r"device 'x': hbm_gbps must be a finite number .*got -1"):
        Device("x", 10.0, 8.0, hbm_gbps=-1)
    with pytest.raises(OptionError, match=r"device 'x': memory_gib .*got inf"):
        Device("x", 10.0, float("inf"))
    with pytest.raises(OptionError, match=r"link: bandwidth_gbps .*got nan"):
        Link(float("nan"), 1.0)
    with pytest.raises(OptionError, match=r"link: latency_us .*got -0.5"):
        Link(10.0, -0.5)
    with pytest.raises(OptionError, match=r"cluster 'c': intra must be a Link, got dict"):
        Cluster("c", 1, 1, Device("d", 1.0, 1.0), {"bandwidth_gbps": 1}, Link(1.0, 1.0))
    with pytest.raises(OptionError, match=r"group 'g': nodes must be an integer from 1 to .*got -2"):
        Group("g", -2, 8, Device("d", 1.0, 1.0), Link(1.0, 1.0), Link(1.0, 1.0))


def test_every_preset_passes_and_the_range_holds_the_machines_in_use():
    for name, cluster in PRESETS.items():
        for part in [cluster, *cluster.groups]:
            rebuilt = Device(**{k: getattr(part.device, k) for k in Device.__dataclass_fields__})
            assert rebuilt == part.device, name
            Link(part.intra.bandwidth_gbps, part.intra.latency_us)
            Link(part.inter.bandwidth_gbps, part.inter.latency_us)
    # a laptop GPU and a future wafer-scale part are both inside the ranges
    Device("small", 0.5, 2.0, hbm_gbps=50.0)
    Device("wafer", 125_000.0, 44.0 * 1024, bf16_tflops=125_000.0, hbm_gbps=21e6 / 1000)

import json

import numpy as np
import pytest

from pase.cluster import PRESETS, Cluster, Device, Link, get_cluster
from pase.errors import OptionError, UnknownNameError


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_presets_round_trip_through_json(name, tmp_path):
    cluster = get_cluster(name)
    path = tmp_path / f"{name}.json"
    cluster.to_json(path)
    assert Cluster.from_json(path) == cluster
    assert cluster.source, "every preset documents where its figures come from"


def test_node_composition():
    c = get_cluster("dgx-a100x2")
    assert (c.nodes, c.devices) == (2, 16)
    assert c.node_of(7) == 0 and c.node_of(8) == 1
    assert c.link_between(0, 7) == "intra" and c.link_between(7, 8) == "inter"
    assert c.link("intra") is c.intra and c.link("inter") is c.inter
    assert get_cluster("gtx1080ti", 20).nodes == 3  # grows to hold 20 devices
    assert get_cluster("dgx-a100", 8).nodes == 1


@pytest.mark.parametrize("spec, devices, message", [
    ("tpu-v9", None, "unknown cluster 'tpu-v9'; presets: dgx-a100, dgx-a100-80gb, dgx-b200, "
                     "dgx-b300, dgx-h200, dgx1-v100, gb200-nvl72, gb300-nvl72, gtx1080ti"),
    ("dgx-a100x2", 32, "has 16 devices (2 x 8); 32 requested"),
    ("dgx-a100x0", None, "node count must be >= 1"),
])
def test_bad_names(spec, devices, message):
    with pytest.raises((OptionError, UnknownNameError), match=message.replace("(", r"\(").replace(")", r"\)")):
        get_cluster(spec, devices)


def test_bad_cluster_files(tmp_path):
    good = get_cluster("dgx-a100").to_dict()
    cases = {
        "not_json.json": ("{", "not valid JSON"),
        "wrong_schema.json": (json.dumps({"name": "x"}), "not a pase cluster"),
        "old_version.json": (json.dumps({**good, "version": 7}), "version 7 is not supported"),
        "missing.json": (json.dumps({k: v for k, v in good.items() if k != "intra"}),
                         "malformed cluster JSON"),
        "zero_bw.json": (json.dumps({**good, "inter": {"bandwidth_gbps": 0, "latency_us": 1}}),
                         "inter.bandwidth_gbps must be a finite number from 1e-06"),
        "neg_latency.json": (json.dumps({**good, "intra": {"bandwidth_gbps": 1, "latency_us": -1}}),
                             "intra.latency_us must be a finite number from 0 to"),
        "zero_nodes.json": (json.dumps({**good, "nodes": 0}), "nodes must be an integer from 1"),
    }
    for name, (text, message) in cases.items():
        path = tmp_path / name
        path.write_text(text)
        with pytest.raises(OptionError, match=message):
            get_cluster(str(path))
    with pytest.raises(OptionError, match="cannot read cluster file"):
        Cluster.from_json(tmp_path / "absent.json")


def test_custom_cluster_in_code():
    c = Cluster("lab", 2, 4, Device("toy", 1.0, 8.0), Link(10, 1), Link(1, 10))
    assert c.devices == 8 and [c.node_of(r) for r in range(8)] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert c.node_of(np.arange(3, 6)).tolist() == [0, 1, 1]
    assert not c.spans_nodes(4) and c.spans_nodes(5)
    assert c.spans_nodes(np.array([1, 4, 5, 8])).tolist() == [False, False, True, True]
    with pytest.raises(OptionError, match="unknown link class 'pcie'; allowed: intra, inter"):
        c.link("pcie")


def test_cluster_files_that_are_not_utf8_json_give_one_line(tmp_path):
    bad = tmp_path / "bin.json"
    bad.write_bytes(b"\xff\xfe")
    with pytest.raises(OptionError, match="not valid UTF-8 JSON"):
        get_cluster(str(bad))


def test_device_counts_past_the_supported_maximum_are_refused(tmp_path):
    data = PRESETS["dgx-a100"].to_dict()
    data["devices_per_node"] = 10**30
    path = tmp_path / "huge.json"
    path.write_text(json.dumps(data))
    with pytest.raises(OptionError, match="devices_per_node must be an integer from 1 to"):
        get_cluster(str(path))
    with pytest.raises(OptionError, match="nodes must be an integer from 1 to"):
        get_cluster("dgx-a100x99999999999999")
    with pytest.raises(OptionError, match="at most 16777216"):
        PRESETS["dgx-a100"].with_nodes(2**22)  # 8 x 2^22 = 2^25 devices

"""Strict files and honest child deaths (issue 27, defects 13 and 14).

Duplicate JSON keys, control characters in names and unknown cluster fields are refused
in one line; a child process killed by a signal is reported as such, never as bad input.
"""
from __future__ import annotations

import json
import sys

import pytest

from pase.api import load_graph
from pase.children import ChildDiedError, killed_by
from pase.cli import main
from pase.cluster.model import Cluster
from pase.errors import GraphError, OptionError, PaseError, StrategyError
from pase.ir import Graph, read_graph_file
from pase.strategy import read_strategy_file


def _graph_dict() -> dict:
    return load_graph("mlp", batch=8, width=16, layers=2).to_dict()


def _cluster_dict() -> dict:
    return {"schema": "pase.cluster", "version": 1, "name": "mine", "nodes": 1,
            "devices_per_node": 4,
            "device": {"name": "gpu", "peak_tflops": 100.0, "memory_gib": 40.0},
            "intra": {"bandwidth_gbps": 100.0, "latency_us": 1.0},
            "inter": {"bandwidth_gbps": 10.0, "latency_us": 5.0}}


def _one_line_error(capsys) -> str:
    err = capsys.readouterr().err
    assert err.startswith("pase: error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err and "internal error" not in err
    return err


# -- 13a: control characters in names ---------------------------------------------

@pytest.mark.parametrize("bad", ["fc\n1", "fc\x001", "fc\x1b[31m", "fc\x85", "fc\u2028"])
def test_op_names_with_control_characters_are_refused(bad):
    data = _graph_dict()
    old = data["ops"][0]["name"]
    data["ops"][0]["name"] = bad
    for op in data["ops"]:  # keep the graph connected: consumers read the renamed op
        for port in op.get("inputs", []):
            if port.get("source", {}) and port["source"]["op"] == old:
                port["source"]["op"] = bad
    with pytest.raises(GraphError, match=r"op name .* control character U\+"):
        Graph.from_dict(data)


def test_graph_names_with_control_characters_are_refused():
    data = _graph_dict()
    data["name"] = "mlp\nfake row"
    with pytest.raises(GraphError, match=r"graph name .* control character U\+000A at position 3"):
        Graph.from_dict(data)


def test_printable_unicode_names_still_pass():
    data = _graph_dict()
    data["name"] = "mlp ünïcode 模型"
    assert Graph.from_dict(data).name == "mlp ünïcode 模型"


def test_control_character_op_name_is_one_line_on_the_cli(tmp_path, capsys):
    data = _graph_dict()
    data["ops"][-1]["name"] = "loss\nfake row"
    path = tmp_path / "g.json"
    path.write_text(json.dumps(data))
    assert main(["inspect", str(path), "-p", "2"]) == 2
    assert "control character U+000A" in _one_line_error(capsys)


# -- 13b: duplicate keys in graph, strategy and cluster JSON -------------------------

def test_duplicate_key_in_graph_json_is_refused(tmp_path):
    text = json.dumps(_graph_dict(), indent=1)
    # the first op's "kind" twice: the last one would silently win
    text = text.replace('"kind":', '"kind": "elementwise", "kind":', 1)
    path = tmp_path / "g.json"
    path.write_text(text)
    with pytest.raises(GraphError, match=r"g\.json.*the key \"kind\" appears twice in one object "
                                         r"\(the object with \"name\""):
        read_graph_file(path)
    with pytest.raises(GraphError, match="appears twice"):
        Graph.from_json(text)


def test_duplicate_top_level_key_in_graph_json_is_refused(tmp_path):
    text = json.dumps(_graph_dict())
    path = tmp_path / "g.json"
    path.write_text(text[:-1] + ', "name": "other"}')
    with pytest.raises(GraphError, match=r"the key \"name\" appears twice"):
        read_graph_file(path)


def test_duplicate_key_in_strategy_json_is_refused(tmp_path, capsys):
    path = tmp_path / "s.json"
    path.write_text('{"fc1": {"b": 2}, "fc1": {"b": 1}}')
    with pytest.raises(StrategyError, match=r"s\.json: the key \"fc1\" appears twice"):
        read_strategy_file(path)
    assert main(["evaluate", "mlp", "-p", "2", "--strategy", str(path)]) == 2
    assert "appears twice" in _one_line_error(capsys)


def test_duplicate_key_in_cluster_json_is_refused(tmp_path, capsys):
    text = json.dumps(_cluster_dict())
    path = tmp_path / "c.json"
    path.write_text(text.replace('"memory_gib": 40.0', '"memory_gib": 40.0, "memory_gib": 4000.0'))
    with pytest.raises(OptionError, match=r"c\.json: the key \"memory_gib\" appears twice in one "
                                          r"object \(the object with \"name\": \"gpu\"\)"):
        Cluster.from_json(path)
    assert main(["solve", "mlp", "-p", "2", "--cluster", str(path)]) == 2
    assert "appears twice" in _one_line_error(capsys)


# -- 13c: unknown fields in cluster JSON ---------------------------------------------

@pytest.mark.parametrize("where", ["top", "device", "intra"])
def test_unknown_cluster_field_is_refused(tmp_path, where):
    data = _cluster_dict()
    target = data if where == "top" else data[where]
    target["memory_gb"] = 80  # a typo of memory_gib: ignored, the device keeps its 40 GiB
    path = tmp_path / "c.json"
    path.write_text(json.dumps(data))
    with pytest.raises(OptionError, match=r"c\.json: .*unknown field \"memory_gb\"; allowed: "):
        Cluster.from_json(path)


def test_unknown_field_in_a_cluster_group_is_refused():
    data = _cluster_dict()
    group = {k: data.pop(k) for k in ("nodes", "devices_per_node", "device", "intra", "inter")}
    data["groups"] = [{"name": "a", **group, "colour": "red"}]
    with pytest.raises(OptionError, match=r"group 0 has unknown field \"colour\"; allowed: name, "):
        Cluster.from_dict(data)
    data["groups"][0].pop("colour")
    data["extra"] = 1
    with pytest.raises(OptionError, match=r"the cluster has unknown field \"extra\"; allowed: "
                                          r"schema, version, name, source, groups"):
        Cluster.from_dict(data)


def test_cluster_json_round_trips_and_device_names_are_checked(tmp_path):
    cluster = Cluster.from_dict(_cluster_dict())
    assert Cluster.from_dict(json.loads(cluster.to_json())) == cluster
    data = _cluster_dict()
    data["device"]["name"] = "gpu\x00"
    with pytest.raises(OptionError, match=r"control character U\+0000"):
        Cluster.from_dict(data)


# -- 14: a child killed by a signal is not bad input ---------------------------------

def test_killed_by_names_the_signal():
    assert killed_by(-6) == "killed by SIGABRT; out of memory?"
    assert killed_by(-15) == "killed by SIGTERM"
    assert killed_by(1) is None and killed_by(0) is None


def _abort_instead_of_compiling(monkeypatch):
    """The export child replaced by one that dies of SIGABRT, as XLA does under ulimit -v."""
    import pase.export.equivalence as equivalence

    real_run = equivalence._run_child

    def run(cmd, *args, **kwargs):
        script = "import os, signal, sys; sys.stderr.write('PyObject_Vectorcall\\n'); " \
                 "sys.stderr.flush(); os.kill(os.getpid(), signal.SIGABRT)"
        return real_run([sys.executable, "-c", script], *args, **kwargs)

    monkeypatch.setattr(equivalence, "_run_child", run)
    monkeypatch.setattr(equivalence, "_need_jax", lambda: None)


def test_a_compile_child_killed_by_sigabrt_is_a_child_death(monkeypatch):
    from pase.export.equivalence import compile_programs

    _abort_instead_of_compiling(monkeypatch)
    with pytest.raises(ChildDiedError, match=r"the JAX compile \(child process\) was killed by "
                                             r"SIGABRT; out of memory\?.*PyObject_Vectorcall"):
        compile_programs(["x = 1\n"], 2, timeout=60)


def test_verify_reports_a_killed_compile_with_exit_1(monkeypatch, capsys, tmp_path):
    _abort_instead_of_compiling(monkeypatch)
    strategy = tmp_path / "s.json"
    strategy.write_text("{}")  # every op unsplit
    assert main(["verify", "mlp", "-p", "2", "--strategy", str(strategy), "--engine", "jax",
                 "--model-option", "layers=1"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "killed by SIGABRT; out of memory?" in err, err
    assert "bad input" not in err and "internal error" not in err
    assert issubclass(ChildDiedError, PaseError)


def test_a_child_that_fails_plainly_is_still_reported_as_before(monkeypatch):
    import pase.export.equivalence as equivalence

    real_run = equivalence._run_child
    monkeypatch.setattr(equivalence, "_need_jax", lambda: None)
    monkeypatch.setattr(equivalence, "_run_child", lambda cmd, *a, **k: real_run(
        [sys.executable, "-c", "raise SystemExit('no such thing')"], *a, **k))
    with pytest.raises(PaseError, match=r"failed \(exit 1\): no such thing") as info:
        equivalence.compile_programs(["x = 1\n"], 2, timeout=60)
    assert not isinstance(info.value, ChildDiedError)


def test_a_sweep_run_killed_by_sigabrt_names_the_signal(monkeypatch):
    from pase.sweeps import runner

    monkeypatch.setattr(runner, "BOOT", "import os, signal; os.kill(os.getpid(), signal.SIGABRT)"
                                        "  # {limit}")
    result = runner._run_child({"wall_limit": 60, "memory_limit": None})
    assert result["status"] == "error"
    assert "killed by SIGABRT; out of memory?" in result["error"]


def test_duplicate_key_in_a_pipeline_plan_is_refused(tmp_path):
    from pase.pipeline.plan import read_pipeline_plan

    path = tmp_path / "plan.json"
    path.write_text('{"kind": "pipeline", "devices": 4, "devices": 8}')
    with pytest.raises(StrategyError, match=r"plan\.json: the key \"devices\" appears twice"):
        read_pipeline_plan(path)


def test_a_cluster_of_groups_refuses_top_level_nodes():
    data = _cluster_dict()
    group = {k: data[k] for k in ("nodes", "devices_per_node", "device", "intra", "inter")}
    data["groups"] = [{"name": "a", **group}]  # the top-level fields would be ignored
    with pytest.raises(OptionError, match=r"unknown field \"nodes\".*takes its nodes, devices and "
                                          r"links from them"):
        Cluster.from_dict(data)

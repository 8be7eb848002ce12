"""Refuse before working (issue 27, defects 5, 8 and 10): sizes that could not be built,
paths that are not regular files, sweep axis values that are the user's mistake, and
SQLite files that are not result stores, each a one-line exit 2 before any work.

A test that would hang on a pase without the check is bounded by an alarm, so it
fails instead of hanging; the work it allows is asserted in CPU seconds, not wall time,
so a busy machine cannot fail it.
"""
from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import time
from pathlib import Path

import pytest

import pase
from pase.cli import main
from pase.errors import GraphError, OptionError, TooLargeError

# Wall seconds after which a refusal is taken to hang (it needs well under one CPU second).
HANG = 120
# CPU seconds a refusal may use: the import and two small probe builds, with room to spare.
REFUSAL_CPU = 15.0


class Hung(Exception):
    pass


@contextlib.contextmanager
def no_hang(seconds: float = HANG):
    """Raise Hung in the test if the block runs past ``seconds`` (an open() of a FIFO too)."""
    def alarm(signum, frame):
        raise Hung(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    start = time.process_time()
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert time.process_time() - start < REFUSAL_CPU


def refused(argv: list[str], capsys, pattern: str) -> str:
    """Run the CLI; assert a one-line ``pase: error:`` exit 2 matching ``pattern``."""
    with no_hang():
        code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, (code, err)
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert err.startswith("pase: error: "), err
    assert pattern in err, err
    return err


# -- sizes (defect 5) ------------------------------------------------------------------

def test_a_million_layers_is_refused_with_the_predicted_op_count(capsys):
    err = refused(["inspect", "gpt2", "-p", "4", "--model-option", "layers=1000000"], capsys,
                  "model 'gpt2' with layers=1000000 would have about 12,000,")
    assert "at most 100,000 ops" in err


def test_a_random_graph_of_a_million_ops_is_refused(capsys):
    refused(["solve", "random", "-p", "4", "--model-option", "size=1000000"], capsys,
            "model 'random' with size=1000000 would have about 1,000,000 ops")


def test_the_api_refuses_the_size_with_a_too_large_error():
    with no_hang(), pytest.raises(TooLargeError, match="densenet121.*block3=1000000"):
        pase.load_graph("densenet121", block3=1_000_000)


def test_a_list_of_block_counts_is_measured_by_its_sum(capsys):
    refused(["inspect", "resnet101", "-p", "4", "--model-option", "blocks=[3,4,100000,3]"], capsys,
            "model 'resnet101' with blocks=[3, 4, 100000, 3] would have about 700,")


def test_sizes_that_fit_are_built():
    assert len(pase.load_graph("chain", length=300).ops) == 300
    assert len(pase.load_graph("gpt2", layers=2, batch=4096).ops) == 2 * 12 + 5


def test_a_million_sweep_workers_is_refused_before_the_sweep(tmp_path, capsys, monkeypatch):
    spec = tmp_path / "tiny.toml"
    spec.write_text('[grid]\nmodel = ["chain"]\ndevices = [2]\nsolver = ["dp"]\n')

    def no_sweep(*args, **kwargs):
        raise AssertionError("the sweep started")

    monkeypatch.setattr("pase.sweeps.sweep", no_sweep)
    err = refused(["sweep", str(spec), "--workers", "1000000"], capsys,
                  "--workers 1000000: this machine has")
    assert "at most" in err
    assert not (tmp_path / "tiny.sqlite").exists()


def test_the_sweep_api_refuses_a_million_workers_before_any_run(tmp_path):
    spec = {"grid": {"model": ["chain"], "devices": [2], "solver": ["dp"]}}
    with no_hang(), pytest.raises(OptionError, match="workers 1000000: this machine has"):
        pase.sweep(spec, tmp_path / "s.sqlite", workers=10**6)
    assert not (tmp_path / "s.sqlite").exists()


def test_a_worker_count_the_machine_holds_is_accepted():
    from pase.sizes import check_workers

    check_workers(1)
    check_workers(None)
    with pytest.raises(OptionError, match="enough for at most"):
        check_workers(10**6)


# -- paths that are not regular files (defect 5) ----------------------------------------

@pytest.fixture
def fifo(tmp_path) -> Path:
    path = tmp_path / "pipe.json"
    os.mkfifo(path)
    return path


def test_a_graph_path_that_is_a_fifo_is_refused_unopened(fifo, capsys):
    refused(["inspect", str(fifo), "-p", "4"], capsys, "is a FIFO (named pipe)")


def test_a_fifo_without_json_suffix_is_refused_as_a_graph_file(tmp_path, capsys):
    path = tmp_path / "pipe"
    os.mkfifo(path)
    refused(["inspect", str(path), "-p", "4"], capsys, f"graph file '{path}' is a FIFO")


def test_a_graph_path_that_is_a_folder_is_refused(tmp_path, capsys):
    folder = tmp_path / "graph.json"
    folder.mkdir()
    refused(["inspect", str(folder), "-p", "4"], capsys, "is a folder; give a regular file")


def test_the_api_refuses_a_fifo_graph_with_a_graph_error(fifo):
    with no_hang(), pytest.raises(GraphError, match="FIFO"):
        pase.load_graph(fifo)


@pytest.mark.parametrize("argv, what", [
    (["simulate", "mlp", "-p", "4", "--cluster", "dgx-a100", "--strategy", "{fifo}"],
     "strategy file"),
    (["export", "mlp", "-p", "4", "--strategy", "{fifo}", "--engine", "jax"], "strategy file"),
    (["solve", "mlp", "-p", "4", "--cost-model", "alpha-beta", "--cluster", "{fifo}"],
     "cluster file"),
    (["replan", "mlp", "--from", "{fifo}", "-p", "4"], "--from strategy"),
    (["sweep", "{fifo}"], "sweep spec"),
])
def test_other_input_paths_that_are_fifos_are_refused(argv, what, fifo, capsys):
    refused([a.replace("{fifo}", str(fifo)) for a in argv], capsys, f"{what} '{fifo}' is a FIFO")


# -- sweep axis values checked before the first run (defect 10) -------------------------

def _cyclic_graph(path: Path) -> Path:
    g = pase.load_graph("chain", length=2).to_dict()
    g["ops"][0]["inputs"][0]["source"] = {"op": g["ops"][1]["name"], "output": 0}
    path.write_text(json.dumps(g))
    return path


@pytest.mark.parametrize("grid, message", [
    ({"solver_options": {"dp": {"ordering": ["min-fill", "nope"]}}},
     "grid solver 'dp' with ordering='nope': unknown ordering 'nope'"),
    ({"solver": ["dp", "mcmc"], "solver_options": {"mcmc": {"iterations": [0]}}},
     "grid solver 'mcmc' with iterations=0"),
    ({"model": ["gpt2"], "model_options": {"gpt2": {"heads": [7]}}},
     "grid model 'gpt2' with heads=7"),
    ({"model": ["gpt2"], "model_options": {"gpt2": {"layers": [10**6]}}},
     "would have about 12,000,"),
    ({"batch": [8], "model": ["{cyclic}"]}, "apply only to registered models"),
    ({"model": ["{cyclic}"]}, "cycle"),
    ({"batch": [8], "model_options": {"chain": {"batch": [4]}}}, "batch given twice"),
])
def test_a_sweep_mistake_is_refused_before_any_run(grid, message, tmp_path):
    from pase.sweeps import SpecError, load_spec

    cyclic = str(_cyclic_graph(tmp_path / "cyclic.json"))
    full = {"model": ["chain"], "devices": [2], "solver": ["dp"], **grid}
    full["model"] = [cyclic if m == "{cyclic}" else m for m in full["model"]]
    with no_hang(), pytest.raises(SpecError) as info:
        load_spec({"grid": full})
    assert message in str(info.value) and "\n" not in str(info.value), info.value


def test_a_sweep_command_with_a_bad_ordering_stores_nothing(tmp_path, capsys, monkeypatch):
    spec = tmp_path / "nope.toml"
    spec.write_text('[grid]\nmodel = ["chain"]\ndevices = [2]\nsolver = ["dp"]\n'
                    '[grid.solver_options.dp]\nordering = ["nope"]\n')

    def no_sweep(*args, **kwargs):
        raise AssertionError("the sweep started")

    monkeypatch.setattr("pase.sweeps.sweep", no_sweep)
    refused(["sweep", str(spec), "--workers", "1"], capsys, "unknown ordering 'nope'")
    assert not (tmp_path / "nope.sqlite").exists()


def test_good_options_still_load():
    from pase.sweeps import load_spec

    spec = load_spec({"grid": {"model": ["chain"], "devices": [2, 4], "solver": ["dp", "mcmc"],
                               "batch": [8, 16],
                               "solver_options": {"dp": {"ordering": ["bfs", "min-fill"]},
                                                  "mcmc": {"iterations": [50]}}}})
    assert len(spec.points()) == 2 * 2 * 2 + 2 * 2


# -- SQLite files that are not result stores (defect 8) ---------------------------------

def _foreign_db(path: Path, sql: str) -> Path:
    db = sqlite3.connect(path)
    db.execute(sql)
    db.commit()
    db.close()
    return path


def test_report_on_a_runs_table_of_another_schema_names_its_columns(tmp_path, capsys):
    db = _foreign_db(tmp_path / "other.sqlite", "CREATE TABLE runs (a INTEGER, b TEXT)")
    before = db.read_bytes()
    refused(["report", str(db), "-o", str(tmp_path / "out")], capsys,
            f"{db} is not a pase results store (its runs table has columns a, b;")
    assert db.read_bytes() == before  # not switched to WAL mode, nothing created
    assert not (tmp_path / "out").exists()


def test_sweep_into_a_runs_table_of_another_schema_is_refused(tmp_path, capsys):
    db = _foreign_db(tmp_path / "other.sqlite", "CREATE TABLE runs (a INTEGER, b TEXT)")
    spec = tmp_path / "tiny.toml"
    spec.write_text('[grid]\nmodel = ["chain"]\ndevices = [2]\nsolver = ["dp"]\n')
    refused(["sweep", str(spec), "--db", str(db), "--workers", "1"], capsys,
            "is not a pase results store")


def test_a_database_without_a_runs_table_is_not_written_into(tmp_path, capsys):
    db = _foreign_db(tmp_path / "people.sqlite", "CREATE TABLE people (name TEXT)")
    refused(["report", str(db)], capsys, "it has tables people and no runs table")
    tables = sqlite3.connect(db).execute("SELECT name FROM sqlite_master").fetchall()
    assert tables == [("people",)]


def test_a_store_path_that_is_a_fifo_is_refused(fifo, tmp_path, capsys):
    refused(["report", str(fifo)], capsys, f"sweep store '{fifo}' is a FIFO")
    spec = tmp_path / "tiny.toml"
    spec.write_text('[grid]\nmodel = ["chain"]\ndevices = [2]\nsolver = ["dp"]\n')
    refused(["sweep", str(spec), "--db", str(fifo), "--workers", "1"], capsys,
            f"--db {fifo} is a FIFO")


def test_an_empty_file_still_becomes_a_store(tmp_path):
    from pase.sweeps.store import Store

    with Store(tmp_path / "new.sqlite") as store:
        assert store.keys() == set()

"""pase sweep: a grid on a 2-worker Dask LocalCluster, the SQLite store, resuming, limits,
bad specs, and the report.

One LocalCluster serves the module (its startup is the slow part); the
killed-sweep test starts its own through ``pase sweep --workers 2``.
"""
from __future__ import annotations

import itertools
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

pytest.importorskip("distributed")
pytest.importorskip("pandas")

import pase  # noqa: E402
from pase.cli import main  # noqa: E402
from pase.sweeps import load_results, load_spec, sweep  # noqa: E402
from pase.sweeps.report import write_report  # noqa: E402

GRID = {"model": ["alexnet", "rnnlm"], "devices": [4, 8], "solver": ["dp", "greedy"],
        "cost_model": ["paper"]}


@pytest.fixture(scope="module")
def scheduler():
    from distributed import LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster:
        yield cluster.scheduler_address


@pytest.fixture(scope="module")
def grid_db(scheduler, tmp_path_factory):
    db = tmp_path_factory.mktemp("grid") / "results.sqlite"
    seen = []
    frame = sweep({"grid": GRID, "run": {"time_limit": 60, "memory_limit": "4GiB"}}, db,
                  scheduler=scheduler, progress=seen.append)
    return db, frame, seen


def test_one_row_per_grid_point(grid_db):
    db, frame, seen = grid_db
    expected = set(itertools.product(GRID["model"], GRID["devices"], GRID["solver"]))
    assert len(frame) == len(expected) == 8
    assert set(zip(frame["model"], frame["devices"], frame["solver"])) == expected
    assert len(seen) == 8 and seen[-1]["remaining"] == 0 and seen[-1]["done"] == 8
    stored = load_results(db)
    assert len(stored) == 8 and stored["key"].is_unique
    with sqlite3.connect(db) as con:
        assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    for _, r in frame.iterrows():
        assert r["unit"] == "FLOP" and r["pase_version"] == pase.__version__ and r["host"]
        assert r["compute_cost"] + r["communication_cost"] == pytest.approx(r["cost"], rel=1e-12)
        assert json.loads(r["strategy"])  # one config per op
        if r["solver"] == "dp":  # the dp is exact: its cost is the in-process optimum
            assert r["status"] == "optimal" and r["gap"] == 0
            assert r["cost"] == pase.solve(r["model"], int(r["devices"])).total_cost
    dp = frame[frame.solver == "dp"].set_index(["model", "devices"])["cost"]
    greedy = frame[frame.solver == "greedy"].set_index(["model", "devices"])["cost"]
    assert (greedy >= dp * (1 - 1e-12)).all()


def test_a_rerun_skips_finished_rows(grid_db, scheduler):
    db, frame, _ = grid_db
    seen = []
    again = pase.sweep({"grid": GRID, "run": {"time_limit": 60, "memory_limit": "4GiB"}}, db,
                       scheduler=scheduler, progress=seen.append)
    assert seen == []  # nothing ran
    assert list(again["finished_at"]) == list(frame["finished_at"])
    assert len(pase.load_results(db)) == 8


def test_report_writes_a_table_three_plots_and_a_csv(grid_db, tmp_path, capsys):
    db, frame, _ = grid_db
    files = write_report(db, tmp_path / "md")
    assert set(files) == {"report.md", "cost_ratio.png", "solve_time.png", "gap.png"}
    for name in ("cost_ratio.png", "solve_time.png", "gap.png"):
        assert files[name].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    md = files["report.md"].read_text()
    assert sum(line.startswith("| alexnet") or line.startswith("| rnnlm")
               for line in md.splitlines()) == 8
    # ratio to the best of each (model, p): the dp's rows are 1, and every ratio >= 1
    import pandas as pd

    csv = pd.read_csv(write_report(db, tmp_path / "csv", "csv")["results.csv"])
    assert len(csv) == 8
    dp = csv[csv.solver == "dp"]
    assert (dp["ratio_to_best"] == 1.0).all()
    assert (csv["ratio_to_best"] >= 1.0).all()
    capsys.readouterr()
    assert main(["report", str(db), "-o", str(tmp_path / "cli")]) == 0
    names = ("report.md", "cost_ratio.png", "solve_time.png", "gap.png")  # each file it wrote
    assert capsys.readouterr().out.splitlines() == [f"wrote {tmp_path / 'cli' / n}" for n in names]


def test_memory_and_time_limits_are_rows_not_failures(scheduler, tmp_path):
    # The bfs ordering's tables on Inception-v3 at p = 4 need about 980 GiB (the dp
    # allocates them only when its budget allows); AlexNet's fit in a few KiB.
    spec = {"grid": {"model": ["alexnet", "inception_v3"], "devices": [4], "solver": ["dp"],
                     "solver_options": {"dp": {"ordering": ["bfs"], "memory_budget": ["1TiB"],
                                               "blocks": [False], "prune": [False]}}},
            "run": {"memory_limit": "1GiB"}}
    frame = sweep(spec, tmp_path / "mem.sqlite", scheduler=scheduler)
    status = dict(zip(frame["model"], frame["status"]))
    assert status == {"alexnet": "optimal", "inception_v3": "out_of_memory"}
    assert "memory" in frame.set_index("model").loc["inception_v3", "error"]
    killed = sweep({"grid": {"model": ["alexnet"], "devices": [4], "solver": ["dp"]},
                    "run": {"time_limit": 5, "kill_after": 0.05}},
                   tmp_path / "time.sqlite", scheduler=scheduler)
    assert list(killed["status"]) == ["time_limit"]
    assert "killed after 0.05 s" in killed["error"][0]


@pytest.mark.slow
def test_a_killed_sweep_resumes_with_every_run_once(scheduler, tmp_path):
    spec = tmp_path / "slow.toml"
    spec.write_text('[grid]\nmodel = ["alexnet", "rnnlm"]\ndevices = [2, 4, 8]\n'
                    'solver = ["mcmc"]\n[grid.solver_options.mcmc]\niterations = [1000000000]\n'
                    '[run]\ntime_limit = 1.5\n')
    db = tmp_path / "slow.sqlite"
    proc = subprocess.Popen([sys.executable, "-m", "pase", "sweep", str(spec), "--db", str(db),
                             "--workers", "2", "--quiet"], start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and _count(db) < 1:
            time.sleep(0.1)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the sweep, its scheduler and its workers
        proc.wait()
    first = _count(db)
    assert 1 <= first < 6
    before = load_results(db)
    frame = sweep(spec, db, scheduler=scheduler)
    after = load_results(db)
    assert len(frame) == len(after) == 6 and after["key"].is_unique
    assert set(zip(after["model"], after["devices"])) == \
        set(itertools.product(["alexnet", "rnnlm"], [2, 4, 8]))
    kept = after.set_index("key").loc[before["key"], "finished_at"]
    assert list(kept) == list(before["finished_at"])  # finished runs were not run again
    assert set(after["status"]) <= {"feasible", "time_limit"}


def _count(db) -> int:
    if not os.path.exists(db):
        return 0
    try:
        with sqlite3.connect(db, timeout=5) as con:
            return con.execute("SELECT COUNT(*) FROM runs").fetchone()[0]
    except sqlite3.OperationalError:  # the table is not created yet
        return 0


# -- specs ------------------------------------------------------------------------------

def test_options_multiply_only_their_plugin_and_exclude_rules_apply():
    spec = load_spec({"grid": {**GRID, "solver_options": {"dp": {"ordering": ["generateseq",
                                                                                "min-fill"]}}},
                      "exclude": [{"solver": "greedy", "devices": [8]}]})
    points = spec.points()
    # dp: 2 models x 2 p x 2 orderings; greedy: 2 models x p = 4 only
    assert len(points) == 2 * 2 * 2 + 2
    assert {p["solver_options"].get("ordering") for p in points if p["solver"] == "dp"} == \
        {"generateseq", "min-fill"}
    assert all(p["solver_options"] == {} for p in points if p["solver"] == "greedy")
    assert not any(p["solver"] == "greedy" and p["devices"] == 8 for p in points)


def test_a_grid_without_a_solver_runs_auto():
    points = load_spec({"grid": {"model": ["alexnet"], "devices": [4, 8]}}).points()
    assert [p["solver"] for p in points] == ["auto", "auto"]


def test_cluster_and_memory_cap_apply_to_cost_models_that_take_them():
    spec = load_spec({"grid": {"model": ["gpt2"], "devices": [8], "solver": ["dp"],
                               "cost_model": ["paper", "alpha-beta"],
                               "cluster": ["dgx-a100", "h100-sxm"], "memory_cap": ["none"],
                               "model_options": {"gpt2": {"layers": [1, 2]}}}})
    points = spec.points()
    paper = [p for p in points if p["cost_model"] == "paper"]
    ab = [p for p in points if p["cost_model"] == "alpha-beta"]
    assert len(paper) == 2 and all(p["cluster"] is None for p in paper)
    assert len(ab) == 4 and {p["cluster"] for p in ab} == {"dgx-a100", "h100-sxm"}
    assert {p["model_options"]["layers"] for p in points} == {1, 2}


BAD_SPECS = {
    "unknown axis": ('[grid]\nmodel = ["alexnet"]\ndevices = [4]\nsolver = ["dp"]\nmodle = [1]\n',
                     "unknown grid axis 'modle'"),
    "unknown model": ('[grid]\nmodel = ["alexnett"]\ndevices = [4]\nsolver = ["dp"]\n',
                      "unknown model 'alexnett'"),
    "unknown solver": ('[grid]\nmodel = ["alexnet"]\ndevices = [4]\nsolver = ["dpp"]\n',
                       "unknown solver 'dpp'"),
    "unknown option": ('[grid]\nmodel = ["alexnet"]\ndevices = [4]\nsolver = ["dp"]\n'
                       '[grid.solver_options.dp]\nnope = [1]\n', "solver 'dp' has no option 'nope'"),
    "option of a solver not in the grid": (
        '[grid]\nmodel = ["alexnet"]\ndevices = [4]\nsolver = ["dp"]\n'
        '[grid.solver_options.greedy]\nimprove = [1]\n', "not on the solver axis"),
    "empty axis": ('[grid]\nmodel = ["alexnet"]\ndevices = []\nsolver = ["dp"]\n',
                   "grid axis 'devices' is empty"),
    "empty grid": ("[grid]\n", "no [grid]"),
    "no grid": ('[run]\ntime_limit = 5\n', "no [grid]"),
    "malformed TOML": ('[grid\nmodel = ["alexnet"\n', "is not valid TOML"),
    "unknown run key": ('[grid]\nmodel = ["alexnet"]\ndevices = [4]\nsolver = ["dp"]\n'
                        '[run]\ntimelimit = 5\n', "unknown [run] key 'timelimit'"),
    "bad memory limit": ('[grid]\nmodel = ["alexnet"]\ndevices = [4]\nsolver = ["dp"]\n'
                         '[run]\nmemory_limit = "lots"\n', "memory_limit"),
    "unknown exclude axis": ('[grid]\nmodel = ["alexnet"]\ndevices = [4]\nsolver = ["dp"]\n'
                             '[[exclude]]\nsolvr = "dp"\n', "unknown exclude axis 'solvr'"),
}


@pytest.mark.parametrize("case", sorted(BAD_SPECS))
def test_bad_specs_are_one_line_errors_exit_2(case, tmp_path, capsys):
    text, message = BAD_SPECS[case]
    spec = tmp_path / "bad.toml"
    spec.write_text(text)
    assert main(["sweep", str(spec), "--db", str(tmp_path / "r.sqlite"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("pase: error: ") and err.count("\n") == 1, err
    assert message in err
    assert not (tmp_path / "r.sqlite").exists()  # refused before any work


def test_a_missing_spec_file_is_a_one_line_error(tmp_path, capsys):
    assert main(["sweep", str(tmp_path / "none.toml"), "--quiet"]) == 2
    assert "cannot read sweep spec" in capsys.readouterr().err


def test_report_of_a_missing_store_is_a_one_line_error(tmp_path, capsys):
    assert main(["report", str(tmp_path / "none.sqlite"), "-o", str(tmp_path / "out")]) == 2
    assert "no sweep store" in capsys.readouterr().err


def test_the_example_spec_is_the_issue_grid():
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    spec = load_spec(root / "examples" / "sweep.toml")
    assert spec.run.time_limit == 60 and spec.run.memory_limit == 4 * 2**30
    assert spec.run.wall_limit == 2 * 60 + 10
    assert sorted((p["model"], p["devices"], p["solver"]) for p in spec.points()) == \
        sorted(itertools.product(GRID["model"], GRID["devices"], GRID["solver"]))
    assert len(load_spec(root / "examples" / "solvers.toml").points()) == 3 * 4 * 5


def test_the_command_shows_progress_and_a_summary(scheduler, tmp_path, capsys):
    spec = tmp_path / "two.toml"
    spec.write_text('[grid]\nmodel = ["alexnet"]\ndevices = [2, 4]\nsolver = ["dp"]\n')
    assert main(["sweep", str(spec), "--scheduler", scheduler]) == 0
    out, err = capsys.readouterr()
    assert out == f"2 runs in {tmp_path / 'two.sqlite'}: 2 optimal\n"
    assert "done 2, failed 0, running 0, remaining 0" in err and "2/2" in err
    assert main(["sweep", str(spec), "--scheduler", scheduler, "--quiet"]) == 0
    out, err = capsys.readouterr()
    assert out == f"2 runs in {tmp_path / 'two.sqlite'}: 2 optimal\n" and err == ""


def test_ratios_compare_runs_of_one_problem_only():
    import pandas as pd

    from pase.sweeps.report import problem_labels, with_ratios

    base = {"model": "gpt2", "devices": 8, "cluster": None, "memory_cap": None, "batch": None,
            "model_options": "{}", "cost_options": "{}", "solver_options": "{}"}
    frame = pd.DataFrame([
        {**base, "solver": "dp", "cost_model": "paper", "cost": 100.0},
        {**base, "solver": "greedy", "cost_model": "paper", "cost": 125.0},
        {**base, "solver": "dp", "cost_model": "alpha-beta", "cost": 2.0},
        {**base, "solver": "greedy", "cost_model": "alpha-beta", "cost": None}])
    ratios = with_ratios(frame)["ratio_to_best"].tolist()
    assert ratios[:3] == [1.0, 1.25, 1.0] and ratios[3] != ratios[3]  # NaN: no cost
    assert problem_labels(frame) == ["gpt2\np=8\npaper", "gpt2\np=8\npaper",
                                     "gpt2\np=8\nalpha-beta", "gpt2\np=8\nalpha-beta"]


def test_a_script_without_a_main_guard_gets_the_fix_in_one_line(tmp_path):
    """Dask starts local workers by re-importing the caller's script: one calling
    pase.sweep at top level ends with a line naming the guard, not multiprocessing's."""
    script = tmp_path / "unguarded.py"
    script.write_text("import pase\npase.sweep({'grid': {'model': ['chain'], 'devices': [2], "
                      f"'solver': ['dp']}}}}, db={str(tmp_path / 'x.sqlite')!r}, workers=1, quiet=True)\n")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("pase.errors.OptionError") and "__name__" in last, last


def test_a_cluster_without_a_memory_cap_takes_the_devices_own():
    """``memory_cap`` is optional: a spec that gives a cluster and no cap got a KeyError
    (smoke test, stop 49); each point's cap is then None, the cluster's device memory."""
    spec = load_spec({"grid": {"model": ["gpt2"], "devices": [8], "solver": ["dp", "greedy"],
                               "cost_model": ["calibrated"], "cluster": ["dgx-a100"],
                               "model_options": {"gpt2": {"layers": [2]}}}})
    points = spec.points()
    assert [(p["solver"], p["cluster"], p["memory_cap"]) for p in points] == \
        [("dp", "dgx-a100", None), ("greedy", "dgx-a100", None)]

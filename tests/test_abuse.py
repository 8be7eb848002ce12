"""The command under abuse: each reproduction is one row (argv, exit status, what must show).

The rule: bad input is exit 2 and ONE line on stderr (``pase: error: ...``; a
usage error may add one line pointing at ``--help``), never a traceback; an
internal error (a bug) is exit 1 and one line naming the exception; correct
answers are checked on their output. ``{tmp}`` in an argv is a folder of
fixture files (broken graphs, strategies, a file, a folder).
"""
from __future__ import annotations

import json
import re
import shlex
import sys
from dataclasses import dataclass
from importlib.metadata import EntryPoint
from pathlib import Path
from typing import Any, Callable

import pytest

import pase.registry as registry
from pase.builder import GraphBuilder
from pase.cli import main
from pase.registry import MODELS

USAGE_LINE = re.compile(r"^see `pase( [a-z-]+)? --help`$")


@dataclass
class Row:
    id: str
    argv: str
    code: int
    stderr: str | None = None  # regex the one stderr line must match (after "pase: error: ")
    check: Callable[[str], Any] | None = None  # for answers: a check of stdout
    plugins: bool = False  # install the fake broken plug-ins first
    marks: tuple = ()


def strict_json(text: str) -> Any:
    def refuse(name: str) -> Any:
        raise AssertionError(f"JSON output holds {name}")

    return json.loads(text, parse_constant=refuse)


def infeasible_solve(out: str) -> None:
    data = strict_json(out)
    assert data["status"] == "infeasible" and data["total_cost"] is None
    assert data["lower_bound"] is None and data["strategy"] == {}


def infeasible_compare(out: str) -> None:
    rows = strict_json(out)["rows"]
    assert [r["status"] for r in rows] == ["infeasible", "infeasible"]
    assert all(r["total_cost"] is None and r["ratio_to_best"] is None for r in rows)


def over_the_cap(out: str) -> None:
    data = strict_json(out)
    assert data["memory_cap_bytes"] == 2**30  # --memory-cap 1GiB
    assert data["memory_bytes"] > data["memory_cap_bytes"] and data["fits_memory_cap"] is False


def optimal(out: str) -> None:
    assert strict_json(out)["status"] == "optimal"


def lists_broken(*names: str) -> Callable[[str], None]:
    def check(out: str) -> None:
        rows = {r["name"]: r for r in strict_json(out)}
        for name in names:
            assert rows[name]["status"] == "broken" and rows[name]["error"], rows[name]
        assert any(r["status"] == "ok" for r in rows.values())

    return check


SOLVE = "solve chain -p 4"
AB = "--cost-model alpha-beta --cluster dgx-a100"
SIM = "simulate alexnet -p 8 --cluster gtx1080ti"

ROWS = [
    # -- solver options, validated by the solver's annotations -----------------------
    Row("float-option-text", f"{SOLVE} --option memory_budget=lots", 2,
        r"solver 'auto' option memory_budget expects a number of bytes \(e\.g\. 1e9 or 1GiB\), got 'lots'$"),
    Row("byte-size-option", f"{SOLVE} --option memory_budget=1GiB --format json", 0, check=optimal),
    Row("byte-size-reaches-dp", f"{SOLVE} --option memory_budget=1", 2, r"budget"),
    Row("float-option-infinite", f"{SOLVE} --option memory_budget=1e400", 2, r"must be a finite number"),
    Row("int-option-text", f"{SOLVE} --solver greedy --option improve=abc", 2,
        r"solver 'greedy' option improve expects an integer, got 'abc'$"),
    Row("int-option-fraction", f"{SOLVE} --solver greedy --option improve=1.5", 2,
        r"option improve expects an integer, got '1\.5'"),
    Row("int-option-integral-float", f"{SOLVE} --solver greedy --option improve=2e0 --format json", 0,
        check=lambda out: strict_json(out)["status"] == "feasible"),
    Row("iterations-text", f"{SOLVE} --solver mcmc --option iterations=abc", 2,
        r"option iterations expects an integer"),
    Row("mcmc-start-text", f"{SOLVE} --solver mcmc --option start=nope", 2,
        r"^start: a choice is a list of 4 candidate indices, one per vertex; got str 'nope'$"),
    Row("mcmc-start-object", f"{SOLVE} --solver mcmc --option start={{}}", 2,
        r"^start: a choice is a list of 4 candidate indices.*got dict \{\}$"),
    Row("mcmc-start-huge", f"{SOLVE} --solver mcmc --option start=[1e30,0,0,0]", 2,
        r"^start: choice 10+\d* for vertex 0 \(\w+\) is outside 0\.\.\d+$"),
    Row("mcmc-start-fraction", f"{SOLVE} --solver mcmc --option start=[0.5,0,0,0]", 2,
        r"^start: choice for vertex 0 \(\w+\) must be an integer index, got 0\.5$"),
    Row("mcmc-start-bool", f"{SOLVE} --solver mcmc --option start=[true,0,0,0]", 2,
        r"^start: choice for vertex 0 \(\w+\) must be an integer index, got True$"),
    Row("mcmc-start-length", f"{SOLVE} --solver mcmc --option start=[0,0,0,0,0]", 2,
        r"^start: a choice needs one index per vertex \(4\), got 5$"),
    Row("cpsat-too-many-workers", f"{SOLVE} --solver ilp-cpsat --option num_workers=100000", 2,
        r"^num_workers must be in 1\.\.10000 \(CP-SAT's limit\), got 100000$"),
    Row("threads-text", f"{SOLVE} --solver ilp-highs --option threads=abc", 2,
        r"option threads expects an integer or none, got 'abc'"),
    Row("bool-option-text", f"{SOLVE} --solver ilp-highs --option warm_start=maybe", 2,
        r"option warm_start expects true or false"),
    Row("unknown-option", f"{SOLVE} --option bogus=1", 2,
        r"solver 'auto' has no option 'bogus'; allowed: method, ordering, memory_budget, max_states, "
        r"prune, blocks, relaxed_entries, steps, rounds, gap$"),
    Row("option-without-value", f"{SOLVE} --option ordering", 2, r"--option expects KEY=VALUE"),
    Row("export-unknown-engine", "export mlp -p 8 --strategy {tmp}/mlp.json --engine tensorflow", 2,
        r"^unknown engine 'tensorflow'; allowed: jax, torch, megatron, torchtitan$"),
    Row("verify-torch-engine", "verify mlp -p 8 --strategy {tmp}/mlp.json --engine torch", 2,
        r"^unknown engine 'torch'; allowed: jax$"),
    Row("import-missing-file", "import /nonexistent.py:make", 2, r"^no such file: /nonexistent\.py$"),
    Row("solve-missing-reference", "solve /nonexistent.py:make -p 8", 2, r"^no such file: /nonexistent\.py$"),
    Row("sweep-missing-spec", "sweep /nonexistent.toml", 2, r"^cannot read sweep spec /nonexistent\.toml"),
    Row("sweep-no-grid", "sweep {tmp}/mlp.json", 2, r"sweep spec"),
    Row("replan-missing-from", "replan mlp --from /nonexistent.json -p 4", 2,
        r"^cannot read strategy file /nonexistent\.json"),
    Row("replan-unknown-cluster", "replan mlp --from {tmp}/mlp.json --from-devices 8 --cluster nosuch -p 4",
        2, r"^unknown cluster 'nosuch'; presets: .*mixed-a100-v100"),
    Row("replan-other-model", "replan alexnet --from {tmp}/mlp.json --from-devices 8 -p 4", 2,
        r"^--from strategy names op 'fc1', which model 'alexnet' does not have"),
    Row("view-other-model", "view alexnet -p 8 --strategy {tmp}/mlp.json -o {tmp}/v.html", 2,
        r"^the strategy is not for graph 'alexnet': it names op 'fc1'"),
    Row("view-missing-strategy", "view mlp -p 8 --strategy /nonexistent.json -o {tmp}/v.html", 2,
        r"^cannot read strategy file /nonexistent\.json: No such file or directory$"),
    Row("view-unwritable-output", "view mlp -p 8 --strategy {tmp}/mlp.json -o /nonexistent/v.html", 2,
        r"^-o /nonexistent/v\.html: folder /nonexistent does not exist$"),
    Row("view-output-is-folder", "view mlp -p 8 --strategy {tmp}/mlp.json -o {tmp}", 2,
        r"is a folder; give a file name$"),
    Row("replan-no-old-devices", "replan mlp --from {tmp}/mlp.json -p 4", 2, r"--from-devices P"),
    Row("replan-invalid-old-layout", "replan mlp --from {tmp}/mlp.json --from-devices 4 -p 8", 2,
        r"^--from strategy is not valid on its own 4 devices: strategy splits op 'fc1' 8 ways"),
    Row("replan-no-new-setting", "replan mlp --from {tmp}/mlp.json --from-devices 8", 2,
        r"^give the new device count or the new cluster \(-p NEW or --cluster NEW\)$"),
    Row("replan-unknown-device-type", "replan mlp --from {tmp}/mlp.json --from-devices 8 "
        "--cluster dgx-a100x2+tpu-v9x2", 2, r"^unknown cluster 'tpu-v9x2'"),
    Row("replan-negative-steps", "replan mlp --from {tmp}/mlp.json --from-devices 8 -p 4 --steps -1", 2,
        r"argument --steps: must be a finite number >= 0, got '-1'"),
    Row("replan-too-many-survivors", "replan mlp --from {tmp}/mlp.json --from-devices 8 -p 4 --survivors 5",
        2, r"^survivors must be at most min\(old devices, new devices\) = 4, got 5$"),
    Row("replan-zero-option", "replan mlp --from {tmp}/mlp.json --from-devices 8 -p 4 --cost-option zero=3",
        2, r"^replan does not model zero=3"),
    Row("replan-shrink", "replan mlp --from {tmp}/mlp.json --from-devices 8 -p 4 --format json", 0,
        check=optimal),
    Row("solve-pipeline-paper-model", "solve chain -p 4 --pipeline --cost-model paper", 2,
        r"^--pipeline prices steps in seconds with the calibrated \(default\) or alpha-beta model"),
    Row("microbatches-without-pipeline", "solve chain -p 4 --microbatches 4", 2,
        r"^--microbatches applies only with --pipeline$"),
    Row("solve-zero-unknown", "solve chain -p 4 --cost-model alpha-beta --cost-option zero=7", 2,
        r"zero.*allowed: 0, 1, 2, 3, auto"),
    Row("report-missing-store", "report /nonexistent.sqlite", 2, r"^no sweep store at /nonexistent\.sqlite$"),
    Row("export-missing-strategy", "export mlp -p 8 --strategy /nonexistent.json --engine jax", 2,
        r"^cannot read strategy file /nonexistent\.json"),
    Row("verify-zero-devices", "verify mlp -p 0 --strategy {tmp}/mlp.json --engine jax", 2,
        r"-p/--devices: must be an integer >= 1, got '0'"),
    Row("verify-bad-format", "verify mlp -p 8 --strategy {tmp}/mlp.json --engine jax --format xml", 2,
        r"--format: invalid choice: 'xml'"),
    Row("option-time-limit", f"{SOLVE} --option time_limit=5", 2,
        r"^--option time_limit: use --time-limit$"),
    Row("option-seed", f"{SOLVE} --option seed=5", 2, r"^--option seed: use --seed$"),
    Row("option-solver", f"{SOLVE} --option solver=x", 2, r"^--option solver: use --solver$"),
    Row("option-problem", f"{SOLVE} --option problem=1", 2,
        r"^--option problem: the Problem is built from the model and its flags$"),
    Row("option-twice", f"{SOLVE} --option ordering=bfs --option ordering=min-fill", 2,
        r"--option ordering is given twice"),
    Row("negative-seed", f"{SOLVE} --seed -1", 2, r"argument --seed: a seed must be an integer >= 0"),
    Row("seed-text", f"{SOLVE} --seed one", 2, r"argument --seed: expected an integer"),
    Row("cost-option-text", f"{SOLVE} --cost-option tflops=abc", 2,
        r"cost model 'paper' option tflops expects a number"),
    Row("cost-option-unknown", f"{SOLVE} --cost-option nope=1", 2,
        r"cost model 'paper' has no option 'nope'; allowed: tflops, bandwidth"),
    Row("model-option-text", "inspect random -p 4 --model-option size=abc", 2,
        r"model 'random' option size expects an integer"),
    Row("model-option-on-a-file", "inspect {tmp}/two-layer.json -p 2 --model-option size=3", 2,
        r"apply only to registered models"),
    Row("batch-twice", "inspect random -p 4 --batch 8 --model-option batch=8", 2, r"batch given twice"),
    # -- output paths, checked before the work ----------------------------------------
    Row("output-missing-folder", f"{SOLVE} --output {{tmp}}/missing/out.json", 2,
        r"--output .*/missing/out\.json: folder .*/missing does not exist"),
    Row("output-is-a-folder", f"{SOLVE} --output {{tmp}}/folder", 2, r"--output .*/folder is a folder"),
    Row("output-checked-first", f"{SOLVE} --solver exhaustive --option max_strategies=1 "
        f"--output {{tmp}}/missing/out.json", 2, r"^--output"),
    Row("evaluate-output-folder", "evaluate alexnet -p 8 --strategy {tmp}/alexnet.json --output {tmp}", 2,
        r"is a folder"),
    Row("compare-plot-missing-folder", "compare chain -p 4 --solvers dp --plot {tmp}/missing/x.png", 2,
        r"--plot .*: folder .* does not exist"),
    Row("compare-plot-bad-type", "compare chain -p 4 --solvers dp --plot {tmp}/x.xyz", 2,
        r"cannot draw a \.xyz file"),
    Row("simulate-plot-missing-folder", f"{SIM} --plot {{tmp}}/missing/x.png", 2,
        r"--plot .*: folder .* does not exist"),
    Row("reproduce-out-is-a-file", "reproduce pase-ipdps2021 --quick --out {tmp}/a-file", 2,
        r"--out .*/a-file is a file, not a folder"),
    Row("reproduce-out-under-a-file", "reproduce pase-ipdps2021 --quick --out {tmp}/a-file/sub", 2,
        r"a-file is a file, so the folder cannot be created"),
    # -- JSON never holds Infinity or NaN ------------------------------------------------
    Row("infeasible-json", f"{SOLVE} {AB} --memory-cap 1KiB --format json", 0, check=infeasible_solve),
    Row("infeasible-compare-json", f"compare chain -p 4 {AB} --memory-cap 1KiB --solvers dp,greedy "
        f"--format json", 0, check=infeasible_compare),
    # -- argparse errors: one line, then a pointer to --help ------------------------------
    Row("missing-devices", "solve chain", 2, r"the following arguments are required: -p/--devices"),
    Row("devices-text", "solve chain -p zero", 2, r"argument -p/--devices: expected an integer"),
    Row("devices-zero", "solve chain -p 0", 2, r"argument -p/--devices: must be an integer >= 1"),
    Row("unknown-command", "frobnicate", 2, r"argument COMMAND: invalid choice: 'frobnicate'"),
    Row("no-command", "", 2, r"a command is required"),
    Row("bad-format", f"{SOLVE} --format xml", 2, r"argument --format: invalid choice: 'xml'"),
    Row("unknown-flag", f"{SOLVE} --bogus", 2, r"unrecognized arguments: --bogus"),
    Row("compare-has-no-output", "compare chain -p 4 --output x.json", 2, r"unrecognized arguments"),
    # -- flags that would be ignored are refused --------------------------------------------
    Row("simulate-strategy-and-solver", f"{SIM} --strategy {{tmp}}/alexnet.json --solver greedy", 2,
        r"--solver steers the solver, which --strategy replaces"),
    Row("simulate-strategy-and-cost-model", f"{SIM} --strategy {{tmp}}/alexnet.json --cost-model paper",
        2, r"--cost-model steers the solver"),
    Row("simulate-strategy-and-seed", f"{SIM} --strategy {{tmp}}/alexnet.json --seed 3", 2,
        r"--seed steers the solver"),
    Row("simulate-timeline-in-a-table", f"{SIM} --timeline", 2, r"--timeline .* needs --format json"),
    Row("dry-run-and-output", f"{SOLVE} --dry-run --output {{tmp}}/dry.json", 2,
        r"--output does not apply to --dry-run"),
    Row("dry-run-and-time-limit", f"{SOLVE} --dry-run --time-limit 5", 2,
        r"--time-limit does not apply to --dry-run"),
    Row("dry-run-and-solver", f"{SOLVE} --dry-run --solver greedy", 2,
        r"--dry-run predicts the work of auto and the dp; it does not apply to --solver greedy"),
    Row("dry-run-and-ordering", f"{SOLVE} --dry-run --option ordering=bfs", 2,
        r"--option ordering does not apply to --dry-run"),
    Row("dry-run-cap-without-memory", f"{SOLVE} --dry-run --memory-cap 1GiB", 2,
        r"cost model 'paper' has no memory model, so a memory cap cannot apply"),
    Row("dry-run-unknown-cost-model", f"{SOLVE} --dry-run --cost-model nope", 2,
        r"unknown cost model 'nope'; known: alpha-beta, calibrated, paper"),
    Row("dry-run-budget", f"{SOLVE} --dry-run --option memory_budget=1 --format json", 0,
        check=lambda out: not any(r["within_memory_budget"] for r in strict_json(out)["orderings"])),
    Row("compare-negative-time-limit", "compare chain -p 4 --solvers dp --time-limit -3", 2,
        r"argument --time-limit: a time limit must be > 0 seconds, got '-3'"),
    Row("zero-time-limit", f"{SOLVE} --time-limit 0", 2, r"a time limit must be > 0 seconds"),
    Row("infinite-time-limit", f"{SOLVE} --time-limit inf", 2, r"must be a finite number"),
    Row("nan-time-limit", f"{SOLVE} --time-limit nan", 2, r"must be a finite number"),
    Row("memory-cap-1e400", f"{SOLVE} {AB} --memory-cap 1e400", 2,
        r"argument --memory-cap: a memory size must be finite, got '1e400'"),
    Row("memory-cap-text", f"{SOLVE} {AB} --memory-cap lots", 2, r"cannot read 'lots' as a memory size"),
    Row("memory-cap-negative", f"{SOLVE} {AB} --memory-cap=-5GiB", 2,
        r"argument --memory-cap: a memory size must be positive, got '-5GiB'"),
    Row("memory-cap-read-as-a-flag", f"{SOLVE} {AB} --memory-cap -5GiB", 2,
        r"argument --memory-cap: expected one argument \(a value that starts with '-' is "
        r"written --memory-cap=VALUE\)"),
    Row("memory-cap-missing", f"{SOLVE} {AB} --memory-cap", 2,
        r"argument --memory-cap: expected one argument$"),
    Row("build-budget-refuses", f"{SOLVE} --build-budget 1", 2, r"over the 1 B build budget"),
    Row("build-budget-none", f"{SOLVE} --build-budget none", 2, r"argument --build-budget: cannot read"),
    Row("build-budget-and-dry-run", f"{SOLVE} --dry-run --build-budget 1GiB", 2,
        r"--build-budget does not apply to --dry-run"),
    Row("memory-cap-without-memory-model", f"{SOLVE} --memory-cap 16GiB", 2, r"has no memory model"),
    Row("tflops-with-alpha-beta", f"{SOLVE} {AB} --tflops 5", 2,
        r"--tflops does not apply to cost model 'alpha-beta' .*; it applies to paper"),
    Row("bandwidth-with-alpha-beta", f"{SOLVE} {AB} --bandwidth 5", 2, r"--bandwidth does not apply"),
    Row("cluster-with-paper", f"{SOLVE} --cost-model paper --cluster dgx-a100", 2,
        r"--cluster does not apply to cost model 'paper' .*; it applies to alpha-beta"),
    Row("tflops-twice", f"{SOLVE} --tflops 5 --cost-option tflops=6", 2,
        r"--tflops and --cost-option tflops=\.\.\. are both given"),
    Row("cluster-twice", f"{SOLVE} {AB} --cost-option cluster=gtx1080ti", 2,
        r"--cluster and --cost-option cluster=\.\.\. are both given"),
    Row("compare-solver-twice", "compare chain -p 4 --solvers dp,dp", 2, r"--solvers names 'dp' twice"),
    Row("compare-no-solver", "compare chain -p 4 --solvers ,", 2, r"--solvers needs at least one"),
    Row("batch-on-a-file", "inspect {tmp}/two-layer.json -p 2 --batch 8", 2,
        r"apply only to registered models"),
    # -- evaluate honours --memory-cap ---------------------------------------------------------
    Row("evaluate-memory-cap", "evaluate alexnet -p 8 --strategy {tmp}/alexnet.json --cost-model "
        "alpha-beta --cluster gtx1080ti --memory-cap 1GiB --format json", 0, check=over_the_cap),
    Row("evaluate-memory-cap-table", "evaluate alexnet -p 8 --strategy {tmp}/alexnet.json --cost-model "
        "alpha-beta --cluster gtx1080ti --memory-cap 1GiB", 0,
        check=lambda out: re.search(r"memory per device: [0-9.]+ GiB \(OVER the cap of 1\.000 GiB\)", out)),
    # -- broken files -----------------------------------------------------------------------
    Row("graph-not-utf8", "inspect {tmp}/not-utf8.json -p 2", 2, r"not UTF-8"),
    Row("graph-deeply-nested", "inspect {tmp}/nested.json -p 2", 2, r"nests .* too deeply"),
    Row("graph-pw-text", "solve {tmp}/pw-text.json -p 2", 2, r"op 'fc2' .*'pw' is 'abc'"),
    Row("graph-einsum-without-eq", "solve {tmp}/einsum-no-eq.json -p 2", 2, r"op 'mix' .*'eq'"),
    Row("graph-softmax-axis-7", "solve {tmp}/softmax-axis-7.json -p 2", 2, r"op 'sm' .*'axis' is 7"),
    Row("graph-no-ops-solve", "solve {tmp}/no-ops.json -p 2", 2, r"no ops"),
    Row("graph-no-ops-inspect", "inspect {tmp}/no-ops.json -p 2", 2, r"no ops"),
    Row("graph-file-missing", "inspect {tmp}/absent.json -p 2", 2, r"cannot read graph file"),
    Row("strategy-not-utf8", "evaluate alexnet -p 8 --strategy {tmp}/not-utf8.json", 2,
        r"strategy file .* is not UTF-8"),
    Row("strategy-deeply-nested", "evaluate alexnet -p 8 --strategy {tmp}/nested.json", 2,
        r"strategy file .* nests too deeply"),
    Row("strategy-not-an-object", "evaluate alexnet -p 8 --strategy {tmp}/a-list.json", 2,
        r"a strategy must map op names to \{dim: factor\} objects, got list"),
    # -- plug-ins: a broken one is listed and refused; the rest keeps working ---------------------
    Row("broken-solver-listed", "solvers --format json", 0, plugins=True,
        check=lists_broken("missing-module", "zero-division", "not-callable")),
    Row("broken-solver-listed-table", "solvers", 0, plugins=True,
        check=lambda out: re.search(r"zero-division .*broken .*ZeroDivisionError", out)),
    Row("broken-cost-model-listed", "cost-models --format json", 0, plugins=True,
        check=lists_broken("not-a-cost-model")),
    Row("broken-model-listed", "models --format json", 0, plugins=True, check=lists_broken("bad-graph")),
    Row("dp-with-a-broken-plug-in", f"{SOLVE} --format json", 0, plugins=True, check=optimal),
    Row("broken-solver-asked-for", f"{SOLVE} --solver zero-division", 2, plugins=True,
        stderr=r"solver plug-in 'zero-division' \(pase_abuse_plugin:solve\) failed to load: "
               r"ZeroDivisionError: division by zero$"),
    Row("missing-solver-module", f"{SOLVE} --solver missing-module", 2, plugins=True,
        stderr=r"'missing-module' .* failed to load: ModuleNotFoundError"),
    Row("broken-cost-model-asked-for", f"{SOLVE} --cost-model not-a-cost-model", 2, plugins=True,
        stderr=r"cost model plug-in 'not-a-cost-model' .* not a subclass of pase\.costing\.CostModel"),
    Row("broken-model-asked-for", "inspect bad-graph -p 2", 2, plugins=True,
        stderr=r"model plug-in 'bad-graph' .* failed to load"),
    Row("crashing-solver", f"{SOLVE} --solver crashes", 1, plugins=True,
        stderr=r"internal error: ZeroDivisionError: boom; rerun with --debug for the traceback$"),
    Row("crashing-solver-in-compare", "compare chain -p 4 --solvers crashes,dp --format json", 0,
        plugins=True, check=lambda out: [r["status"] for r in strict_json(out)["rows"]] == ["error", "optimal"]),
    # -- big inputs answer in seconds -----------------------------------------------------------
    Row("inspect-p65536", "inspect transformer -p 65536 --format json", 0,
        check=lambda out: strict_json(out)["vertices"] == 204, marks=(pytest.mark.slow,)),
    Row("dry-run-10000-ops", "solve random -p 8 --model-option size=10000 --dry-run --format json", 0,
        check=lambda out: strict_json(out)["vertices"] == 10_000, marks=(pytest.mark.slow,)),
]


@pytest.fixture(scope="module")
def tmp(tmp_path_factory) -> Path:
    """The fixture files the rows name."""
    d = tmp_path_factory.mktemp("abuse")
    (d / "folder").mkdir()
    (d / "a-file").write_text("not a folder\n")
    (d / "not-utf8.json").write_bytes(b'{"schema": "pase.graph", "version": 1, "name": "\xff\xfe"}')
    (d / "nested.json").write_text("[" * 100_000 + "]" * 100_000)
    (d / "a-list.json").write_text("[1, 2]")
    (d / "alexnet.json").write_text(json.dumps({"conv1": {"b": 8}}))
    (d / "mlp.json").write_text(json.dumps({"fc1": {"n": 8}}))
    (d / "no-ops.json").write_text(json.dumps({"schema": "pase.graph", "version": 1,
                                               "name": "empty", "ops": []}))
    two = _small_graph()
    (d / "two-layer.json").write_text(json.dumps(two))
    _write_damaged(d / "pw-text.json", MODELS.get("chain")().to_dict(), "fc2", "pw", "abc")
    _write_damaged(d / "einsum-no-eq.json", two, "mix", "eq", None)
    _write_damaged(d / "softmax-axis-7.json", two, "sm", "axis", 7)
    return d


def _small_graph() -> dict:
    b = GraphBuilder("small", cutoff=1, batch=8)
    x = b.fc(b.input((8, 16), names=("b", "k")), 16, name="fc1")
    y = b.einsum("bk,bk->bk", x, b.fc(x, 16, name="fc2"), name="mix")
    b.softmax(y, axis=1, name="sm")
    return b.build().to_dict()


def _write_damaged(path: Path, graph: dict, op_name: str, attr: str, value: Any) -> None:
    data = json.loads(json.dumps(graph))
    op = next(o for o in data["ops"] if o["name"] == op_name)
    if value is None:
        del op["attrs"][attr]
    else:
        op["attrs"][attr] = value
    path.write_text(json.dumps(data))


def install_broken_plugins(monkeypatch, folder: Path) -> None:
    """Entry points as a third-party package would declare them, most of them broken."""
    (folder / "pase_abuse_plugin.py").write_text("1 / 0\ndef solve(problem, **kw):\n    pass\n")
    (folder / "pase_abuse_crash.py").write_text(
        "def solve(problem, *, time_limit=None, seed=None):\n    raise ZeroDivisionError('boom')\n")
    monkeypatch.syspath_prepend(str(folder))
    for module in ("pase_abuse_plugin", "pase_abuse_crash"):
        monkeypatch.delitem(sys.modules, module, raising=False)
    points = {
        "pase.solvers": [EntryPoint("missing-module", "pase_no_such_module:solve", "pase.solvers"),
                         EntryPoint("zero-division", "pase_abuse_plugin:solve", "pase.solvers"),
                         EntryPoint("not-callable", "math:pi", "pase.solvers"),
                         EntryPoint("crashes", "pase_abuse_crash:solve", "pase.solvers")],
        "pase.cost_models": [EntryPoint("not-a-cost-model", "math:sqrt", "pase.cost_models")],
        "pase.graphs": [EntryPoint("bad-graph", "pase_no_such_graphs:build", "pase.graphs")],
    }
    monkeypatch.setattr(registry, "entry_points", lambda group: points.get(group, []))
    for reg in (registry.SOLVERS, registry.COST_MODELS, registry.MODELS):
        reg.names()  # built-ins in, then start over with the fake entry points
        monkeypatch.setattr(reg, "_entries", dict(reg._entries))
        monkeypatch.setattr(reg, "_broken", {})
        monkeypatch.setattr(reg, "_loaded", False)


@pytest.mark.parametrize("row", [pytest.param(r, id=r.id, marks=r.marks) for r in ROWS])
def test_abuse(row: Row, tmp: Path, capsys, monkeypatch, tmp_path) -> None:
    if row.plugins:
        install_broken_plugins(monkeypatch, tmp_path)
    code = main(shlex.split(row.argv.replace("{tmp}", str(tmp))))
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    assert code == row.code, (code, err)
    if row.code == 0:
        assert err.strip() == "" or "error" not in err, err
        assert row.check is not None and row.check(out) is not False, out
        return
    lines = err.splitlines()
    assert 1 <= len(lines) <= 2, err
    assert lines[0].startswith("pase: error: "), err
    assert re.search(row.stderr, lines[0][len("pase: error: "):]), lines[0]
    if len(lines) == 2:
        assert USAGE_LINE.match(lines[1]), err


def test_debug_shows_the_traceback_of_an_internal_error(capsys, monkeypatch, tmp_path):
    install_broken_plugins(monkeypatch, tmp_path)
    code = main(["--debug", "solve", "chain", "-p", "4", "--solver", "crashes"])
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" in err and "pase_abuse_crash.py" in err
    assert err.splitlines()[-1] == "pase: error: internal error: ZeroDivisionError: boom"


def test_interrupt_is_130_and_one_line(capsys, monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("pase.api.run_solver", interrupted)
    assert main(["solve", "chain", "-p", "4"]) == 130
    assert capsys.readouterr().err == "pase: interrupted\n"


def test_every_command_has_a_row():
    """Each command appears in at least one abuse row, so a new one is not forgotten."""
    covered = {r.argv.split()[0] for r in ROWS if r.argv}
    from pase.cli.parser import build

    parser = build({})
    commands = set(parser._subparsers._group_actions[0].choices)
    assert commands - covered <= {"clusters"}, commands - covered

"""Table I: search time per model and device count, next to the paper's.

For each (model, p) of the grid: the dp solver's time with the paper's
ordering (``generateseq``), with ``auto`` (the ordering with the fewest
predicted table entries) and with the breadth-first ablation (``bfs``, reported
as OOM with the predicted need when its tables exceed the dp's memory budget, as
the paper's BF column does); then the ILP backends and mcmc under a time limit.
Every solve is a run of the sweep engine (:mod:`.runs`): its own process,
killed at the hard cap.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from pase.api import build_problem
from pase.papers.pase_ipdps2021.report import (
    gib,
    md_table,
    seconds,
    write_json,
    write_text,
)
from pase.papers.pase_ipdps2021.runs import Runs, result
from pase.papers.pase_ipdps2021.settings import (
    ILP_SOLVERS,
    PAPER_TABLE1,
    PAPER_TABLE1_RANGES,
    TITLES,
    Settings,
    machine_line,
)
from pase.solvers import dp as dp_solver

ORDERINGS = ("generateseq", "auto", "bfs")


def run(settings: Settings, progress: Callable[[str], Any], runs: Runs) -> list[dict[str, Any]]:
    """One row per (model, p): dp timings per ordering, ILP and mcmc results.

    Two sweeps: the dp under each ordering (best of ``repeats`` solves, no time
    limit; an ordering whose predicted tables exceed the dp's memory budget is not
    run, the paper's OOM), then the ILP backends and mcmc under
    the time limit, killed at the hard cap, ILPs left out above ``ilp_max_pairs``.
    """
    grid = [(m, p) for m in settings.table1_models for p in settings.table1_devices]
    rows = {}
    for model, p in grid:
        progress(f"table I: {model} p={p}: plans")
        rows[model, p] = _plans(model, p)
    progress(f"table I: dp, {len(grid) * len(ORDERINGS)} runs")
    dp_rows = runs.sweep({
        "grid": {"model": list(settings.table1_models), "devices": list(settings.table1_devices),
                 "solver": ["dp"], "solver_options": {"dp": {"ordering": list(ORDERINGS)}}},
        "run": {"repeats": settings.repeats},
        "exclude": [{"model": m, "devices": p, "solver_options": {"dp": {"ordering": o}}}
                    for (m, p), row in rows.items() for o, e in row["dp"].items() if e.get("oom")]})
    for r in dp_rows:
        entry = rows[r["model"], r["devices"]]["dp"][r["solver_options"]["ordering"]]
        if not entry.get("oom"):
            entry.update(seconds=r["solve_seconds"], cost=r["cost"])
    too_large = [{"model": m, "devices": p, "solver": list(ILP_SOLVERS)} for m, p in grid
                 if rows[m, p]["pair_columns"] > settings.ilp_max_pairs]
    solvers = list(ILP_SOLVERS) + ["mcmc"]
    progress(f"table I: {', '.join(solvers)} (limit {settings.time_limit:g} s, killed at "
             f"{settings.hard_timeout:g} s)")
    other_rows = runs.sweep({
        "grid": {"model": list(settings.table1_models), "devices": list(settings.table1_devices),
                 "solver": solvers},
        "run": {"time_limit": settings.time_limit, "kill_after": settings.hard_timeout,
                "seed": settings.seed},
        "exclude": too_large})
    done = {(r["model"], r["devices"], r["solver"]): r for r in other_rows}
    for (model, p), row in rows.items():
        row["dp_cost"] = row["dp"]["generateseq"].get("cost")
        others: dict[str, Any] = {}
        for solver in solvers:
            r = done.get((model, p, solver))
            if r is None:
                others[solver] = {"status": "skipped",
                                  "note": f"{row['pair_columns']:,} edge pair columns > "
                                          f"{settings.ilp_max_pairs:,} (memory)"}
            elif solver == "mcmc":
                others[solver] = {"status": r["status"], "cost": r["cost"],
                                  "solve_seconds": r["solve_seconds"],
                                  "iterations": r["stats"].get("iterations"),
                                  "stop": r["stats"].get("stop")}
            else:
                others[solver] = result(r, peak=True)
        for res in others.values():
            if res.get("cost") is not None and row["dp_cost"]:
                res["cost_ratio"] = res["cost"] / row["dp_cost"]
        row["solvers"] = others
    return [rows[key] for key in grid]


def _plans(model: str, p: int) -> dict[str, Any]:
    """The row's Problem facts and the dp's predicted plan per ordering (no solve)."""
    built = build_problem(model, p)
    problem = built.problem
    row: dict[str, Any] = {
        "model": model, "devices": p, "build_seconds": built.seconds,
        "vertices": problem.num_vertices, "configs": int(sum(int(k) for k in problem.sizes)),
        "pair_columns": int(sum(m.size for m in problem.edge_costs)),
        "paper_seconds": PAPER_TABLE1.get(model, {}).get(p),
        "paper_range": PAPER_TABLE1_RANGES.get(model)}
    dp_runs: dict[str, Any] = {}
    for ordering in ORDERINGS:
        plan = dp_solver.plan(problem, ordering)
        entry: dict[str, Any] = {"ordering": plan.ordering,
                                 "max_dependent_set": plan.max_dependent_set,
                                 "table_entries": plan.table_entries,
                                 "peak_bytes": plan.peak_bytes}
        if plan.peak_bytes > dp_solver.DEFAULT_MEMORY_BUDGET:
            entry["oom"] = True
        dp_runs[ordering] = entry
    row["dp"] = dp_runs
    return row


# -- output --------------------------------------------------------------------------

def write(rows: list[dict[str, Any]], settings: Settings, info: dict[str, Any], elapsed: float,
          out_dir: Path) -> dict[str, Path]:
    data = {"title": "Table I: search time", "quick": settings.quick, "machine": info,
            "settings": settings.to_dict(), "elapsed_seconds": elapsed, "rows": rows}
    json_path = write_json(out_dir / "table1.json", data)
    md_path = write_text(out_dir / "table1.md", markdown(rows, settings, info, elapsed))
    return {"table1.md": md_path, "table1.json": json_path}


def markdown(rows: list[dict[str, Any]], settings: Settings, info: dict[str, Any],
             elapsed: float) -> str:
    quick = " (QUICK RUN: reduced grid and limits)" if settings.quick else ""
    out = [f"# Table I: search time{quick}", "",
           f"Machine: {machine_line(info)}. Generated by `pase reproduce pase-ipdps2021"
           f"{' --quick' if settings.quick else ''}` in {elapsed:.0f} s.", "",
           "## The dp solver against the paper", "",
           f"dp solve time in seconds (best of {settings.repeats}; building the Problem is the "
           "`build s` column), paper cost model, default machine, batch 128. The paper's "
           "figures are the reference prototype on a Sandy Bridge Xeon (its Table I); "
           "AlexNet and RNNLM are given there only as ranges over p, ResNet-101 not at all. "
           "`bfs` is the breadth-first ablation: OOM with the memory its tables would need "
           f"when over the dp's {gib(dp_solver.DEFAULT_MEMORY_BUDGET)} budget. `max dep. set` "
           "is the largest dependent set under generateseq (the exponent M of the paper's "
           "O(|V|^2 K^(M+1)) bound), `table entries` the cells its tables fill.", ""]
    header = ["model", "p", "build s", "generateseq s", "auto s (ordering)", "bfs s", "max dep. set",
              "table entries", "paper s", "paper / ours"]
    body = []
    for r in rows:
        d = r["dp"]
        paper = r["paper_seconds"]
        ours = d["generateseq"].get("seconds")
        body.append([
            TITLES[r["model"]], r["devices"], seconds(r["build_seconds"]), seconds(ours),
            f"{seconds(d['auto'].get('seconds'))} ({d['auto']['ordering']})", _bfs_cell(d["bfs"]),
            d["generateseq"]["max_dependent_set"], f"{d['generateseq']['table_entries']:,}",
            f"{paper:g}" if paper else (r["paper_range"] or "-"),
            f"{paper / ours:,.0f}x" if paper and ours else "-"])
    out += [md_table(header, body), "",
            "## ILP backends and mcmc under a time limit", "",
            f"Each run had a time limit of **{settings.time_limit:g} s** (ILP: model build "
            f"included, in a child process killed after {settings.hard_timeout:g} s of wall "
            f"time; skipped above {settings.ilp_max_pairs:,} edge pair columns). A cell is "
            "status, solver seconds, the relative gap to the proven lower bound when not "
            "optimal, cost / dp optimum when not equal, and the child process's peak memory "
            "(ILP only). mcmc (seed "
            f"{settings.seed}) never proves optimality: `feasible`.", ""]
    header = ["model", "p", "configs", "pair columns"] + list(ILP_SOLVERS) + ["mcmc"]
    body = []
    for r in rows:
        body.append([TITLES[r["model"]], r["devices"], f"{r['configs']:,}",
                     f"{r['pair_columns']:,}"] +
                    [_solver_cell(r["solvers"][s]) for s in list(ILP_SOLVERS) + ["mcmc"]])
    out += [md_table(header, body), ""]
    return "\n".join(out)


def _bfs_cell(entry: dict[str, Any]) -> str:
    if entry.get("oom"):
        return f"OOM (needs {gib(entry['peak_bytes'])})"
    return seconds(entry.get("seconds"))


def _solver_cell(result: dict[str, Any]) -> str:
    status = result["status"]
    if status == "skipped":
        return "not run (too large)"
    if status == "killed":
        return f"killed at {result['wall_seconds']:.0f} s"
    if status in ("error", "refused"):
        return f"{status}: {result.get('note', '')[:60]}"
    parts = [status, f"{seconds(result.get('solve_seconds'))} s"]
    gap = result.get("gap")
    if status != "optimal" and gap is not None:
        parts.append(f"gap {100 * gap:.2g}%")
    ratio = result.get("cost_ratio")
    if ratio is not None and abs(ratio - 1) > 1e-9:
        parts.append(f"x{ratio:.4f}")
    if result.get("peak_rss_gib") is not None:
        parts.append(f"{result['peak_rss_gib']:.2g} GiB")
    return ", ".join(parts)

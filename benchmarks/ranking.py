"""Does pase's performance model order layouts as the measurements do?

    python benchmarks/ranking.py [--pool-releases]

A model that picks plans needs the right order more than the right seconds. Where a
published data set has several layouts of one model on one device count, this prices
each row's layout (the path of ``benchmarks/published.py``: ``pase evaluate --layout``)
and prints, per group, measured and predicted step seconds and Kendall's tau-b between
the two orders; then, per data set, the groups, rows, mean tau and the concordant and
discordant pairs overall.

A group holds fixed what a plan picker is given: the model and its sizes, the device
type and count, the global batch and sequence, the precision (searched layouts keep
it: ``pase solve --layouts --precision``) and the software that ran (the source paper
for the 2021-23 rows; framework, release and extra techniques for the 2024-26 rows, so
two releases' runs of one layout are not counted as two layouts; ``--pool-releases``
drops that). What varies is the layout: tp, pp, dp, cp, ep, virtual stages,
micro-batch, ZeRO, recomputation, sequence parallelism. A group needs at least two
priced rows with different layouts.

Data sets, each reported on its own: ``benchmarks/data/calibration.json`` (the rows
pase's constants were fitted on), ``heldout.json`` (Megatron-LM runs not fitted), the
two pooled (their Korthikanti et al. rows are one paper's full- and selective-
recomputation runs of the same models), and ``runs-2024-2026.json``. A 2024-26 row is
priced by the command its row states, as ``benchmarks/published.py --runs`` prices it
(``published_runs.row_spec``: ZeRO 3 for FSDP rows and 1 otherwise, the published
recomputation or ``auto``, sequence parallelism with tp); a row that lacks its layout,
batch or device is counted as not priced with the reason, never filled in.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path

import published_runs
from provenance import stamp
from published import evaluate_row

DATA = Path(__file__).resolve().parent / "data"
OLD_SETS = (("calibration", "calibration.json"), ("held-out", "heldout.json"))
NEW_SET = ("2024-26", "runs-2024-2026.json")


def kendall_tau_b(x: list[float], y: list[float]) -> tuple[float, int, int, int, int]:
    """Kendall's tau-b of two equally long sequences, with its pair counts.

    Returns ``(tau, concordant, discordant, tied_x, tied_y)``: ``tied_x`` counts pairs
    tied in ``x`` only, ``tied_y`` in ``y`` only (a pair tied in both counts for
    neither). tau-b = (C - D) / sqrt((C + D + tied_y) (C + D + tied_x)); NaN when
    either sequence is constant (or has fewer than two items).
    """
    if len(x) != len(y):
        raise ValueError(f"kendall_tau_b: sequences of different lengths ({len(x)} and {len(y)})")
    c = d = tx = ty = 0
    for i in range(len(x)):
        for j in range(i + 1, len(x)):
            dx = int(x[i] > x[j]) - int(x[i] < x[j])
            dy = int(y[i] > y[j]) - int(y[i] < y[j])
            if dx == 0 and dy == 0:
                continue
            if dx == 0:
                tx += 1
            elif dy == 0:
                ty += 1
            elif dx == dy:
                c += 1
            else:
                d += 1
    denom = math.sqrt((c + d + ty) * (c + d + tx))
    return ((c - d) / denom if denom else math.nan), c, d, tx, ty


class NotPriced(Exception):
    """A row pase cannot price yet; the message says why."""


@dataclass
class Row:
    data: dict
    dataset: str
    key: tuple
    layout: str
    measured: float | None = None
    predicted: float | None = None
    reason: str | None = None


@dataclass
class Group:
    key: tuple
    rows: list[Row] = field(default_factory=list)

    @property
    def priced(self) -> list[Row]:
        return [r for r in self.rows if r.predicted is not None]


# -- the 2021-23 rows (calibration.json, heldout.json): published.py's fields ---------

def old_key(row: dict) -> tuple:
    o = row.get("options", {})
    size = f"{o['layers']}x{o['width']}" if "layers" in o else row["model"]
    precision = "fp32" if row.get("precision") == "fp32" else "bf16"  # amp_bf16 is bf16
    return (size, json.dumps(o, sort_keys=True), row["device"], row["gpus"],
            row["global_batch"], o.get("seq", 2048), precision, row["source"].split(",")[0])


def old_layout(row: dict) -> str:
    text = f"tp{row['tp']} pp{row['pp']} dp{row['dp']}"
    text += "".join(f" {k}{row[k]}" for k in ("cp", "ep") if row.get(k, 1) > 1)
    text += f" v{row['interleave']}" if row.get("interleave", 1) > 1 else ""
    text += f" mb{row['micro_batch']} z{row.get('zero', 0)} {row.get('recompute', 'none')}"
    return text + (" sp" if row.get("sequence_parallel") else "")


def price_old(row: Row) -> None:
    r = evaluate_row(row.data)
    row.measured, row.predicted = float(r["measured"]), float(r["predicted"])


# -- the 2024-26 rows (runs-2024-2026.json) -------------------------------------------

def new_key(row: dict, pool_releases: bool) -> tuple:
    key = (row["model"], json.dumps(row.get("options"), sort_keys=True), row.get("device"),
           row["gpus"], row.get("global_batch"), row.get("seq"), row.get("precision"))
    if pool_releases:
        return key
    return key + (row["framework"], row.get("release"), row.get("techniques"), row.get("kernels"))


def new_layout(row: dict) -> str:
    parts = [f"{k}{row.get(k, '?')}" for k in ("tp", "pp", "dp")]  # '?': not published
    parts += [f"{k}{row[k]}" for k in ("cp", "ep", "vp") if row.get(k) not in (None, 1)]
    if row.get("micro_batch") is not None:
        parts.append(f"mb{row['micro_batch']}")
    elif row.get("local_batch") is not None:
        parts.append(f"local{row['local_batch']}")
    if row.get("zero") is not None:
        parts.append(f"z{row['zero']}")
    elif row.get("fsdp"):
        parts.append(f"fsdp{row['fsdp']}")
    if row.get("recompute") is not None:
        parts.append(str(row["recompute"]))
    return " ".join(parts)


def price_new(row: Row) -> None:
    """A 2024-26 row priced by the command its row states (``published_runs.row_spec``: the
    conventions of ``benchmarks/published.py --runs``), or NotPriced saying why not."""
    from pase.errors import PaseError
    from pase.perf import evaluate_layout

    spec = published_runs.row_spec(row.data)
    measured = published_runs.measured_step(row.data)
    if isinstance(spec, str) or measured is None:
        raise NotPriced(spec if isinstance(spec, str) else "no measured step time or throughput")
    try:
        estimate = evaluate_layout(*published_runs.row_case(spec))
    except PaseError as e:
        raise NotPriced(f"pase refuses: {str(e).split('; ')[0]}") from None
    row.measured, row.predicted = measured, float(estimate.step_seconds)


# -- grouping, pricing, reporting ----------------------------------------------------

def candidate_groups(rows: list[Row]) -> list[Group]:
    """Groups of one key with at least two different layouts (in file order)."""
    groups: dict[tuple, Group] = {}
    for r in rows:
        groups.setdefault(r.key, Group(r.key)).rows.append(r)
    return [g for g in groups.values() if len({r.layout for r in g.rows}) >= 2]


def price_groups(groups: list[Group], price) -> None:
    for g in groups:
        for r in g.rows:
            try:
                price(r)
            except NotPriced as e:
                r.reason = str(e)


def ranked(values: list[float]) -> list[int]:
    """1 for the fastest; equal values share a rank."""
    return [1 + sum(w < v for w in values) for v in values]


def report(name: str, rows: list[Row], groups: list[Group], header: str,
           every_row: bool = False) -> dict:
    print(f"\n## {name}\n\n{header}")
    kept = [g for g in groups if len({r.layout for r in g.priced}) >= 2]
    print(f"\n{len(rows)} rows; {len(groups)} groups with several layouts "
          f"({sum(len(g.rows) for g in groups)} rows); {len(kept)} with two or more priced "
          f"layouts")
    totals = {"groups": len(kept), "rows": 0, "taus": [], "c": 0, "d": 0, "tx": 0, "ty": 0}
    for g in groups:
        label = g.rows[0]
        print(f"\n### {describe_key(label)}\n")
        print("| data set | id | layout | measured s | predicted s | predicted / measured | "
              "measured rank | predicted rank |")
        print("|---|---|---|---|---|---|---|---|")
        priced = g.priced
        ranks_m = ranked([r.measured for r in priced])
        ranks_p = ranked([r.predicted for r in priced])
        rank = {id(r): (a, b) for r, a, b in zip(priced, ranks_m, ranks_p)}
        for r in g.rows:
            rid = r.data.get("id", "-")
            if r.predicted is None:
                print(f"| {r.dataset} | {rid} | {r.layout} | not priced: {r.reason} | | | | |")
                continue
            a, b = rank[id(r)]
            print(f"| {r.dataset} | {rid} | {r.layout} | {r.measured:.3f} | {r.predicted:.3f} | "
                  f"{r.predicted / r.measured:.3f} | {a} | {b} |")
        if g not in kept:
            print("\nfewer than two priced layouts: no tau")
            continue
        tau, c, d, tx, ty = kendall_tau_b([r.predicted for r in priced], [r.measured for r in priced])
        print(f"\ntau-b {tau:+.3f} (pairs: concordant {c}, discordant {d}, tied in prediction "
              f"only {tx}, tied in measurement only {ty})")
        totals["rows"] += len(priced)
        totals["taus"].append(tau)
        for k, v in zip(("c", "d", "tx", "ty"), (c, d, tx, ty)):
            totals[k] += v
    taus = [t for t in totals["taus"] if not math.isnan(t)]
    mean = f"{sum(taus) / len(taus):+.3f}" if taus else "-"
    print(f"\n**{name}: {totals['groups']} groups, {totals['rows']} priced rows, mean tau-b "
          f"{mean}; pairs concordant {totals['c']}, discordant {totals['d']}, tied in "
          f"prediction only {totals['tx']}, tied in measurement only {totals['ty']}**")
    tally("in these groups", [r for g in groups for r in g.rows])
    if every_row:
        tally("in the whole file", rows)
    return totals


def tally(where: str, rows: list[Row]) -> None:
    """Rows priced and, per reason, rows not priced (a row may have several reasons)."""
    missed = [r for r in rows if r.predicted is None]
    if not missed:
        return
    print(f"\nnot priced {where}: {len(missed)} of {len(rows)} rows; rows per reason:")
    reasons: dict[str, int] = {}
    for r in missed:
        for reason in r.reason.split("; "):
            reasons[reason] = reasons.get(reason, 0) + 1
    for reason, count in sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0])):
        print(f"- {count}: {reason}")


def describe_key(row: Row) -> str:
    d = row.data
    if row.dataset == NEW_SET[0]:
        pooled = len(row.key) == 7  # --pool-releases: no software in the key
        soft = "" if pooled else f", {d['framework']}" + (
            f" ({d['techniques']})" if d.get("techniques") else "")
        return (f"{d['model']} on {d['gpus']} x {d.get('device')}, global batch "
                f"{d.get('global_batch')}, seq {d.get('seq')}, {d.get('precision')}{soft}")
    size, _, device, gpus, batch, seq, precision, source = row.key
    return f"{size} ({d['model']}) on {gpus} x {device}, global batch {batch}, seq {seq}, " \
           f"{precision}, {source}"


def load(name: str) -> list[dict]:
    return json.loads((DATA / name).read_text())["rows"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pool-releases", action="store_true",
                    help="2024-26: group runs of different releases and techniques together")
    args = ap.parse_args(argv)
    command = "python benchmarks/ranking.py" + (" --pool-releases" if args.pool_releases else "")
    print("# Ranking: does pase order layouts as the measurements do?\n")
    print(stamp() + f"\n\ncommand: `{command}`")
    summary = []
    old: list[Row] = []
    for label, path in OLD_SETS:
        rows = [Row(r, label, old_key(r), old_layout(r)) for r in load(path)]
        old += rows
        groups = candidate_groups(rows)
        price_groups(groups, price_old)
        summary.append((label, report(label, rows, groups, f"`benchmarks/data/{path}`")))
    pooled = [Row(r.data, r.dataset, r.key, r.layout) for r in old]
    groups = candidate_groups(pooled)
    price_groups(groups, price_old)
    summary.append(("2021-23 pooled", report(
        "2021-23 pooled", pooled, groups,
        "calibration and held-out rows together (the calibration rows were fitted)")))
    label, path = NEW_SET
    rows = [Row(r, label, new_key(r, args.pool_releases), new_layout(r)) for r in load(path)]
    groups = candidate_groups(rows)
    price_groups([Group((), rows)], price_new)  # every row, for the file's tally of reasons
    held = "releases pooled" if args.pool_releases else "framework and release held fixed"
    summary.append((label, report(label, rows, groups, f"`benchmarks/data/{path}` ({held})",
                                  every_row=True)))
    print("\n## Summary\n")
    print("| data set | groups | priced rows | mean tau-b | concordant | discordant |")
    print("|---|---|---|---|---|---|")
    for label, t in summary:
        taus = [x for x in t["taus"] if not math.isnan(x)]
        mean = f"{sum(taus) / len(taus):+.3f}" if taus else "-"
        print(f"| {label} | {t['groups']} | {t['rows']} | {mean} | {t['c']} | {t['d']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

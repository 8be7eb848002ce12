"""Fit the achieved-fraction constants of one device type on the published rows.

    python benchmarks/calibrate.py A100 [--fit gemm gemm_half attention launch_s]
    python benchmarks/calibrate.py H100 --fit gemm attention network

Coordinate descent on the sum of squared log errors of the step time over the
rows of ``benchmarks/data/calibration.json`` run on that device type, starting
from the constants in ``pase/perf/hardware.py``. It prints the fitted values and
each row's error; copy the values into hardware.py by hand, with the rows they
were fitted on. Constants describe the hardware, so they are shared by every
row of the type: nothing is fitted per row.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from typing import Callable

from provenance import stamp
from published import CLUSTERS, DATA, measured_step, row_layout, row_model

from pase.api import load_graph
from pase.perf import evaluate_layout, hardware

STEPS = (1.3, 1.1, 1.03)  # multiplicative moves, coarse to fine
FRACTIONS = ("gemm", "attention", "hbm", "nvlink", "network")  # of a peak: at most 1


def descend(loss: Callable[[dict], tuple[float, list[float]]], values: dict,
            ceiling: Callable[[str], float]) -> tuple[dict, list[float]]:
    """Coordinate descent on ``loss`` (score, per-row errors) by multiplicative moves of
    each value, coarse to fine, none above ``ceiling(key)``: the values and their errors."""
    best, errs = loss(values)
    for step in STEPS:
        improved = True
        while improved:
            improved = False
            for k in list(values):
                for factor in (step, 1 / step):
                    trial = dict(values, **{k: values[k] * factor})
                    if trial[k] > ceiling(k):
                        continue
                    score, e = loss(trial)
                    if score < best - 1e-12:
                        best, values, errs, improved = score, trial, e, True
    return values, errs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("device", choices=("A100", "H100"))
    ap.add_argument("--fit", nargs="+", default=["gemm", "gemm_half", "attention", "launch_s"])
    args = ap.parse_args(argv)
    print(stamp())
    rows = [r for r in json.loads(DATA.read_text())["rows"] if args.device in CLUSTERS[r["device"]].upper()
            or (args.device == "A100" and "a100" in CLUSTERS[r["device"]])]
    cases = []
    for row in rows:
        name, options = row_model(row)
        graph = load_graph(name, **options)
        seq = options.get("seq", 2048)
        cases.append((row, graph, CLUSTERS[row["device"]], row_layout(row), measured_step(row, seq)))
    index = [i for i, (key, _) in enumerate(hardware._BY_NAME) if key == args.device][0]

    def loss(values: dict) -> tuple[float, list[float]]:
        hw = dataclasses.replace(getattr(hardware, args.device), **values)
        hardware._BY_NAME = tuple((k, hw if i == index else v) for i, (k, v) in enumerate(hardware._BY_NAME))
        errs = [evaluate_layout(g, c, lay).step_seconds / t - 1 for _, g, c, lay, t in cases]
        return sum(math.log1p(e) ** 2 for e in errs), errs

    values = {k: getattr(getattr(hardware, args.device), k) for k in args.fit}
    values, errs = descend(loss, values, lambda k: 1.0 if k in FRACTIONS else math.inf)
    print("fitted:", ", ".join(f"{k}={v:.4g}" for k, v in values.items()))
    for (row, *_), e in zip(cases, errs):
        print(f"  {row['model']} {row.get('options', {}).get('layers', '')}x"
              f"{row.get('options', {}).get('width', '')} x{row['gpus']}: {e:+.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Fit one device type's achieved fractions on the published runs of 2024-2026.

    python benchmarks/calibrate_runs.py GB200 [--fit gemm attention low:mxfp8 ...]

The rows are ``benchmarks/data/runs-2024-2026.json``'s, priced exactly as
``benchmarks/published.py`` prices them (``published_runs.row_spec``), plus, on
A100 and H100, the older runs of ``benchmarks/data/calibration.json`` (the
constants are shared, so both sets must stay right). Coordinate
descent on the sum of squared log errors of the step time over the rows run on
that device type, from the constants in ``pase/perf/hardware.py``; ``low:P`` is
the linear GEMMs' efficiency at precision ``P`` (fp8, mxfp8, nvfp4). It prints
the fitted values and each row's error; copy the values into hardware.py by
hand, with the rows they were fitted on. The constants describe the hardware:
one set per device type, none per row or per model.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from pathlib import Path

from calibrate import descend
from provenance import stamp
from published import CLUSTERS, row_layout, row_model
from published import DATA as OLDER
from published import measured_step as older_step
from published_runs import measured_step, row_case, row_spec

from pase.api import load_graph
from pase.cluster import get_cluster
from pase.errors import PaseError
from pase.perf import evaluate_layout, hardware

DATA = Path(__file__).resolve().parent / "data" / "runs-2024-2026.json"
# Fractions of a peak, and the most any kernel of their kind is measured to reach: cuBLAS
# GEMMs about 0.9 of the dense peak, fused attention (FlashAttention-3, cuDNN) about 0.75.
BOUNDS = {"gemm": 0.9, "attention": 0.75, "hbm": 1.0, "nvlink": 1.0, "network": 1.0,
          "grouped": 1.0}


def _get(hw, key: str) -> float:
    if key.startswith("low:"):
        return hw.low_precision_gemm(key[4:])
    return getattr(hw, key)


def _with(hw, values: dict):
    low = dict(hw.low_gemm)
    low.update({k[4:]: v for k, v in values.items() if k.startswith("low:")})
    plain = {k: v for k, v in values.items() if not k.startswith("low:")}
    return dataclasses.replace(hw, low_gemm=tuple(sorted(low.items())), **plain)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    names = [k for k, _ in hardware._BY_NAME]
    ap.add_argument("device", choices=names)
    ap.add_argument("--fit", nargs="+", default=["gemm", "attention"])
    ap.add_argument("--start", nargs="*", default=[], metavar="KEY=VALUE",
                    help="start a constant here (one at 0 cannot move by factors)")
    args = ap.parse_args(argv)
    print(stamp())
    index = names.index(args.device)
    cases = []
    for row in json.loads(DATA.read_text())["rows"]:
        spec = row_spec(row)
        if isinstance(spec, str) or measured_step(row) is None:
            continue
        try:
            graph, cluster, lay = row_case(spec)
        except PaseError as e:
            print(f"  skipped row {row['id']}: {e}", file=sys.stderr)
            continue
        if hardware.achieved(cluster.device) is not hardware._BY_NAME[index][1]:
            continue
        cases.append((row, graph, cluster, lay, measured_step(row)))
    for row in json.loads(OLDER.read_text())["rows"]:
        name, options = row_model(row)
        lay = row_layout(row)
        cluster = get_cluster(CLUSTERS[row["device"]], lay.devices)
        if hardware.achieved(cluster.device) is hardware._BY_NAME[index][1]:
            cases.append((row, load_graph(name, **options), cluster, lay,
                          older_step(row, options.get("seq", 2048))))
    print(f"{len(cases)} rows on {args.device}")
    base = hardware._BY_NAME[index][1]
    # every name priced with this type's constants (H200 is priced as H100)
    same = {i for i, (_, v) in enumerate(hardware._BY_NAME) if v is base}

    def loss(values: dict) -> tuple[float, list[float]]:
        hw = _with(base, values)
        hardware._BY_NAME = tuple((k, hw if i in same else v)
                                  for i, (k, v) in enumerate(hardware._BY_NAME))
        errs = [evaluate_layout(g, c, lay).step_seconds / t - 1 for _, g, c, lay, t in cases]
        return sum(math.log1p(e) ** 2 for e in errs), errs

    fitted = {k: _get(base, k) for k in args.fit}
    fixed = {k: float(v) for k, v in (item.split("=", 1) for item in args.start)}
    fitted.update({k: v for k, v in fixed.items() if k in fitted})
    fixed = {k: v for k, v in fixed.items() if k not in fitted}
    fitted, errs = descend(lambda v: loss({**fixed, **v}), fitted,
                           lambda k: BOUNDS.get(k, 0.9 if k.startswith("low:") else math.inf))
    values = {**fixed, **fitted}
    print("fitted:", ", ".join(f"{k}={v:.4g}" for k, v in values.items()))
    for (row, *_), e in sorted(zip(cases, errs), key=lambda x: x[1]):
        print(f"  {row.get('id', 'older'):>5} {row['model']:16.16s} {row.get('precision')} x{row['gpus']}: {e:+.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

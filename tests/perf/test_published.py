"""The performance model against published training runs (benchmarks/published.py).

The measurements were made elsewhere (Megatron-LM on Selene, MosaicML's FSDP
runs); the constants of pase.perf.hardware were fitted on these rows, so this
guards the calibration: median |error| at most 5%, worst at most 15%, and every
run that ran fits in memory. Pricing one layout stays fast: 126 layers of width
16,384 on 16,384 devices in a few CPU seconds.
"""
from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

import pytest

from pase.api import evaluate_layout

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import published  # noqa: E402


@pytest.fixture(scope="module")
def results():
    rows = json.loads(published.DATA.read_text())["rows"]
    return [published.evaluate_row(r) for r in rows]


def test_calibration_rows_within_target(results):
    errors = [abs(r["error"]) for r in results]
    assert len(errors) == 11
    assert statistics.median(errors) <= 0.05
    assert max(errors) <= 0.15


def test_every_published_run_fits(results):
    assert all(r["estimate"]["fits_memory"] for r in results)


def test_pricing_is_proportional_to_ops_not_configs():
    start = time.process_time()
    e = evaluate_layout("llama3-8b", 16384, "tp=8,pp=16,dp=128", cluster="h100-sxm",
                        micro_batch=1, global_batch=2048,
                        model_options=dict(layers=126, width=16384, heads=128, kv_heads=8,
                                           ff=53248))
    assert time.process_time() - start < 8.0  # about 1 s on the 2-core reference machine
    assert 0 < e.mfu < 1

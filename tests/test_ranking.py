"""benchmarks/ranking.py: Kendall's tau-b by hand, and which published rows it groups and prices."""
import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
try:
    from published_runs import row_argv, row_spec
    from ranking import Row, candidate_groups, kendall_tau_b, new_key
finally:
    sys.path.pop(0)


def test_tau_b_same_and_reversed_order():
    assert kendall_tau_b([1, 2, 3], [10, 20, 30]) == (1.0, 3, 0, 0, 0)
    assert kendall_tau_b([1, 2, 3], [30, 20, 10]) == (-1.0, 0, 3, 0, 0)


def test_tau_b_one_swap_of_four():
    # Pairs of [1,3,2,4] against [1,2,3,4]: only (2,3) is discordant -> (5 - 1) / 6.
    tau, c, d, tx, ty = kendall_tau_b([1, 2, 3, 4], [1, 3, 2, 4])
    assert (c, d, tx, ty) == (5, 1, 0, 0)
    assert tau == pytest.approx(4 / 6)


def test_tau_b_ties_on_each_side():
    # x = [1,1,2,3], y = [1,2,2,3]: pair (0,1) tied in x only, (1,2) tied in y only, the
    # other four concordant: tau-b = 4 / sqrt((6 - 1) (6 - 1)) = 0.8 (tau-a would be 4/6).
    tau, c, d, tx, ty = kendall_tau_b([1, 1, 2, 3], [1, 2, 2, 3])
    assert (c, d, tx, ty) == (4, 0, 1, 1)
    assert tau == pytest.approx(0.8)


def test_tau_b_pair_tied_in_both_counts_for_neither():
    # (0,1) tied in both; (0,2), (1,2) discordant: -2 / sqrt((3 - 1) (3 - 1)) = -1.
    assert kendall_tau_b([1, 1, 2], [5, 5, 1]) == (-1.0, 0, 2, 0, 0)
    # Ties in x only: x = [1,1,2,2], y = [1,2,3,4]: 4 concordant, 2 tied in x;
    # tau-b = 4 / sqrt(6 * 4).
    tau, c, d, tx, ty = kendall_tau_b([1, 1, 2, 2], [1, 2, 3, 4])
    assert (c, d, tx, ty) == (4, 0, 2, 0)
    assert tau == pytest.approx(4 / math.sqrt(24))


def test_tau_b_undefined_and_bad_input():
    assert math.isnan(kendall_tau_b([2.0, 2.0], [1.0, 3.0])[0])  # one side constant
    assert math.isnan(kendall_tau_b([1.0], [1.0])[0])
    with pytest.raises(ValueError, match="different lengths"):
        kendall_tau_b([1, 2], [1, 2, 3])


def test_tau_b_two_swaps_of_five():
    # [2,1,4,3,5] against [1,2,3,4,5]: pairs (0,1) and (2,3) discordant, 8 concordant.
    assert kendall_tau_b([1, 2, 3, 4, 5], [2, 1, 4, 3, 5]) == (pytest.approx(0.6), 8, 2, 0, 0)


RUN = {"framework": "Megatron-Bridge (NeMo container 26.04)", "release": "26.04",
       "model": "llama3.1-405b", "device": "GB300", "gpus": 256, "tp": 4, "pp": 8, "cp": 1,
       "dp": 8, "global_batch": 1536, "micro_batch": 1, "seq": 8192, "precision": "mxfp8",
       "tokens_per_second_per_gpu": 1000, "source": "test"}


def rows(*runs):
    return [Row(r, "2024-26", new_key(r, False), f"tp{r['tp']} cp{r['cp']}") for r in runs]


def test_one_layout_in_two_releases_is_not_a_group():
    assert candidate_groups(rows(RUN, {**RUN, "release": "26.06"})) == []
    other = {**RUN, "tp": 2, "cp": 2}
    (group,) = candidate_groups(rows(RUN, other, {**RUN, "release": "26.06"}))
    assert [r.data["tp"] for r in group.rows] == [4, 2]


def test_a_row_states_its_command():
    # the conventions of benchmarks/published.py --runs: ZeRO 1 without FSDP, recomputation
    # auto when unpublished, sequence parallelism with tp, the sizes as model options
    assert row_argv({**RUN, "options": {"layers": 126}, "vp": 4}) == [
        "evaluate", "llama3.1-405b", "-p", "256", "--cluster", "gb300-nvl72",
        "--layout", "tp=4,pp=8,dp=8", "--micro-batch", "1", "--global-batch", "1536",
        "--schedule", "interleaved:4", "--precision", "mxfp8", "--zero", "1",
        "--recompute", "auto", "--sequence-parallel", "--model-option", "seq=8192",
        "--model-option", "layers=126", "--format", "json"]


TITAN = {"framework": "torchtitan (Apr 2024)", "model": "llama2-13b", "device": "A100-80GB",
         "gpus": 64, "tp": 1, "pp": 1, "cp": 1, "dp": 64, "fsdp": 64, "zero": 3,
         "local_batch": 2, "global_batch": 128, "seq": 4096, "recompute": "selective op",
         "precision": "bf16", "options": {"layers": 40, "width": 5120}}


def test_torchtitans_local_batch_and_recomputation():
    spec = row_spec(TITAN)
    assert (spec["micro_batch"], spec["zero"], spec["recompute"]) == (2, 3, "selective")
    # under pipelining torchtitan cuts the local batch into micro-batches of one
    assert row_spec({**TITAN, "pp": 2, "dp": 32})["micro_batch"] == 1


def test_a_row_without_its_layout_is_not_priced():
    assert row_spec({**RUN, "layout_complete": False}) == "layout not published"
    assert "no preset" in row_spec({**RUN, "device": "MI300X"})

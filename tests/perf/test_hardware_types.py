"""pase.perf.hardware: the ideal profile and the per-device-type lookups."""
import numpy as np

from pase.cluster import get_cluster
from pase.perf.hardware import A100, GENERIC, IDEAL, achieved_by_rank, achieved_of_view


def test_the_ideal_profile_takes_the_data_sheet_at_its_word():
    assert IDEAL.gemm_efficiency(100.0, 100.0, 7.0) == 1.0  # no tile fixed cost, no waves
    assert IDEAL.low_precision_gemm("fp8") == 1.0
    assert IDEAL.overlapped(3.0, 10.0) == 3.0  # nothing hides behind compute
    assert (IDEAL.launch_s, IDEAL.nvlink, IDEAL.network, IDEAL.hbm) == (0.0, 1.0, 1.0, 1.0)


def test_each_device_type_of_a_mixed_cluster_keeps_its_constants():
    mixed = get_cluster("dgx-a100x2+dgx1-v100x2")  # 16 A100 first, then 16 V100
    per_rank = achieved_by_rank(mixed, 32)
    assert per_rank[0] is A100 and per_rank[15] is A100
    assert per_rank[16] is GENERIC and per_rank[31] is GENERIC  # no V100 calibration rows
    assert achieved_of_view(mixed, 16) is A100
    assert achieved_of_view(mixed, 32) is GENERIC  # the slowest type touched
    plain = get_cluster("dgx-a100")
    assert achieved_by_rank(plain, 8) == (A100,) * 8
    assert np.isclose(achieved_of_view(plain, 8).nvlink, 0.78)

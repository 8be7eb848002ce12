"""benchmarks/ranking_sim.py: the calibrated plan price ranked against pase.sim on a tiny setting."""
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
try:
    from ranking_sim import Setting, run_setting
finally:
    sys.path.pop(0)

MLP = Setting("mlp", "mlp", 8, "dgx-a100")


def test_mlp_eight_plans_rank_alike():
    r = run_setting(MLP, plans=8, seed=0)
    plans = r["plans"]
    n = len(plans)
    # the named layouts (tp1 dp8, tp2 dp4) and the 8 draws, less any draw equal to a layout
    assert r["layouts"] == 2 and 8 <= n <= 10
    assert len({p.choice for p in plans}) == n
    assert -1.0 <= r["tau"] <= 1.0
    # every pair is concordant, discordant or tied on one side (distinct plans: no float ties
    # on both sides here)
    assert r["c"] + r["d"] + r["tx"] + r["ty"] == n * (n - 1) // 2
    # the two share the work, the kernels and the collectives' rule (pase.perf.comms): less
    # the rules the simulation does not have (the optimizer step, the gradient sync exposed
    # beyond the backward pass) they agree more often than not, and each plan's simulated
    # step is within a factor two of its price. On these 9 small plans the optimizer step
    # and the syncs alone can turn the raw tau (about -0.17 here).
    assert r["tau_hidden_sync"] > 0
    assert all(0.5 < p.sim / p.model < 2.0 for p in plans)
    assert not math.isnan(r["median_ratio"])

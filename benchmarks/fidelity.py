"""Do the analytic cost models rank strategies like the simulator does?

    python benchmarks/fidelity.py [--models alexnet ...] [--devices 8 16]
                                  [--cluster gtx1080ti] [--random 16] [--seed 0]

For each graph and device count it samples strategies: the dp optimum under the
paper's FLOP model and under alpha-beta, the baselines (data-parallel, owt,
megatron), and ``--random`` seeded ones (half a random candidate per op, half
the alpha-beta optimum with 5-40% of its ops re-drawn), so the sample spans
good and bad. Each is priced by the paper model (calibrated to the cluster:
its peak TFLOP/s and intra-node bandwidth; shown in seconds at the same
efficiency), by alpha-beta (seconds), and simulated (pase.sim). It prints
Kendall's tau between each analytic model and the simulator, the ratio
analytic / simulated, and the pairs each model orders wrongly with the largest
simulated gap.
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np
from provenance import stamp

from pase.api import run_solver
from pase.cluster import get_cluster
from pase.cost_models.alpha_beta import AlphaBetaCostModel
from pase.cost_models.paper import PaperCostModel
from pase.registry import MODELS
from pase.sim import simulate
from pase.space import ConfigSpace

BASELINES = ("data-parallel", "owt", "megatron")
EFFICIENCY = 0.5
PERTURB = (0.05, 0.1, 0.2, 0.4)  # fractions of ops re-drawn around the optimum


def kendall_tau(x: np.ndarray, y: np.ndarray) -> float:
    """Kendall's tau-b (ties in either ranking count for neither side)."""
    try:
        from scipy.stats import kendalltau
    except ImportError:
        pass
    else:
        return float(kendalltau(x, y).statistic)
    n = len(x)
    concordant = discordant = tie_x = tie_y = 0
    for i in range(n):
        for j in range(i + 1, n):
            dx, dy = np.sign(x[i] - x[j]), np.sign(y[i] - y[j])
            if dx == 0 and dy == 0:
                continue
            if dx == 0:
                tie_x += 1
            elif dy == 0:
                tie_y += 1
            elif dx == dy:
                concordant += 1
            else:
                discordant += 1
    denom = np.sqrt((concordant + discordant + tie_x) * (concordant + discordant + tie_y))
    return float((concordant - discordant) / denom) if denom else float("nan")


def worst_pairs(names: list[str], model: np.ndarray, sim: np.ndarray, top: int = 2):
    """Pairs the model orders opposite to the simulator, largest simulated ratio first."""
    out = []
    for i in range(len(names)):
        for j in range(len(names)):
            if model[i] < model[j] and sim[i] > sim[j]:
                out.append((sim[i] / sim[j], names[i], names[j]))
    return sorted(out, reverse=True)[:top]


def sample(problem, sizes: np.ndarray, base: tuple[int, ...], count: int,
           rng: np.random.Generator) -> list[tuple[str, tuple[int, ...]]]:
    out = []
    for i in range(count):
        if i % 2 == 0:
            out.append((f"random{i // 2}", tuple(int(rng.integers(k)) for k in sizes)))
        else:
            frac = PERTURB[(i // 2) % len(PERTURB)]
            choice = np.array(base)
            for v in np.flatnonzero(rng.random(len(sizes)) < frac):
                choice[v] = rng.integers(sizes[v])
            out.append((f"perturb{int(frac * 100)}%-{i // 2}", tuple(int(c) for c in choice)))
    return out


def run_one(model: str, devices: int, cluster_name: str, count: int, seed: int) -> dict:
    graph = MODELS.get(model)()
    space = ConfigSpace(graph, devices)
    cluster = get_cluster(cluster_name, devices)
    paper_model = PaperCostModel(cluster.device.peak_tflops, cluster.intra.bandwidth_gbps)
    paper = paper_model.problem(graph, space)
    ab = AlphaBetaCostModel(cluster, efficiency=EFFICIENCY).problem(graph, space)
    picks = [("dp[paper]", run_solver("dp", paper).choice), ("dp[alpha-beta]", run_solver("dp", ab).choice)]
    picks += [(b, run_solver(b, ab).choice) for b in BASELINES]
    picks += sample(ab, ab.sizes, picks[1][1], count, np.random.default_rng(seed))
    flops = cluster.device.peak_tflops * 1e12 * EFFICIENCY
    names, p_cost, a_cost, s_cost = [], [], [], []
    start = time.perf_counter()
    for name, choice in picks:
        configs = {op.name: space.config(i, choice[i]) for i, op in enumerate(graph.ops)}
        names.append(name)
        p_cost.append(paper.evaluate(choice) / flops)
        a_cost.append(ab.evaluate(choice))
        s_cost.append(simulate(graph, configs, cluster, devices, efficiency=EFFICIENCY,
                               timeline=False).step_time)
    return {"model": model, "devices": devices, "names": names, "paper": np.array(p_cost),
            "ab": np.array(a_cost), "sim": np.array(s_cost), "sim_seconds": time.perf_counter() - start}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+",
                        default=["alexnet", "resnet101", "inception_v3", "rnnlm", "transformer"])
    parser.add_argument("--devices", nargs="+", type=int, default=[8, 16])
    parser.add_argument("--cluster", default="gtx1080ti")
    parser.add_argument("--random", type=int, default=16, help="random strategies per graph")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--verbose", action="store_true", help="print every strategy")
    args = parser.parse_args(argv)
    print(f"# {stamp()}")
    print(f"# command: python benchmarks/fidelity.py {' '.join(sys.argv[1:] if argv is None else argv)}")
    print(f"# cluster {args.cluster}, efficiency {EFFICIENCY}; paper model calibrated to the "
          f"cluster (FLOP shown as seconds at the same efficiency)")
    summary = []
    for model in args.models:
        for p in args.devices:
            r = run_one(model, p, args.cluster, args.random, args.seed)
            print(f"\n## {model}, p = {p}: {len(r['names'])} strategies, "
                  f"simulated in {r['sim_seconds']:.1f} s")
            print(f"{'strategy':<18} {'paper s':>10} {'alpha-beta s':>13} {'simulated s':>12} "
                  f"{'paper/sim':>10} {'ab/sim':>7}")
            rows = range(len(r["names"])) if args.verbose else range(2 + len(BASELINES))
            for i in rows:
                print(f"{r['names'][i]:<18} {r['paper'][i]:>10.4g} {r['ab'][i]:>13.4g} "
                      f"{r['sim'][i]:>12.4g} {r['paper'][i] / r['sim'][i]:>10.3f} "
                      f"{r['ab'][i] / r['sim'][i]:>7.3f}")
            tp, ta = kendall_tau(r["paper"], r["sim"]), kendall_tau(r["ab"], r["sim"])
            print(f"kendall tau vs simulator: paper {tp:+.3f}, alpha-beta {ta:+.3f}")
            for label, key in (("paper", "paper"), ("alpha-beta", "ab")):
                for ratio, a, b in worst_pairs(r["names"], r[key], r["sim"]):
                    print(f"  {label} ranks {a} < {b}, but simulated {a} is {ratio:.2f}x slower")
            ab_ratio = r["ab"] / r["sim"]
            best_sim = int(np.argmin(r["sim"]))
            summary.append((model, p, len(r["names"]), tp, ta, float(np.median(ab_ratio)),
                            r["names"][best_sim]))
    print("\n## summary")
    print("| model | p | strategies | tau paper | tau alpha-beta | median ab/sim | fastest simulated |")
    print("|---|---|---|---|---|---|---|")
    for model, p, n, tp, ta, med, best in summary:
        print(f"| {model} | {p} | {n} | {tp:+.3f} | {ta:+.3f} | {med:.3f} | {best} |")


if __name__ == "__main__":
    main()

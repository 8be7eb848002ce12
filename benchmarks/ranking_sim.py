"""Does the search's model order plans as the event simulation does?

    python benchmarks/ranking_sim.py [--plans 40] [--seed 0] [--settings gpt2 mlp ...]

The search prices plans with the calibrated cost model (cost_models/calibrated.py); its
plan price is ``cost_model.price_plan(...)["step_seconds"]``, the ``step_seconds`` of
``pase.api.evaluate(..., "calibrated")``. ``pase.sim`` replays one training step task by
task, reading the plan's own prices: the Strategy of a calibrated plan carries each op's
kernel, collective and optimizer seconds and each edge's seconds (:mod:`pase.prices`), and
the simulation runs each compute task for its priced kernel seconds, stretches each
collective's flows and each re-layout's messages to their priced seconds alone, and runs
each op's optimizer step after its gradient syncs. What the simulation adds is the
schedule: dependencies task by task, device ports shared between concurrent flows, each
gradient sync overlapping whatever compute is left. So the two share every
op's price and differ in how they add them up (see docs/performance-model.md, "The
search's model against the event simulation").

Per setting (model, devices, cluster) the plans are, with a seeded RNG:

- every named layout (tp x dp x cp, with and without sequence parallelism, that the graph
  admits), as :func:`pase.perf.plan.layout_configs` lays it out: the realistic plans;
- ``--plans`` random plans: half a random candidate per op of the built Problem, half a
  named layout with 10-50% of its ops re-drawn.

Each is priced by the calibrated plan price and simulated at its carried prices. Printed per setting: the plans, Kendall's tau-b over all and over the named
layouts alone, the concordant and discordant pairs, the median ratio sim / model and the
discordant pairs with the largest simulated gap; then one line overall (pairs are only
formed inside a setting). A diagnostic column ranks the Problem's own sum
(``search_seconds``) instead of the plan's price: it hides every gradient sync but for its
overlap tax, where the plan's price adds the sync the last backward pass does not hide;
the simulation overlaps each op's sync with whatever compute is left.
"""
from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from provenance import stamp
from ranking import kendall_tau_b  # the tau-b of the measured-runs ranking

from pase.api import build_problem, load_graph
from pase.errors import PaseError
from pase.perf.layout import check_graph, make_layout
from pase.perf.plan import layout_configs
from pase.sim import simulate
from pase.strategy import Strategy

PERTURB = (0.1, 0.25, 0.5)  # fractions of a layout's ops re-drawn


@dataclass(frozen=True)
class Setting:
    name: str
    model: str
    devices: int
    cluster: str
    options: tuple[tuple[str, Any], ...] = ()


SETTINGS = (
    Setting("gpt2", "gpt2", 8, "dgx-a100-80gb", (("layers", 2), ("vocab", 50304))),
    Setting("llama2-7b", "llama2-7b", 16, "h100-sxm", (("layers", 2),)),  # 2 nodes of 8
    Setting("alexnet", "alexnet", 8, "dgx-a100"),
    Setting("mlp", "mlp", 8, "dgx-a100"),
)


@dataclass
class Plan:
    label: str
    kind: str  # layout, random, perturbed
    choice: tuple[int, ...]
    model: float = math.nan
    sim: float = math.nan
    search: float = math.nan  # the Problem's sum: every gradient sync hidden but for its tax
    fits: bool = True
    breakdown: dict[str, float] = field(default_factory=dict)
    sim_parts: dict[str, float] = field(default_factory=dict)


def batch_size(graph) -> int:
    for op in graph.ops:
        for d in op.dims:
            if d.role == "batch":
                return d.size
    return 1


def named_layouts(built) -> list[Plan]:
    """Every tp x dp x cp layout (sequence parallel or not) the graph admits, as a plan."""
    graph, p = built.graph, built.space.devices
    batch = batch_size(graph)
    has_seq = any(d.role == "sequence" for op in graph.ops for d in op.dims)
    out, seen = [], set()
    for tp in (t for t in range(1, p + 1) if p % t == 0):
        for cp in (c for c in range(1, p // tp + 1) if (p // tp) % c == 0 and (has_seq or c == 1)):
            dp = p // (tp * cp)
            if batch % dp:
                continue
            for sp in (False, True) if tp > 1 and has_seq else (False,):
                lay = make_layout({"tp": tp, "dp": dp, "cp": cp}, devices=p,
                                  micro_batch=batch // dp, global_batch=batch,
                                  sequence_parallel=sp)
                try:
                    check_graph(graph, lay)
                    configs = layout_configs(graph, lay)
                    choice = tuple(built.space.index_of(op.name, configs.get(op.name, {}))
                                   for op in graph.ops)
                except PaseError:  # tp not dividing the heads, a split not in the space
                    continue
                if choice in seen:  # e.g. sequence parallelism on a graph without norms
                    continue
                seen.add(choice)
                label = f"tp{tp} dp{dp}" + (f" cp{cp}" if cp > 1 else "") + (" sp" if sp else "")
                out.append(Plan(label, "layout", choice))
    return out


def random_plans(built, layouts: list[Plan], count: int, rng: np.random.Generator) -> list[Plan]:
    sizes = [int(s) for s in built.problem.sizes]
    out = []
    for i in range(count):
        if i % 2 == 0 or not layouts:
            out.append(Plan(f"random{i}", "random", tuple(int(rng.integers(s)) for s in sizes)))
            continue
        base = layouts[int(rng.integers(len(layouts)))]
        frac = PERTURB[(i // 2) % len(PERTURB)]
        choice = list(base.choice)
        for v in np.flatnonzero(rng.random(len(sizes)) < frac):
            choice[v] = int(rng.integers(sizes[v]))
        out.append(Plan(f"{base.label} ~{int(frac * 100)}%", "perturbed", tuple(choice)))
    return out


def price(built, setting: Setting, plan: Plan) -> None:
    """The calibrated plan price and the simulated step, at the plan's carried prices."""
    cm, graph = built.cost_model, built.graph
    priced = cm.price_plan(graph, built.problem, plan.choice)
    plan.model = float(priced["step_seconds"])
    plan.search = float(priced["search_seconds"])
    plan.fits = bool(priced["fits_memory"])
    plan.breakdown = dict(priced["breakdown"])
    strategy = Strategy.from_choice(graph, built.space, built.problem, plan.choice, priced_by=cm,
                                    cost_model=cm.name, meta=priced)
    r = simulate(graph, strategy, setting.cluster, setting.devices,
                 bytes_per_element=cm.bytes_per_element, timeline=False)
    if not r.stats["timing"].startswith("the strategy's own prices"):
        raise SystemExit(f"{setting.name}: the simulation did not replay the plan's prices "
                         f"({r.stats['timing']})")
    plan.sim = float(r.step_time)
    plan.sim_parts = {"compute": float(r.compute_busy.max()),
                      "link": max(r.link_busy.values(), default=0.0)}


def run_setting(setting: Setting, plans: int, seed: int) -> dict[str, Any]:
    """Build, draw, price and compare one setting: the plans and their tau-b figures."""
    options = dict(setting.options)
    load_graph(setting.model, **options)  # a clear error for a bad model option first
    built = build_problem(setting.model, setting.devices, "calibrated", cluster=setting.cluster,
                          model_options=options)
    rng = np.random.default_rng(seed)
    layouts = named_layouts(built)
    drawn = random_plans(built, layouts, plans, rng)
    unique, seen = [], set()
    for plan in layouts + drawn:  # a re-draw may land on a layout already in the set
        if plan.choice not in seen:
            seen.add(plan.choice)
            unique.append(plan)
    start = time.process_time()
    for plan in unique:
        price(built, setting, plan)
    tau, c, d, tx, ty = kendall_tau_b([p.model for p in unique], [p.sim for p in unique])
    named = [p for p in unique if p.kind == "layout"]
    tau_l, c_l, d_l, _, _ = kendall_tau_b([p.model for p in named], [p.sim for p in named])
    # The rule of the model the simulation replaces by its schedule: the gradient sync
    # exposed beyond the backward window (the simulation starts each op's sync after its
    # backward and lets it run under the rest of the step)
    sims = [p.sim for p in unique]
    tau_h = kendall_tau_b([p.search for p in unique], sims)[0]
    return {"setting": setting, "plans": unique, "tau": tau, "c": c, "d": d, "tx": tx, "ty": ty,
            "layouts": len(named), "tau_layouts": tau_l, "c_layouts": c_l, "d_layouts": d_l,
            "tau_hidden_sync": tau_h,
            "median_ratio": statistics.median(p.sim / p.model for p in unique),
            # what a search would lose: the simulated step of the model's fastest plan over
            # the fastest simulated one
            "regret": min(unique, key=lambda p: p.model).sim / min(sims),
            "over_cap": sum(not p.fits for p in unique), "cpu_seconds": time.process_time() - start}


def worst_pairs(plans: list[Plan], top: int = 3) -> list[tuple[float, Plan, Plan]]:
    """Pairs the model orders opposite to the simulation, largest simulated gap first:
    ``(sim[a] / sim[b], a, b)`` where the model puts ``a`` first."""
    out = []
    for a in plans:
        for b in plans:
            if a.model < b.model and a.sim > b.sim:
                out.append((a.sim / b.sim, a, b))
    return sorted(out, key=lambda t: -t[0])[:top]


def describe(p: Plan) -> str:
    b = p.breakdown
    return (f"{p.label}: model {p.model * 1e3:.3f} ms (compute {b['compute'] * 1e3:.3f}, "
            f"communication {b['communication'] * 1e3:.3f}, optimizer {b['optimizer'] * 1e3:.3f}); "
            f"sim {p.sim * 1e3:.3f} ms (compute busy {p.sim_parts['compute'] * 1e3:.3f}, "
            f"busiest port {p.sim_parts['link'] * 1e3:.3f})")


def fmt(tau: float) -> str:
    return "-" if math.isnan(tau) else f"{tau:+.3f}"


def main(argv: list[str] | None = None) -> int:
    names = [s.name for s in SETTINGS]
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--plans", type=int, default=40, help="random plans per setting (default 40)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--settings", nargs="+", choices=names, default=names)
    ap.add_argument("--verbose", action="store_true", help="print every plan")
    args = ap.parse_args(argv)
    if args.plans < 0:
        ap.error("--plans must be >= 0")
    command = "python benchmarks/ranking_sim.py " + " ".join(sys.argv[1:] if argv is None else argv)
    print("# Ranking: the search's model (calibrated) against the event simulation\n")
    print(stamp() + f"\n\ncommand: `{command.strip()}`")
    results = []
    for setting in SETTINGS:
        if setting.name not in args.settings:
            continue
        r = run_setting(setting, args.plans, args.seed)
        results.append(r)
        opts = ", ".join(f"{k}={v}" for k, v in setting.options)
        print(f"\n## {setting.model}{f' ({opts})' if opts else ''} on {setting.devices} x "
              f"{setting.cluster}\n")
        print(f"{len(r['plans'])} plans ({r['layouts']} named layouts), {r['over_cap']} over the "
              f"device memory; priced and simulated in {r['cpu_seconds']:.1f} s CPU")
        print(f"tau-b {fmt(r['tau'])} (concordant {r['c']}, discordant {r['d']}, tied in model "
              f"only {r['tx']}, in sim only {r['ty']}); named layouts alone {fmt(r['tau_layouts'])} "
              f"({r['c_layouts']} / {r['d_layouts']}); the Problem's sum (syncs hidden) "
              f"{fmt(r['tau_hidden_sync'])}; median sim / model {r['median_ratio']:.3f}; the model's "
              f"fastest plan simulates {r['regret']:.3f}x the fastest simulated")
        layouts = sorted((p for p in r["plans"] if p.kind == "layout"), key=lambda p: p.model)
        print("\n| named layout | model ms | sim ms | sim / model |\n|---|---|---|---|")
        for p in layouts:
            print(f"| {p.label} | {p.model * 1e3:.3f} | {p.sim * 1e3:.3f} | {p.sim / p.model:.3f} |")
        if args.verbose:
            print("\nevery plan:")
            for p in sorted(r["plans"], key=lambda p: p.model):
                print(f"- [{p.kind}] {describe(p)}")
        pairs = worst_pairs(r["plans"])
        if pairs:
            print("\nlargest discordant pairs (the model puts the first ahead):")
            for ratio, a, b in pairs:
                print(f"- sim {ratio:.2f}x slower:\n  - {describe(a)}\n  - {describe(b)}")
    print("\n## Summary\n")
    print("| setting | plans | tau-b | concordant | discordant | tau-b named layouts "
          "(layouts) | tau-b of the Problem's sum (syncs hidden) | "
          "median sim / model | model's pick, simulated / best simulated |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in results:
        s = r["setting"]
        print(f"| {s.model} on {s.devices} x {s.cluster} | {len(r['plans'])} | {fmt(r['tau'])} | "
              f"{r['c']} | {r['d']} | {fmt(r['tau_layouts'])} ({r['layouts']}) | "
              f"{fmt(r['tau_hidden_sync'])} | "
              f"{r['median_ratio']:.3f} | {r['regret']:.3f} |")
    c, d = sum(r["c"] for r in results), sum(r["d"] for r in results)
    ratios = [p.sim / p.model for r in results for p in r["plans"]]
    taus = [r["tau"] for r in results if not math.isnan(r["tau"])]
    mean = f"{sum(taus) / len(taus):+.3f}" if taus else "-"
    print(f"| overall (pairs within a setting) | {len(ratios)} | mean {mean} | {c} | {d} | | | "
          f"{statistics.median(ratios) if ratios else math.nan:.3f} | |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

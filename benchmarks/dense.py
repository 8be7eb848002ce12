"""Dense and skip-connected graphs under ``auto``: the method it takes, its certificate,
seconds and peak RSS, with each technique off in turn.

Rows are models x device counts x cost models; every run is its own process (its own
peak RSS), niced. Variants: ``auto`` (the default solver), ``rounds=1`` (one
relaxation, no re-choice of the kept edges), ``dp`` (``method=dp``: the plain dp,
which refuses these graphs). ``--check`` re-solves each ``auto`` row with an ILP
backend where the ILP fits and prints whether both optima agree to 1e-9.

    nice -n 10 python benchmarks/dense.py [--models densenet121,unet,unet:depth=5,inception_v3,tv-densenet121]
        [--devices 8,64,256] [--cost-models paper,alpha-beta] [--cluster h100-sxm]
        [--variants auto,rounds=1,dp] [--check ilp-highs] [--time-limit 120]
"""
from __future__ import annotations

import argparse
import json
import math
import resource
import subprocess
import sys
import time
from pathlib import Path

from provenance import stamp

HERE = Path(__file__).resolve().parent
TORCHVISION = "tv-densenet121"  # torchvision's DenseNet-121, imported (benchmarks/data)


def load(model: str):
    """A zoo name (``unet:depth=5`` sets an option) or torchvision's DenseNet imported."""
    if model != TORCHVISION:
        import pase

        name, *opts = model.split(":")
        return pase.load_graph(name, **{k: int(v) for k, v in (o.split("=") for o in opts)})
    sys.path.insert(0, str(HERE / "data"))
    from torchvision_densenet import densenet121

    from pase.frontends.torch import import_torch

    module, example = densenet121()
    return import_torch(module, example, name=TORCHVISION).graph


def worker(model: str, devices: int, cost_model: str, cluster: str, variant: str,
           check: str, time_limit: float) -> dict:
    import pase
    from pase.errors import PaseError
    from pase.problem import Status

    graph = load(model)
    kwargs = {"cluster": cluster} if cost_model == "alpha-beta" else {}
    dry = pase.dry_run(graph, devices, cost_model=cost_model, **kwargs)["auto"]
    start = time.process_time()
    built = pase.build_problem(graph, devices, cost_model, **kwargs)
    build = time.process_time() - start
    options = {"method": "dp"} if variant == "dp" else dict(
        (k, int(v)) for k, v in (o.split("=") for o in variant.split(",") if "=" in o))
    row = {"vertices": built.problem.num_vertices, "edges": len(built.problem.edges),
           "build": build, "dry": f"{dry['method']} {dry['estimated_seconds']:.2g}"}
    start = time.process_time()
    try:
        s = pase.run_solver("auto", built.problem, time_limit=time_limit, **options)
    except PaseError as exc:
        row.update(status="refused", why=str(exc).split(";")[0][:90],
                   solve=time.process_time() - start)
        return row
    row.update(solve=time.process_time() - start, status=str(s.status), cost=s.cost,
               gap=s.gap, method=s.stats.get("method"), steps=s.stats.get("steps", "-"),
               rss=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)  # before any check
    if check and variant == "auto" and s.choice is not None:
        size = built.problem.sizes.sum() + sum(m.size for m in built.problem.edge_costs)
        if size > 2_000_000:
            row["check"] = f"ILP too large ({size:.2g} variables)"
        else:
            other = pase.run_solver(check, built.problem, time_limit=time_limit)
            if other.status is Status.OPTIMAL:
                same = abs(other.cost - s.cost) <= 1e-9 * abs(s.cost)
                row["check"] = f"{check} optimal: {'same' if same else 'DIFFERENT'} cost"
            else:  # unfinished: its bound must still not exceed a proven optimum
                bound = other.lower_bound if other.lower_bound is not None else -math.inf
                row["check"] = (f"{check} {other.status} in {time_limit:g} s; its bound "
                                f"{'<=' if bound <= s.cost * (1 + 1e-9) else 'ABOVE'} this cost")
    return row


def run(model, devices, cost_model, cluster, variant, check, time_limit) -> dict:
    cmd = [sys.executable, __file__, "--worker", json.dumps(
        [model, devices, cost_model, cluster, variant, check, time_limit])]
    try:
        out = subprocess.run(["nice", "-n", "10", *cmd], capture_output=True, text=True,
                             timeout=time_limit * 3 + 120)
    except subprocess.TimeoutExpired:
        return {"status": "killed (timeout)"}
    if out.returncode:
        return {"status": f"crashed: {out.stderr.strip().splitlines()[-1][:100]}"}
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=f"densenet121,unet,unet:depth=5,inception_v3,{TORCHVISION}")
    ap.add_argument("--devices", default="8,64,256")
    ap.add_argument("--cost-models", default="paper,alpha-beta")
    ap.add_argument("--cluster", default="h100-sxm")
    ap.add_argument("--variants", default="auto,rounds=1,dp")
    ap.add_argument("--check", default="", help="an ILP solver to compare with where it fits")
    ap.add_argument("--time-limit", type=float, default=120.0)
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        row = worker(*json.loads(args.worker))
        row.setdefault("rss", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
        print(json.dumps(row))
        return
    print(f"# {stamp()}")
    print("| model | p | cost model | variant | V | E | method | status | gap | build s | "
          "solve s | dry run: method s | steps | peak RSS MiB | cost | check |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for model in args.models.split(","):
        for p in map(int, args.devices.split(",")):
            for cm in args.cost_models.split(","):
                for variant in args.variants.split(","):
                    r = run(model, p, cm, args.cluster, variant, args.check, args.time_limit)
                    gap = r.get("gap")
                    print(f"| {model} | {p} | {cm} | {variant} | {r.get('vertices', '-')} | "
                          f"{r.get('edges', '-')} | {r.get('method') or '-'} | "
                          f"{r['status']}{': ' + r['why'] if 'why' in r else ''} | "
                          f"{'-' if gap is None else f'{gap:.2g}'} | {r.get('build', 0):.2f} | "
                          f"{r.get('solve', 0):.2f} | {r.get('dry', '-')} | {r.get('steps', '-')} | "
                          f"{r.get('rss', 0):.0f} | {r.get('cost', '-'):.6g} | "
                          f"{r.get('check', '-')} |" if 'cost' in r else
                          f"| {model} | {p} | {cm} | {variant} | {r.get('vertices', '-')} | "
                          f"{r.get('edges', '-')} | - | {r['status']}"
                          f"{': ' + r['why'] if 'why' in r else ''} | - | {r.get('build', 0):.2f} | "
                          f"{r.get('solve', 0):.2f} | {r.get('dry', '-')} | - | {r.get('rss', 0):.0f} | - | - |",
                          flush=True)


if __name__ == "__main__":
    main()

"""Where the seconds of `pase import` / `pase solve` of a PyTorch model go, and what the
import cache saves.

    python benchmarks/import_speed.py [--repeat 3]

Every figure is the CPU seconds (user + system) of fresh interpreters, the median of
``--repeat`` runs, so a loaded machine inflates them little. First the phases of one
cold `pase solve tests/torch_models/gpt2.py:small -p 8` (GPT-2 small's sizes, two
layers, on torch's meta device), each timed in one interpreter in the order the
command runs them, and the interpreter's exit (``pase`` itself freezes the collector
before it; this script does not). Then whole command-line calls: cold
(``--no-cache``), the first call with the cache (a miss that writes the entry) and
warm (a hit), and warm / cold; and ``import pase`` alone against ``import pase`` +
``import torch``, both also as ratios to an empty interpreter's start measured in the
same run.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from provenance import stamp

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = "tests/torch_models/gpt2.py:small"

# One cold solve, phase by phase: CPU seconds after each step, printed as JSON.
PHASES = """
import json, time
marks = [("interpreter start", time.process_time())]
def mark(name):
    marks.append((name, time.process_time()))
import pase, pase.cli.parser
mark("import pase (and the CLI's parser)")
import torch
mark("import torch")
from pase.frontends import torch as front
from pase.frontends.reference import load_module
model, args, importer, _ = load_module(REFERENCE)
mark("build the module (meta device; torch loads torch._dynamo here)")
program = front.export_program(model, args)
mark("torch.export")
front.export_program = lambda *a, **k: program  # the walk alone, on the same program
graph = front.import_torch(model, args, name="gpt2.small").graph
mark("the walk (ATen graph to pase ops)")
from pase import api
built = api.build_problem(graph, 8)
mark("configuration space and costs (p = 8)")
api.to_strategy(built, api.run_solver("dp", built.problem))
mark("solve (dp)")
print(json.dumps([[(n, t - marks[i][1]) for i, (n, t) in enumerate(marks[1:])],
                  time.process_time()]))
"""


def cpu_run(argv: list[str], env: dict[str, str] | None = None) -> tuple[float, str]:
    """CPU seconds of a child process, and its stdout."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, check=True,
                         env={**os.environ, **(env or {}), "PYTHONPATH": os.pathsep.join(
                             [str(ROOT)] + [p for p in [os.environ.get("PYTHONPATH")] if p])}
                         ).stdout
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), out


def median_cpu(argv: list[str], repeat: int, env: dict[str, str] | None = None) -> float:
    return statistics.median(cpu_run(argv, env)[0] for _ in range(repeat))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs per figure (median)")
    args = parser.parse_args()
    print(stamp())
    py, n = sys.executable, args.repeat
    start = median_cpu([py, "-c", "pass"], n)

    runs, exits = [], []
    for _ in range(n):
        total, out = cpu_run([py, "-c", f"REFERENCE = {REFERENCE!r}\n{PHASES}"])
        marks, end = json.loads(out)
        runs.append(marks)
        exits.append(total - end)  # what the process spent after its last line
    print(f"\nOne cold `pase solve {REFERENCE} -p 8`, phase by phase (CPU s, median of {n}):\n")
    print("| phase | CPU s |\n|---|---|")
    print(f"| interpreter start (`python -c pass`) | {start:.2f} |")
    for i, (name, _) in enumerate(runs[0]):
        print(f"| {name} | {statistics.median(r[i][1] for r in runs):.2f} |")
    print(f"| interpreter exit (its collection over torch's objects) "
          f"| {statistics.median(exits):.2f} |")

    with tempfile.TemporaryDirectory() as tmp:
        out = str(Path(tmp) / "gpt2.json")
        rows = []
        for name, argv in (("import", ["import", REFERENCE, "-o", out]),
                           ("solve", ["solve", REFERENCE, "-p", "8", "--format", "json"])):
            env = {"PASE_CACHE_DIR": str(Path(tmp) / name)}  # each its own: its first a miss
            cli = [py, "-m", "pase", *argv]
            cold = median_cpu(cli + ["--no-cache"], n, env)
            miss = cpu_run(cli, env)[0]  # the first call with the cache: a miss that writes
            warm = median_cpu(cli, n, env)
            rows.append((name, cold, miss, warm))
    print(f"\nWhole command-line calls (CPU s, median of {n}): cold = --no-cache, miss = the "
          f"first call with the cache (one run), warm = a cache hit:\n")
    print("| command | cold | miss | warm | warm / cold |\n|---|---|---|---|---|")
    for name, cold, miss, warm in rows:
        print(f"| `pase {name} {REFERENCE}` | {cold:.2f} | {miss:.2f} | {warm:.2f} "
              f"| {warm / cold:.3f} |")

    alone = median_cpu([py, "-c", "import pase, pase.cli.parser"], n)
    both = median_cpu([py, "-c", "import pase, pase.cli.parser, torch"], n)
    print(f"\nImports against an empty interpreter's start ({start:.3f} CPU s, same run):\n")
    print("| interpreter runs | CPU s | ratio to `python -c pass` |\n|---|---|---|")
    for name, seconds in (("`python -c pass`", start), ("`import pase`", alone),
                          ("`import pase` + `import torch`", both)):
        print(f"| {name} | {seconds:.2f} | {seconds / start:.1f} |")
    print(f"\n`import pase` + torch / `import pase` alone: {both / alone:.1f}")


if __name__ == "__main__":
    main()

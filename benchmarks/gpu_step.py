"""Time exported strategies on ONE GPU against pase's simulator.

For each model and each strategy at p = 8 (data-parallel, megatron, the dp
optimum under alpha-beta on ``h100-sxm``, the dp optimum under the paper model)
this measures on the one device JAX sees:

- the unsharded training step (forward, loss, gradients; jit, warm-up, median of
  ``--repeats`` runs with ``block_until_ready``), the same for every strategy;
- one device's share of the strategy: the program ``pase.export.to_jax(...,
  local=True)`` writes, every op at its per-device tile shape, no communication
  (there is one GPU); tensors whose producer and consumer tiles differ are
  cropped or padded, a memory-bound stand-in for the re-layout;

and sets them beside pase's predictions for the same strategy on ``h100-sxm``:
the simulator's compute time per device (``pase.sim.simulate``, busiest device)
and step time, and the alpha-beta cost. ``--dtype bfloat16`` (the default on a
GPU) matches the preset's peak (989 TFLOP/s dense fp16/bf16 tensor); the
predictions then use 2 bytes per element. pase counts a multiply-add as two FLOP,
as the peak does, and divides by ``peak * efficiency`` (0.5), so a ratio
measured/simulated of 1 means compute ran at half the dense peak.

Run from the repository root; pase need not be installed (its plug-in folders
are mapped onto ``pase.*`` below):

    PYTHONUNBUFFERED=1 python3 benchmarks/gpu_step.py --out $OUT/gpu_step.md
    python benchmarks/gpu_step.py --cpu --quick          # a toy-sized check on a CPU

The table goes to stdout and to ``--out`` (default ``$OUT/gpu_step.md`` when
``OUT`` is set, else ``benchmarks/results/gpu_step.md``).
"""
from __future__ import annotations

import argparse
import importlib.abc
import importlib.util
import os
import statistics
import sys
import time
import types
from pathlib import Path

from provenance import stamp

ROOT = Path(__file__).resolve().parents[1]
PLUGINS = ("solvers", "graphs", "cost_models")
P = 8
CLUSTER = "h100-sxm"

MODELS = {
    # name: (model options on a GPU, model options for --quick)
    "mlp": ({"batch": 8192, "width": 8192, "layers": 4, "classes": 1024},
            {"batch": 256, "width": 256, "layers": 2, "classes": 16}),
    "transformer": ({"batch": 16, "seq": 256, "vocab": 32768, "width": 1024, "heads": 16, "d_k": 64,
                     "ff": 4096, "layers": 2},
                    {"batch": 8, "seq": 16, "vocab": 128, "width": 64, "heads": 4, "d_k": 16,
                     "ff": 128, "layers": 1}),
    "alexnet": ({"batch": 256}, {"batch": 8, "classes": 16}),
}
QUICK = ("mlp", "transformer")
STRATEGIES = ("data-parallel", "megatron", "dp (alpha-beta h100-sxm)", "dp (paper)")


class _PluginAlias(importlib.abc.MetaPathFinder):
    """Map ``pase.solvers``, ``pase.graphs`` and ``pase.cost_models`` onto the top-level
    folders, as the editable install does, for a plain checkout without pip."""

    def find_spec(self, name, path=None, target=None):
        parts = name.split(".")
        if len(parts) == 2 and parts[0] == "pase" and parts[1] in PLUGINS:
            folder = ROOT / parts[1]
            return importlib.util.spec_from_file_location(
                name, folder / "__init__.py", submodule_search_locations=[str(folder)])
        return None


def import_pase():
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    import pase

    if importlib.util.find_spec("pase.solvers") is None:
        sys.meta_path.append(_PluginAlias())
    import pase.graphs  # noqa: F401  (registers the models)
    import pase.sim

    return pase


def ms(seconds: float) -> str:
    return f"{1e3 * seconds:.4g}"


def log(*args) -> None:
    print(*args, flush=True)


def strategies(pase, model: str, options: dict, bytes_per_element: int) -> dict:
    cost = {"bytes_per_element": bytes_per_element}
    ab = dict(cost_model="alpha-beta", cluster=CLUSTER, cost_options=cost, model_options=options)
    return {
        "data-parallel": pase.solve(model, P, solver="data-parallel", **ab),
        "megatron": pase.solve(model, P, solver="megatron", **ab),
        "dp (alpha-beta h100-sxm)": pase.solve(model, P, **ab),
        "dp (paper)": pase.solve(model, P, model_options=options),
    }


def load_program(text: str, name: str) -> types.ModuleType:
    module = types.ModuleType(name)
    exec(compile(text, f"<{name}>", "exec"), module.__dict__)
    return module


def device_inputs(jax, mod) -> tuple[dict, dict]:
    """Random parameters and data of the program's shapes, drawn on the device (the
    program's own seeded numpy initialisation is slow for GPU-sized arrays)."""
    import jax.numpy as jnp

    key = jax.random.key(0)
    params = {}
    for i, (name, (shape, _, fan_in)) in enumerate(sorted(mod.PARAMS.items())):
        values = jax.random.normal(jax.random.fold_in(key, i), shape, jnp.float32) / fan_in ** 0.5
        params[name] = values.astype(mod.DTYPE)
    batch = {}
    for i, (name, (shape, _, kind, high)) in enumerate(sorted(mod.DATA.items())):
        k = jax.random.fold_in(key, 10_000 + i)
        batch[name] = (jax.random.normal(k, shape, jnp.float32).astype(mod.DTYPE) if kind == "normal"
                       else jax.random.randint(k, shape, 0, high, jnp.int32))
    return params, batch


def time_program(jax, text: str, name: str, repeats: int) -> tuple[float, float]:
    """(median step seconds, compile + first-run seconds) of a program's unsharded step."""
    mod = load_program(text, name)
    params, batch = device_inputs(jax, mod)
    step = mod.make_step(None)
    start = time.perf_counter()
    jax.block_until_ready(step(params, batch))
    first = time.perf_counter() - start
    jax.block_until_ready(step(params, batch))
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(step(params, batch))
        times.append(time.perf_counter() - start)
    del params, batch, step, mod
    return statistics.median(times), first


def predict(pase, model: str, options: dict, configs: dict, devices: int, bytes_per_element: int):
    """(simulated compute s on the busiest device, simulated step s, alpha-beta cost s)."""
    from pase.sim import simulate

    graph = pase.load_graph(model, **options)
    sim = simulate(graph, configs, CLUSTER, devices=devices, bytes_per_element=bytes_per_element,
                   timeline=False)
    ab = pase.evaluate(graph, configs, devices, cost_model="alpha-beta", cluster=CLUSTER,
                       cost_options={"bytes_per_element": bytes_per_element})
    return float(sim.compute_busy.max()), float(sim.step_time), float(ab.total_cost)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cpu", action="store_true", help="run JAX on the CPU")
    ap.add_argument("--quick", action="store_true", help="toy sizes (a check, not a measurement)")
    ap.add_argument("--models", default=None,
                    help=f"comma list of {', '.join(MODELS)} (default all; {', '.join(QUICK)} with --quick)")
    ap.add_argument("--dtype", default=None, help="bfloat16 (default on a GPU) or float32 (CPU)")
    ap.add_argument("--repeats", type=int, default=None, help="timed runs per program (median)")
    ap.add_argument("--budget", type=float, default=200.0,
                    help="seconds after which remaining models are skipped (default 200)")
    ap.add_argument("--out", default=None, help="markdown output file")
    args = ap.parse_args(argv)
    if args.cpu:
        os.environ["JAX_PLATFORMS"] = "cpu"
    wall = time.perf_counter()
    pase = import_pase()
    import jax

    from pase.export import to_jax

    device = jax.devices()[0]
    dtype = args.dtype or ("float32" if device.platform == "cpu" else "bfloat16")
    bpe = 2 if dtype in ("bfloat16", "float16") else 4 if dtype == "float32" else 8
    repeats = args.repeats or (3 if args.quick else 10)
    log(f"# device {device.device_kind} ({device.platform}), jax {jax.__version__}, {dtype}, "
        f"p = {P}, cluster {CLUSTER}")
    models = [m.strip() for m in (args.models or ",".join(QUICK if args.quick else MODELS)).split(",")
              if m.strip()]
    for model in models:
        if model not in MODELS:
            ap.error(f"unknown model {model!r}; choose from {', '.join(MODELS)}")
    rows, skipped = [], []
    for model in models:
        options = MODELS[model][1 if args.quick else 0]
        if time.perf_counter() - wall > args.budget:
            skipped.append(model)
            log(f"# skipping {model}: over the {args.budget:.0f} s budget")
            continue
        log(f"# {model} {options}: solving ...")
        found = strategies(pase, model, options, bpe)
        full = to_jax(model, {}, P, dtype=dtype, model_options=options)
        full_s, full_first = time_program(jax, full, f"{model}_full", repeats)
        sim = predict(pase, model, options, {}, 1, bpe)
        log(f"#   unsharded step {ms(full_s)} ms (compile+first {full_first:.1f} s)")
        rows.append((model, "unsplit (1 device)", "0", full_s, full_s, *sim))
        for label in STRATEGIES:
            strategy = found[label]
            if time.perf_counter() - wall > args.budget:
                skipped.append(f"{model} {label}")
                log(f"# skipping {model} {label}: over the {args.budget:.0f} s budget")
                continue
            if not strategy.configs:
                skipped.append(f"{model} {label} (no strategy: {strategy.solution.status})")
                continue
            split = sum(1 for c in strategy.configs.values() if any(f > 1 for f in c.values()))
            local = to_jax(model, strategy, P, dtype=dtype, local=True, model_options=options)
            local_s, first = time_program(jax, local, f"{model}_local", repeats)
            sim = predict(pase, model, options, strategy.configs, P, bpe)
            log(f"#   {label} ({split} of {len(strategy.configs)} ops split): local share "
                f"{ms(local_s)} ms (compile+first {first:.1f} s), simulated compute {ms(sim[0])} ms")
            rows.append((model, label, f"{split}/{len(strategy.configs)}", full_s, local_s, *sim))
    table = render(rows, device, jax.__version__, dtype, args, skipped, time.perf_counter() - wall)
    print(table, flush=True)
    out = args.out or (str(Path(os.environ["OUT"]) / "gpu_step.md") if os.environ.get("OUT")
                       else str(ROOT / "benchmarks" / "results" / "gpu_step.md"))
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(table)
    log(f"# wrote {out} ({time.perf_counter() - wall:.1f} s)")
    return 0


def render(rows, device, jax_version, dtype, args, skipped, seconds) -> str:
    lines = [
        "# One training step on one GPU vs pase's simulator",
        "",
        stamp() + ".",
        "",
        f"Device: {device.device_kind} ({device.platform}); jax {jax_version}; {dtype}; "
        f"p = {P}, predictions on `{CLUSTER}` "
        f"(simulator efficiency 0.5, {'2' if dtype in ('bfloat16', 'float16') else '4'}-byte "
        f"elements); {args.repeats or (3 if args.quick else 10)} timed runs, median.",
        "",
        "`python3 benchmarks/gpu_step.py" + (" --cpu" if args.cpu else "")
        + (" --quick" if args.quick else "") + "`"
        + (" (toy sizes on a CPU: checks the script, measures nothing)" if args.quick else ""),
        "",
        "| model | strategy | ops split | measured 1-GPU full step ms | measured local-shard step ms "
        "| simulated compute ms per device | ratio measured/simulated | simulated step ms "
        "| alpha-beta cost ms |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for model, label, split, full_s, local_s, sim_compute, sim_step, ab in rows:
        ratio = local_s / sim_compute if sim_compute > 0 else float("nan")
        lines.append(f"| {model} | {label} | {split} | {ms(full_s)} | {ms(local_s)} | {ms(sim_compute)} "
                     f"| {ratio:.3g} | {ms(sim_step)} | {ms(ab)} |")
    lines += [
        "",
        "The unsplit row's local share is the full step and its predictions are for one device. "
        "The local share omits all communication (one GPU), so compare it with the simulated "
        "compute, not the simulated step. Model sizes: "
        + "; ".join(f"{m} {MODELS[m][1 if args.quick else 0]}" for m in sorted({r[0] for r in rows}))
        + ".",
    ]
    if skipped:
        lines.append(f"Skipped (over the {args.budget:.0f} s budget): {', '.join(skipped)}.")
    lines.append(f"Whole run: {seconds:.0f} s.")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())

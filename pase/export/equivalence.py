"""Run exported programs sharded on fake CPU devices and unsharded, and compare.

JAX reads ``XLA_FLAGS=--xla_force_host_platform_device_count=N`` only when its
CPU backend starts, so the programs run in a fresh Python subprocess; the
calling process never imports jax.
"""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from pase import cleanup
from pase.children import check_child
from pase.errors import OptionError, PaseError
from pase.files import write_text_atomic
from pase.ir import Graph
from pase.space import check_devices

COLLECTIVES = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute")

_DRIVER = r'''
import importlib.util, json, re, sys, time
import numpy as np
import jax

KINDS = "|".join(%(kinds)r)
PATTERN = re.compile(r"= (\S+(?: \S+)*?) (" + KINDS + r")(?:-start)?\(")


def compare(a, b):
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    diff = float(np.max(np.abs(a - b))) if a.size else 0.0
    scale = float(np.max(np.abs(b))) if b.size else 0.0
    return diff, diff / scale if scale > 0 else diff


for index, path in enumerate(sys.argv[2:]):
    spec = importlib.util.spec_from_file_location(f"exported{index}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    start = time.perf_counter()
    params, batch = mod.init_params(), mod.make_batch()
    mesh = mod.make_mesh()
    ps, bs = mod.place(params, mesh, mod.PARAMS), mod.place(batch, mesh, mod.DATA)
    compiled = mod.make_step(mesh).lower(ps, bs).compile()
    hlo = compiled.as_text()
    loss_p, grads_p = jax.device_get(compiled(ps, bs))
    loss_1, grads_1 = jax.device_get(mod.make_step(None)(params, batch))
    loss_abs, loss_rel = compare(loss_p, loss_1)
    worst, grad_abs, grad_rel = None, 0.0, 0.0
    for name in sorted(grads_1):
        d_abs, d_rel = compare(grads_p[name], grads_1[name])
        grad_abs = max(grad_abs, d_abs)
        if worst is None or d_rel > grad_rel:
            worst, grad_rel = name, d_rel
    found = [[m.group(2), m.group(1)] for m in PATTERN.finditer(hlo)]
    print(json.dumps({
        "model": mod.MODEL, "devices": mod.DEVICES, "loss_sharded": float(loss_p),
        "loss_single": float(loss_1), "loss_abs_diff": loss_abs, "loss_rel_diff": loss_rel,
        "grad_max_abs_diff": grad_abs, "grad_max_rel_diff": grad_rel, "worst_param": worst,
        "parameters": len(grads_1),
        "collectives": {k: sum(1 for f in found if f[0] == k) for k in KINDS.split("|")},
        "collective_shapes": found, "seconds": time.perf_counter() - start}), flush=True)
'''


_COMPILER = r'''
import importlib.util, json, sys, time
import jax

out = sys.argv[1]
for index, path in enumerate(sys.argv[2:]):
    spec = importlib.util.spec_from_file_location(f"exported{index}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    start = time.perf_counter()
    mesh = mod.make_mesh()
    shapes = lambda table, kinds: {k: jax.ShapeDtypeStruct(
        v[0], mod.DTYPE if kinds(v) else jax.numpy.int32) for k, v in table.items()}
    params = shapes(mod.PARAMS, lambda v: True)
    batch = shapes(mod.DATA, lambda v: v[2] == "normal")
    compiled = mod.make_step(mesh).lower(params, batch).compile()
    with open(f"{out}/hlo{index}.txt", "w") as f:
        f.write(compiled.as_text())
    print(json.dumps({"index": index, "model": mod.MODEL, "devices": mod.DEVICES,
                      "seconds": time.perf_counter() - start}), flush=True)
'''


def _need_jax() -> None:
    if importlib.util.find_spec("jax") is None:
        raise PaseError("the JAX exporter's checks need jax: pip install \"pase[jax]\"")


def check_programs(programs: Sequence[str], devices: int, *, timeout: float = 600,
                   fast_compile: bool = True) -> list[dict[str, Any]]:
    """Run each exported program (source text) on ``devices`` fake CPU devices and on one.

    All programs run in one subprocess (one JAX start-up). Per program the result
    holds both losses, ``loss_abs_diff``/``loss_rel_diff``, ``grad_max_abs_diff``
    and ``grad_max_rel_diff`` (per parameter the largest absolute difference over
    the reference's largest magnitude; the worst parameter in ``worst_param``),
    and the collectives in the sharded step's compiled HLO (``collectives``:
    count per kind; ``collective_shapes``: ``[kind, result shape]``).
    ``fast_compile`` compiles at XLA's backend optimisation level 0 (about half
    the compile time on a CPU; the HLO and its collectives are the same).
    """
    run = _run_programs(_DRIVER % {"kinds": COLLECTIVES}, programs, devices, timeout, fast_compile,
                        doing="", read=lambda run, folder: run)
    lines = [line for line in run.stdout.splitlines() if line.startswith("{")]
    return [json.loads(line) for line in lines]


def _run_programs(script: str, programs: Sequence[str], devices: int, timeout: float,
                  fast_compile: bool, doing: str, read: Callable[[Any, Path], Any]) -> Any:
    """Write ``programs`` to a temporary folder, run ``script`` on them (argv: the
    folder, then each program's path) in a child Python with ``devices`` fake CPU
    devices, and return ``read(completed run, folder)`` while the folder exists.
    ``doing`` prefixes the one-line errors ("compiling ")."""
    devices = check_devices(devices)
    _need_jax()
    if not isinstance(timeout, (int, float)) or not timeout > 0:
        raise OptionError(f"timeout must be a positive number of seconds, got {timeout!r}")
    with cleanup.temp_dir("pase-export-") as tmp:  # removed however the command ends
        paths = []
        for i, text in enumerate(programs):
            path = Path(tmp) / f"program{i}.py"
            write_text_atomic(path, text, what="exported program")
            paths.append(str(path))
        run = _run_child([sys.executable, "-c", script, tmp, *paths],
                         _environment(devices, fast_compile), timeout, tmp, doing)
        # A signal or a failed allocation is the machine's doing, not the input's: exit 1.
        check_child("the JAX compile" if doing else "the JAX run", run.returncode, run.stderr)
        if run.returncode != 0:
            last = (run.stderr.strip().splitlines() or ["(no output)"])[-1]
            raise PaseError(f"{doing}an exported program failed (exit {run.returncode}): {last}")
        return read(run, Path(tmp))


def _run_child(args: list[str], env: dict[str, str], timeout: float, cwd: str,
               doing: str) -> subprocess.CompletedProcess:
    """Run the JAX child in a process group of its own, recorded with :mod:`pase.cleanup`
    and dying with this process (Linux): a timeout, Ctrl-C, SIGTERM or an error kills the
    group (JAX's compile threads and any helper it started) before the folder goes."""
    proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, cwd=cwd,
                            start_new_session=True, preexec_fn=cleanup.die_with_parent())
    cleanup.register_group(proc.pid)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        raise PaseError(f"{doing}the exported programs did not finish within {timeout} s") from None
    finally:
        if proc.returncode is None:
            cleanup.kill_group(proc.pid)
            proc.communicate()
        cleanup.forget_group(proc.pid)
    return subprocess.CompletedProcess(args, proc.returncode, out, err)


def _environment(devices: int, fast_compile: bool) -> dict[str, str]:
    env = dict(os.environ)
    flags = env.get("XLA_FLAGS", "") + f" --xla_force_host_platform_device_count={devices}"
    if fast_compile and "xla_backend_optimization_level" not in flags:
        flags += " --xla_backend_optimization_level=0"
    env["XLA_FLAGS"] = flags.strip()
    env["JAX_PLATFORMS"] = "cpu"
    return env


def compile_programs(programs: Sequence[str], devices: int, *, timeout: float = 600,
                     fast_compile: bool = True) -> list[str]:
    """The compiled HLO text (``compiled.as_text()``) of each exported program's step.

    Compiles, never runs: the arguments are abstract shapes with the programs'
    shardings. All programs compile in one subprocess (one JAX start-up) on
    ``devices`` fake CPU devices; a program for fewer devices uses the first ones.
    """
    return _run_programs(_COMPILER, programs, devices, timeout, fast_compile, doing="compiling ",
                         read=lambda run, folder: [(folder / f"hlo{i}.txt").read_text()
                                                   for i in range(len(programs))])


def run_equivalence(model: str | Path | Graph, strategy: Any, devices: int, *,
                    batch: int | None = None, dtype: str = "float32",
                    model_options: Mapping[str, Any] | None = None,
                    timeout: float = 600, relayout: str = "pase") -> dict[str, Any]:
    """Export ``strategy`` (see :func:`pase.export.to_jax`), run it on ``devices`` fake
    CPU devices and on one device, and return how far loss and gradients differ
    (the keys of :func:`check_programs`)."""
    from pase.export.jax import to_jax

    text = to_jax(model, strategy, devices, batch=batch, dtype=dtype, model_options=model_options,
                  relayout=relayout)
    return check_programs([text], devices, timeout=timeout)[0]

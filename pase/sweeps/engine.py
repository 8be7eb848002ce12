"""Run a spec's grid on Dask, writing each finished run to the store as it comes.

    >>> import pase
    >>> frame = pase.sweep("examples/sweep.toml", db="results.sqlite")   # doctest: +SKIP

The points already in the store are skipped; the others are submitted to a
Dask ``LocalCluster`` of ``workers`` processes (one run at a time each), or to
the scheduler at ``scheduler`` (``tcp://host:8786``), whose workers need pase
installed. Each run is :func:`pase.sweeps.runner.run_point`: a child process
under the spec's time and memory limits, so an overrun is a row with status
``time_limit`` or ``out_of_memory`` and the sweep goes on.

A local cluster keeps everything it writes (Dask's ``dask-scratch-space``, each
run's temporary files such as CBC's model) in one ``pase-sweep-*`` folder, removed
when the sweep ends, however it ends (:mod:`pase.cleanup`).
"""
from __future__ import annotations

import contextlib
import logging
import os
import socket
import subprocess
import time
import warnings
from pathlib import Path
from typing import Any, Callable, Mapping

from pase import cleanup
from pase.errors import OptionError, SolverUnavailableError
from pase.sizes import check_workers
from pase.sweeps.spec import Spec, load_spec, point_key
from pase.sweeps.store import Store, load_results

# Statuses of a run that gave a strategy; every other status counts as failed.
ANSWERED = ("optimal", "feasible")
DEFAULT_DB = "results.sqlite"


def sweep(spec: "str | Path | Mapping[str, Any] | Spec", db: str | Path | None = None, *,
          workers: int | None = None, scheduler: str | None = None, quiet: bool = True,
          progress: Callable[[dict[str, int]], Any] | None = None) -> Any:
    """Run every point of ``spec`` not yet in ``db``; a DataFrame of the spec's rows.

    ``spec`` is a TOML path, a dict of the same shape or a Spec
    (:mod:`pase.sweeps.spec`); ``db`` the SQLite store (default
    ``SPEC.sqlite`` next to a TOML spec, else ``results.sqlite`` in the current directory).
    ``workers`` local worker processes (default: the CPU count) unless
    ``scheduler`` names a running Dask scheduler. ``quiet=False`` shows a tqdm
    progress bar; ``progress`` is called with the counts after each run.
    """
    checked = load_spec(spec)
    require_dask("pase sweep")  # before the store is created: a refusal leaves no file
    if db is None:
        db = Path(spec).with_suffix(".sqlite") if isinstance(spec, (str, Path)) else DEFAULT_DB
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int)
                                or workers < 1):
        raise OptionError(f"workers must be an integer >= 1, got {workers!r}")
    check_workers(workers, "workers")  # more than the machine runs would start for minutes
    if workers is not None and scheduler:
        raise OptionError("give workers (a local cluster) or scheduler (an existing one), not both")
    points = checked.points()
    keys = [point_key(p) for p in points]
    with Store(db) as store:
        done = store.keys()
        todo = [(k, p) for k, p in zip(keys, points) if k not in done]
        if todo:
            _run(checked, todo, store, workers, scheduler, quiet, progress,
                 len(points) - len(todo))
    frame = load_results(db)
    order = {k: i for i, k in enumerate(keys)}
    frame = frame[frame["key"].isin(order)]
    return frame.sort_values("key", key=lambda s: s.map(order)).reset_index(drop=True)


def jobs(spec: Spec, todo: list[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    """What each run is sent: its key, axis values, run settings and provenance."""
    import pase

    run = spec.run
    common = {"time_limit": run.time_limit, "memory_limit": run.memory_limit,
              "wall_limit": run.wall_limit, "seed": run.seed, "repeats": run.repeats,
              "build_budget": run.build_budget, "threads": run.threads,
              "pase_version": pase.__version__, "git_commit": git_commit()}
    return [{"key": key, **point, **common} for key, point in todo]


def require_dask(command: str) -> None:
    """Refuse in one line, naming the extra, when Dask (or tqdm) is not installed."""
    try:
        import distributed  # noqa: F401
        import tqdm  # noqa: F401  (the progress bar)
    except ImportError as exc:
        raise SolverUnavailableError(f'{command} needs Dask: pip install "pase[sweep]"') from exc


def _run(spec: Spec, todo: list[tuple[str, dict[str, Any]]], store: Store, workers: int | None,
         scheduler: str | None, quiet: bool, progress: Callable | None, skipped: int) -> None:
    from distributed import Client, LocalCluster, as_completed

    from pase.sweeps.runner import run_point

    counts = {"done": 0, "failed": 0, "running": 0, "remaining": len(todo), "skipped": skipped}
    bar = None if quiet else _bar(len(todo), skipped)
    cluster = None
    scratch = contextlib.ExitStack()
    if scheduler:
        client = _connect(Client, scheduler)
    else:
        _check_not_bootstrapping()
        try:
            cluster = _local_cluster(LocalCluster, workers or os.cpu_count() or 1, scratch)
        except RuntimeError as exc:  # a worker process did not start
            scratch.close()
            raise OptionError(f"Dask could not start its local workers ({exc}); in a script, call "
                              "pase.sweep under `if __name__ == \"__main__\":`") from exc
        except BaseException:
            scratch.close()
            raise
        client = Client(cluster)
    try:
        slots = max(1, sum(client.nthreads().values()))
        futures = [client.submit(run_point, job, key=f"pase-run-{i}-{time.time_ns()}",
                                 pure=False, priority=-i)
                   for i, job in enumerate(jobs(spec, todo))]
        counts["running"] = min(slots, len(todo))
        if bar is not None:
            bar.set_postfix_str(_postfix(counts), refresh=True)
        lost: list[str] = []
        for future in as_completed(futures):
            try:
                row = future.result()
            except Exception as exc:  # the worker died (KilledWorker...): not stored, retried next time
                lost.append(f"{type(exc).__name__}: {exc}")
                counts["failed"] += 1
            else:
                store.write(row)
                counts["failed" if row.get("status") not in ANSWERED else "done"] += 1
            counts["remaining"] -= 1
            counts["running"] = min(slots, counts["remaining"])
            if bar is not None:
                bar.set_postfix_str(_postfix(counts), refresh=False)
                bar.update(1)
            if progress is not None:
                progress(dict(counts))
            future.release()
        if lost:
            warnings.warn(f"{len(lost)} runs were lost, not stored (first: {lost[0][:300]}); "
                          f"run the sweep again to retry them", RuntimeWarning, stacklevel=3)
    finally:
        if bar is not None:
            bar.close()
        try:
            client.close()
            if cluster is not None:
                cluster.close()
        finally:
            scratch.close()  # the pase-sweep folder, once its workers are gone


def _local_cluster(cluster_cls: Any, workers: int, scratch: contextlib.ExitStack) -> Any:
    """A LocalCluster of ``workers`` one-thread processes writing only under a pase-sweep
    folder that ``scratch`` removes: Dask's scratch space (``local_directory`` and its
    ``temporary-directory``), and each run's TMPDIR (the workers' environment). Its HTTP
    server takes a free port, so another cluster on 8787 is not warned about. Dask's own
    logs are silenced below CRITICAL: a worker's failure reaches pase through its future,
    and on Ctrl-C a busy machine can have the nannies log a cancelled close as an ERROR
    with a traceback, noise the user did not ask for."""
    import dask

    folder = scratch.enter_context(cleanup.temp_dir("pase-sweep-"))
    scratch.enter_context(dask.config.set({"temporary-directory": folder}))
    return cluster_cls(n_workers=workers, threads_per_worker=1, processes=True,
                       dashboard_address=None, scheduler_kwargs={"dashboard_address": ":0"},
                       silence_logs=logging.CRITICAL, local_directory=folder,
                       env={"TMPDIR": folder})


def _check_not_bootstrapping() -> None:
    """Dask starts its workers by re-importing the caller's main module: a script that
    calls ``pase.sweep`` at top level would start a sweep inside each worker, which
    multiprocessing refuses in a long traceback. Say so in one line instead."""
    import multiprocessing

    if getattr(multiprocessing.current_process(), "_inheriting", False):  # multiprocessing's own test
        raise OptionError("pase.sweep was called while a worker process was starting: in a script, "
                          "call it under `if __name__ == \"__main__\":`")


def _postfix(counts: Mapping[str, int]) -> str:
    return (f"done {counts['done']}, failed {counts['failed']}, running {counts['running']}, "
            f"remaining {counts['remaining']}")


def _connect(client_cls: Any, address: str) -> Any:
    try:
        return client_cls(address, timeout="10s")
    except (OSError, TimeoutError) as exc:
        raise OptionError(f"cannot reach a Dask scheduler at {address}: {exc}") from None


def _bar(total: int, skipped: int) -> Any:
    from tqdm import tqdm

    return tqdm(total=total, unit="run", desc=f"sweep ({skipped} already stored)" if skipped
                else "sweep", dynamic_ncols=True)


def git_commit() -> str | None:
    """The commit of the pase checkout this runs from, with ``-dirty`` when it has changes;
    None outside a git checkout."""
    root = Path(__file__).resolve().parents[2]
    if not (root / ".git").exists():
        return None
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True,
                              text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain",
                                "--untracked-files=no"], capture_output=True, text=True,
                               timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return (head + ("-dirty" if dirty else "")) or None


def host() -> str:
    return socket.gethostname()

"""``pase sweep SPEC.toml`` (a grid of runs on Dask, kept in SQLite) and ``pase report``."""
from __future__ import annotations

import argparse

SWEEP_HELP = "run a grid of solves (models x devices x solvers x ...) on Dask, kept in SQLite"
REPORT_HELP = "tables and plots of a sweep's results"


def add_sweep_arguments(s: argparse.ArgumentParser) -> None:
    s.add_argument("spec", metavar="SPEC.toml", help="the sweep spec (docs/sweeps.md)")
    s.add_argument("--db", metavar="RESULTS.sqlite",
                   help="the result store (default: the spec's name with .sqlite); runs already "
                        "in it are skipped")
    where = s.add_mutually_exclusive_group()
    where.add_argument("--workers", type=_positive, metavar="N",
                       help="local Dask worker processes, one run each at a time (default: the "
                            "CPU count)")
    where.add_argument("--scheduler", metavar="ADDRESS",
                       help="a running Dask scheduler, e.g. tcp://host:8786, instead of local "
                            "workers")
    s.add_argument("--quiet", action="store_true", help="no progress bar, only the summary")


def add_report_arguments(s: argparse.ArgumentParser) -> None:
    s.add_argument("db", metavar="RESULTS.sqlite", help="a sweep's result store")
    s.add_argument("-o", "--out", metavar="DIR", default="report",
                   help="output folder (default: report)")
    s.add_argument("--format", choices=("md", "csv"), default="md",
                   help="md: report.md and three PNG plots (default); csv: one results.csv")
    s.add_argument("--views", action="store_true",
                   help="also write a `pase view` page per run (views/run-N.html), linked "
                        "from report.md")


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}")
    return value


def cmd_sweep(args: argparse.Namespace) -> None:
    from pathlib import Path

    from pase.cli import checks
    from pase.sizes import check_workers
    from pase.sweeps import load_spec, sweep

    check_workers(args.workers)  # a million local workers would start for minutes
    spec = load_spec(args.spec)  # a bad spec fails before any worker starts
    db = args.db or str(Path(args.spec).with_suffix(".sqlite"))
    checks.output_file(db, "--db")
    # SIGTERM/SIGHUP unwind like Ctrl-C (pase.cleanup): the sweep shuts its workers
    frame = sweep(spec, db, workers=args.workers, scheduler=args.scheduler, quiet=args.quiet)
    counts = frame["status"].value_counts()
    print(f"{len(frame)} runs in {db}: " + ", ".join(f"{n} {s}" for s, n in counts.items()))


def cmd_report(args: argparse.Namespace) -> None:
    from pase.cli import checks
    from pase.cli.output import wrote
    from pase.errors import OptionError
    from pase.sweeps import load_results
    from pase.sweeps.report import write_report

    checks.output_folder(args.out, "-o")
    if args.views and args.format != "md":
        raise OptionError("--views links each run's page from report.md; it needs --format md")
    views = None
    if args.views:
        from pase.viewer.runs import write_views

        load_results(args.db)  # a missing or foreign store fails before any page is written
        views = write_views(args.db, args.out)
    files = write_report(args.db, args.out, args.format, views)
    for path in files.values():
        wrote(path, data_on_stdout=False)
    if views:
        wrote(f"{args.out}/views/ ({len(views)} pages)", data_on_stdout=False)

"""``pase import FILE.py:FUNCTION -o graph.json``: a PyTorch model as a pase graph."""
from __future__ import annotations

import argparse
import sys
import warnings

from pase.cli import checks
from pase.cli.args import cache_flag, key_values
from pase.cli.output import wrote
from pase.files import STDOUT, write_text_atomic

HELP = "import a PyTorch model (FILE.py:FUNCTION returning the module and example inputs)"


def add_arguments(s: argparse.ArgumentParser) -> None:
    s.add_argument("reference", metavar="FILE.py:FUNCTION",
                   help="a Python file and a function in it returning (module, example_args)")
    s.add_argument("-o", "--output", metavar="FILE",
                   help="write the graph JSON here (default, or -: stdout)")
    s.add_argument("--model-option", action="append", metavar="KEY=VALUE",
                   help="a keyword argument of FUNCTION (repeatable); fuse_elementwise=false, "
                        "unsupported=elementwise and strict=true go to the importer")
    s.add_argument("--no-fuse", action="store_true",
                   help="keep every element-wise op its own op (default: fold chains)")
    s.add_argument("--unsupported", choices=("error", "elementwise"), default=None,
                   help="an ATen op pase cannot model: refuse the model (error, default) or "
                        "approximate it as an element-wise op (elementwise)")
    cache_flag(s)


def cmd_import(args: argparse.Namespace) -> None:
    from pase.frontends.reference import load_reference
    from pase.frontends.torch_logs import quiet_logs

    checks.output_file(args.output, "-o/--output", stdout=True)
    options: dict = key_values(args.model_option, "--model-option")
    if args.no_fuse:
        options["fuse_elementwise"] = False
    if args.unsupported is not None:
        options["unsupported"] = args.unsupported
    with quiet_logs(not getattr(args, "debug", False)), \
            warnings.catch_warnings(record=True) as caught:  # torch's log: only with --debug
        warnings.simplefilter("always")
        graph = load_reference(args.reference, **options)
    for w in caught:  # the importer's approximations, one line each
        print(f"pase: warning: {' '.join(str(w.message).split())}", file=sys.stderr)
    text = graph.to_json() + "\n"
    if write_text_atomic(args.output or STDOUT, text, what="-o/--output", stdout=True):
        wrote(args.output, data_on_stdout=False)

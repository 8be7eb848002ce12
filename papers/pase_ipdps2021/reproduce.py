"""Reproduce the PaSE paper's Table I, Table II and Figure 6 in one command.

    python papers/pase_ipdps2021/reproduce.py [--quick] [--out DIR]

Same as ``pase reproduce pase-ipdps2021``. Writes into ``results/`` next to this
script unless --out says otherwise. See README.md in this folder.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pase.errors import PaseError
from pase.papers import reproduce

HERE = Path(__file__).resolve().parent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="reduced grid (p = 4, 8; 5 s limits), under two minutes")
    parser.add_argument("--out", type=Path, default=HERE / "results",
                        help="output folder (default: %(default)s)")
    args = parser.parse_args(argv)
    try:
        reproduce("pase-ipdps2021", args.out, quick=args.quick,
                  progress=lambda message: print(message, flush=True))
    except PaseError as exc:
        print(f"reproduce: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What the reproduction runs: the full and quick grids, and the paper's published figures."""
from __future__ import annotations

import datetime
import os
import platform
from dataclasses import asdict, dataclass
from typing import Any

MODELS = ("alexnet", "inception_v3", "rnnlm", "transformer", "resnet101")
FIGURE6_MODELS = ("alexnet", "inception_v3", "rnnlm", "transformer")
TITLES = {"alexnet": "AlexNet", "inception_v3": "Inception-v3", "rnnlm": "RNNLM",
          "transformer": "Transformer", "resnet101": "ResNet-101"}
# Figure 6 batch sizes, as in the paper: 128 for the CNNs, 64 for RNNLM and the Transformer.
FIGURE6_BATCH = {"alexnet": 128, "inception_v3": 128, "rnnlm": 64, "transformer": 64}
# Expert strategy per model in Figure 6 ("gnmt" is experts.gnmt_choice; the others are solvers).
EXPERTS = {"alexnet": "owt", "inception_v3": "owt", "rnnlm": "gnmt", "transformer": "megatron"}
CLUSTERS = ("gtx1080ti", "rtx2080ti")

# Table I of the paper (also in docs/cost-model.md): seconds at p = 4, 8, 16, 32, 64 on
# a Sandy Bridge Xeon; AlexNet and RNNLM are given only as ranges over p; no ResNet-101
# figure.
PAPER_TABLE1 = {
    "inception_v3": {4: 14.0, 8: 20.0, 16: 40.0, 32: 86.0, 64: 196.0},
    "transformer": {4: 9.8, 8: 29.0, 16: 131.0, 32: 553.0, 64: 1883.0},
}
PAPER_TABLE1_RANGES = {"alexnet": "0.23-0.48", "rnnlm": "0.06-0.22"}

ILP_SOLVERS = ("ilp-highs", "ilp-cpsat", "ilp-cbc")


@dataclass(frozen=True)
class Settings:
    """One run's grid and limits (immutable; pass a new one to change anything).

    Attributes:
        table1_models, table1_devices: the Table I grid.
        time_limit: seconds per ILP or mcmc run (Table I and Figure 6's mcmc).
        hard_timeout: wall-clock seconds after which an ILP run, executed in a
            child process, is killed (some backends overrun their limit while
            building the model; see the README).
        ilp_max_pairs: ILP runs are skipped when the Problem has more edge
            pair columns than this. Memory: at 1.3-1.5 million columns HiGHS
            and CBC peaked near 2-3 GiB, CP-SAT at 12-15 GiB within 60 s.
        repeats: dp timings are the best of this many runs.
        table2_devices: the device count of Table II.
        figure6_models, figure6_devices, clusters: the Figure 6 grid.
        seed: the mcmc seed.
    """

    quick: bool
    table1_models: tuple[str, ...]
    table1_devices: tuple[int, ...]
    time_limit: float
    hard_timeout: float
    ilp_max_pairs: int
    repeats: int
    table2_devices: int
    figure6_models: tuple[str, ...]
    figure6_devices: tuple[int, ...]
    clusters: tuple[str, ...]
    seed: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


FULL = Settings(quick=False, table1_models=MODELS, table1_devices=(4, 8, 16, 32, 64),
                time_limit=60.0, hard_timeout=180.0, ilp_max_pairs=1_500_000, repeats=3,
                table2_devices=32, figure6_models=FIGURE6_MODELS,
                figure6_devices=(4, 8, 16, 32, 64), clusters=CLUSTERS)
QUICK = Settings(quick=True, table1_models=("alexnet", "inception_v3"), table1_devices=(4, 8),
                 time_limit=5.0, hard_timeout=30.0, ilp_max_pairs=1_500_000, repeats=1,
                 table2_devices=32, figure6_models=FIGURE6_MODELS, figure6_devices=(4, 8),
                 clusters=CLUSTERS)


def machine() -> dict[str, Any]:
    """Where and when this ran: CPU, cores, Python, numpy, date (UTC)."""
    import numpy

    return {"cpu": _cpu_name(), "machine": platform.machine(), "cores": os.cpu_count(),
            "platform": platform.platform(), "python": platform.python_version(),
            "numpy": numpy.__version__,
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}


def machine_line(info: dict[str, Any]) -> str:
    return (f"{info['cpu']} ({info['machine']}, {info['cores']} cores), Python {info['python']}, "
            f"numpy {info['numpy']}, {info['date']}")


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"

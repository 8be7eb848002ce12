"""The expert-designed strategies of the paper's Figure 6.

- AlexNet and Inception-v3: Krizhevsky's "one weird trick" (the ``owt`` solver).
- Transformer: Mesh-TensorFlow's data x model layout (the ``megatron`` solver).
- RNNLM: the GNMT layout, defined here (:func:`gnmt_choice`).

The GNMT layout follows Wu et al., "Google's Neural Machine Translation System"
(arXiv:1609.08144, 2016), section 3: model replicas train data-parallel, and
within a replica each LSTM layer runs on its own device while the softmax layer
is partitioned over the output vocabulary. The PaSE prototype's RNNLM expert
baseline (``benchmarks/rnnlm_gnmt.py`` in baidu-research/PaSE) is this layout
for 2 layers: ``p / 2`` data-parallel replicas, layer 0 of replica ``i`` on
device ``i`` and layer 1 on device ``i + p / 2``. In configuration terms, with
``L`` the layers the LSTM can split (its ``layer``-role dim; 2 for the paper's
RNNLM) and ``m = p // L`` replicas:

=========================  ==========================================================
op                         configuration
=========================  ==========================================================
LSTM                       batch ``m`` x layer ``L``
Embedding                  batch ``m`` (the table is replicated; it runs with the
                           replica's first layer, as in the prototype)
FC producing the logits    batch ``m`` x output features (the vocabulary) ``L``
SoftmaxCrossEntropy        batch ``m`` x classes (its last dim) ``L``
anything else              batch ``m``
=========================  ==========================================================

The prototype ran the projection on the replica's first device and the loss on
one device; the vocabulary split of the projection and loss is GNMT's
partitioned softmax. Splitting the ``layer`` dim is costed (paper model) and
simulated as independent work per layer, i.e. as a perfectly pipelined
wavefront, which is what GNMT's layer placement aims for.

Choices are computed from ``problem.candidates`` (dim names, roles, candidate
configs) like the baselines in :mod:`pase.solvers.baselines`: each op takes the
candidate that splits its dim groups as close to their targets as allowed.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from pase.api import run_solver
from pase.errors import OptionError
from pase.problem import Candidates, Problem, Solution, Status
from pase.solvers.baselines import pick_config

GNMT = "gnmt"


def pick(c: Candidates, groups: Sequence[tuple[Sequence[str], int]]) -> int:
    """Index of the candidate splitting each dim group as close to its target as allowed.

    ``groups`` is ``[(dim names, target)]`` in priority order; dims in no group
    stay unsplit. Among candidates whose group products stay within their
    targets, the lexicographically largest tuple of products (first group
    first) wins; ties go to the lowest index. The all-ones candidate always
    qualifies, so there is always an answer.

        >>> import numpy as np
        >>> c = Candidates("LSTM", ("l", "b"), ("layer", "batch"),
        ...                np.array([[1, 1], [2, 1], [1, 2], [2, 2], [1, 4]]))
        >>> pick(c, [(("b",), 2), (("l",), 2)])
        3
    """
    return pick_config(c, list(groups), by="dims")


def _dims_with_role(c: Candidates, role: str) -> tuple[str, ...]:
    return tuple(d for d, r in zip(c.dims, c.roles) if r == role)


def _max_factor(c: Candidates, dims: Sequence[str]) -> int:
    mask = np.isin(np.array(c.dims), list(dims))
    return int(np.prod(np.asarray(c.configs)[:, mask], axis=1).max()) if mask.any() else 1


def gnmt_choice(problem: Problem, devices: int | None = None) -> tuple[int, ...]:
    """The GNMT layout (module docstring) as candidate indices, memory cap ignored."""
    if problem.candidates is None:
        raise OptionError("the GNMT expert builds its strategy from dim roles and needs a "
                          "Problem made by a cost model (problem.candidates is None)")
    p = problem.devices if devices is None else devices
    if p is None or p < 1:
        raise OptionError(f"the GNMT expert needs a device count >= 1, got {p!r}")
    lstms = [c for c in problem.candidates if c.kind == "LSTM"]
    if not lstms:
        raise OptionError("the GNMT expert lays out LSTM layers; this Problem has no LSTM op")
    layers = min(_max_factor(c, _dims_with_role(c, "layer")) for c in lstms)
    layers = max(1, min(layers, p))
    replicas = p // layers
    choice = []
    for c in problem.candidates:
        batch = _dims_with_role(c, "batch")
        if c.kind == "LSTM":
            groups = [(batch, replicas), (_dims_with_role(c, "layer"), layers)]
        elif c.kind == "FC":
            groups = [(batch, replicas), (_dims_with_role(c, "parameter"), layers)]
        elif c.kind == "SoftmaxCrossEntropy":
            groups = [(batch, replicas), ((c.dims[-1],), layers)]
        else:
            groups = [(batch, replicas)]
        choice.append(pick(c, groups))
    return tuple(choice)


def expert_solution(expert: str, problem: Problem) -> Solution:
    """The expert strategy ``expert`` (``owt``, ``megatron`` or ``gnmt``) on ``problem``."""
    if expert == GNMT:
        choice = gnmt_choice(problem)
        return Solution(choice, problem.evaluate(choice), Status.FEASIBLE, GNMT,
                        stats={"layout": "Wu et al. 2016 (GNMT), see pase.papers.pase_ipdps2021.experts"})
    if expert in ("owt", "megatron"):
        return run_solver(expert, problem)
    raise OptionError(f"unknown expert {expert!r}; known: gnmt, megatron, owt")

"""A parameter read only in a product with constants reaches no op: the import says so,
naming it, instead of leaving it out of the counts silently (the rule's limit in
docs/pytorch.md)."""
import warnings

import pytest

torch = pytest.importorskip("torch")

from pase.counts import parameters  # noqa: E402
from pase.frontends.torch import import_torch  # noqa: E402


class ScaledByConstant(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)
        self.scale = torch.nn.Parameter(torch.ones(4, 4))
        self.register_buffer("mask", torch.ones(4, 4))

    def forward(self, x):
        return (self.fc(x) @ (self.scale @ self.mask)).sum()


def test_a_parameter_no_op_holds_is_named_in_a_warning():
    with pytest.warns(UserWarning, match=r"1 parameter\(s\) that no op holds.*\(scale\)"):
        imp = import_torch(ScaledByConstant(), (torch.randn(2, 4),))
    assert parameters(imp.graph) == 4 * 4 + 4  # fc only: the warning is the whole truth
    assert any("scale" in note for note in imp.approximated)


def test_every_parameter_held_means_no_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        imp = import_torch(torch.nn.Linear(4, 3), (torch.randn(2, 4),))
    assert parameters(imp.graph) == 4 * 3 + 3

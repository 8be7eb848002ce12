"""Op names are unique by construction: a numbered name the importer makes for an FX node
that becomes several ops never takes the name torch.export gave a later node, nor the
path of a module (both were duplicate-name GraphErrors)."""
import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

from pase.frontends.torch import import_torch  # noqa: E402


class Resized(nn.Module):
    """Two resizes in a row, the first of a transposed image: it is re-laid out first
    (Ravel, Unravel, Resize: three ops of one node, the third once ``upsample_nearest2d_1``,
    which is torch's name for the second resize)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)

    def forward(self, x):
        y = F.interpolate(self.conv(x).transpose(2, 3), scale_factor=2.0, mode="nearest")
        return F.interpolate(y, scale_factor=0.5, mode="nearest")


def test_a_resize_split_into_several_ops_leaves_torchs_names_free():
    imp = import_torch(Resized(), (torch.randn(2, 3, 8, 8),))
    resizes = [op for op in imp.graph.ops if op.kind == "Resize"]
    assert [op.outputs[0].shape[2:] for op in resizes] == [(16, 16), (8, 8)]
    assert resizes[1].name == "upsample_nearest2d_1"  # the second resize keeps torch's name
    assert resizes[0].name not in {"upsample_nearest2d", "upsample_nearest2d_1"}
    assert len({op.name for op in imp.graph.ops}) == len(imp.graph.ops)


class Reused(nn.Module):
    """A layer called twice next to a layer whose attribute name is the numbered one."""

    def __init__(self):
        super().__init__()
        self.up, self.up_1 = nn.Linear(8, 8), nn.Linear(8, 8)

    def forward(self, x):
        return self.up_1(self.up(self.up(x)))


def test_a_module_called_twice_does_not_take_another_modules_path():
    imp = import_torch(Reused(), (torch.randn(2, 8),))
    names = [op.name for op in imp.graph.ops]
    assert len(set(names)) == len(names) == 3
    assert names[0] == "up" and names[2] == "up_1"  # each module's first op: its path
    assert imp.ops["up_1"].params[0] == "up_1.weight"

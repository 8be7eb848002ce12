"""Adaptive 1-D pooling (``nn.AdaptiveAvgPool1d``, ``nn.AdaptiveMaxPool1d``): a ReduceMean
over windows of the pooled axis, the axis pinned, on a free axis (cut into windows where
it is made), on the sequence axis after a transpose, and on an axis a norm has locked
(re-laid out first). Counts from torch."""
import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402
from torch_counts import check_import  # noqa: E402  (tests/ is on sys.path)

from pase.frontends.torch import ModelImportError, import_torch  # noqa: E402

check = check_import


class Pooled(nn.Module):
    """``fc``, an optional norm and transpose, the pooling, a head on what it leaves."""

    def __init__(self, size, *, transpose=False, norm=False, pool=nn.AdaptiveAvgPool1d,
                 head=4):
        super().__init__()
        self.fc = nn.Linear(16, 16)
        self.norm = nn.LayerNorm(16) if norm else nn.Identity()
        self.transpose = transpose
        self.pool = pool(size)
        self.head = nn.Linear(size if size > 1 else 16, head)

    def forward(self, x):                        # x: (b, 10, 16)
        y = self.norm(self.fc(x))
        y = self.pool(y.transpose(1, 2) if self.transpose else y)
        return self.head(y.squeeze(-1) if y.shape[-1] == 1 else y)  # global: (b, 16)


def _pool(imp):
    (op,) = [op for op in imp.graph.ops if op.kind == "ReduceMean"]
    return op


def test_global_pooling_of_the_sequence_after_a_transpose():
    imp = check(Pooled(1, transpose=True), torch.randn(2, 10, 16))
    op = _pool(imp)
    (seq,) = [d for d in op.dims if d.size == 10]
    assert seq.role == "sequence" and seq.name in op.pinned
    assert [op.dims[i].name for i in op.attrs["axes"]] == [seq.name]
    assert op.outputs[0].shape == (2, 16) and op.name == "pool"
    assert imp.relayouts == []


def test_pooling_a_free_axis_cuts_it_into_windows_where_it_is_made():
    imp = check(Pooled(4), torch.randn(2, 10, 16))
    op, fc = _pool(imp), imp.graph.op("fc")
    windows = [d for d in op.dims if d.size == 4]
    assert len(windows) == 2 and {d.name for d in windows} <= op.pinned
    assert [op.dims[i] for i in op.attrs["axes"]] == windows[1:]  # each window's 4 entries
    assert fc.outputs[0].shape == (2, 10, 4, 4)  # its 16 features as (4, 4): a free view
    assert imp.relayouts == []


def test_pooling_an_axis_a_norm_locked_is_a_relayout_first():
    imp = check(Pooled(4, norm=True), torch.randn(2, 10, 16))
    kinds = [op.kind for op in imp.graph.ops]
    assert kinds[kinds.index("Norm") + 1:][:3] == ["Ravel", "Unravel", "ReduceMean"]
    assert len(imp.relayouts) == 1


def test_max_pooling_is_priced_as_a_reduction():
    imp = check(Pooled(2, transpose=True, pool=nn.AdaptiveMaxPool1d), torch.randn(2, 10, 16))
    op = _pool(imp)  # torch's (b, 16, 2) in the producer's layout: (b, 2 windows, 16)
    assert op.outputs[0].shape == (2, 2, 16) and op.inputs[0].shape == (2, 2, 5, 16)


def test_sizes_that_do_not_divide_are_refused_in_one_line():
    with pytest.raises(ModelImportError, match="cannot import adaptive_avg_pool1d at "
                       "test_torch_pool1d.py:.*from 10 to 3 .sizes that do not divide"):
        import_torch(Pooled(3, transpose=True), (torch.randn(2, 10, 16),))

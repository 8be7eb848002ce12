"""pase.work.memory: the one set of memory rules, by hand (ZeRO, SC 2020, section 3.1)."""
import numpy as np
import pytest

from pase.cost_models.alpha_beta import AlphaBetaCostModel
from pase.errors import OptionError
from pase.registry import MODELS
from pase.work import op_work
from pase.work.memory import sharded_states, state_split
from pase.work.variants import apply_variant


def test_bytes_per_parameter():
    assert state_split(4, "adam") == (4.0, 4.0, 8.0)       # fp32: weight, gradient, 2 moments
    assert state_split(2, "adam") == (2.0, 2.0, 12.0)      # mixed: + the fp32 master copy
    assert state_split(4, "momentum") == (4.0, 4.0, 4.0)
    assert state_split(4, "sgd") == (4.0, 4.0, 0.0)
    assert state_split(2, "sgd") == (2.0, 2.0, 4.0)        # the master copy alone
    with pytest.raises(OptionError, match="adam"):
        state_split(4, "lamb")


def test_zero_stages_shard_by_hand():
    w, g, o = 2.0, 2.0, 12.0
    assert sharded_states(1000, 0, 4, w, g, o) == 16000
    assert sharded_states(1000, 1, 4, w, g, o) == 1000 * (4 + 3)
    assert sharded_states(1000, 2, 4, w, g, o) == 1000 * (2 + 14 / 4)
    assert sharded_states(1000, 3, 4, w, g, o) == 4000
    with pytest.raises(OptionError, match="0, 1, 2, 3"):
        sharded_states(1000, 4, 4, w, g, o)


def fc1():
    graph = MODELS.get("mlp")()
    return graph.op("fc1")  # dims (b, n, k): 64 x 1024 x 1024, no bias


def test_op_work_states_follow_the_element_size():
    op = fc1()
    cfg = np.array([[1, 2, 2]])
    params = 1024 * 1024 / 4
    half = op_work(op, cfg, bytes_per_element=2)
    assert half.parameter_bytes[0] == params * 2
    assert half.state_bytes[0] == params * 16       # 2 + 2 + 12, as the performance model
    assert half.activation_bytes[0] == 64 * 512 * 2
    assert op_work(op, cfg).state_bytes[0] == params * 16  # fp32 Adam: 4 + 4 + 8


def test_alpha_beta_memory_in_mixed_precision_with_zero_by_hand():
    op = fc1()
    cfg = np.array([[8, 1, 1]])  # data parallel over 8: the whole weight on every device
    model = AlphaBetaCostModel("dgx-a100", bytes_per_element=2).for_devices(8)
    params, out = 1024 * 1024, 8 * 1024 * 2
    assert model.memory(op, cfg)[0] == params * 16 + out
    zero1 = apply_variant(model.work(op, cfg), 1)
    assert zero1.state_bytes[0] == pytest.approx(params * (2 + 2 + 12 / 8), rel=1e-15)
    zero3 = apply_variant(model.work(op, cfg), 3)
    assert zero3.state_bytes[0] == pytest.approx(params * 16 / 8, rel=1e-15)

"""nn.Sequential: order of application, indexing, slicing, iteration, repr, state dicts, save/load."""

from __future__ import annotations

import numpy as np
import pytest

import minitorch
from minitorch import nn
from tests.phase3_support import write_solutions


def _model(seed=0):
    return nn.Sequential(nn.Linear(3, 5, device="cpu", seed=seed), nn.ReLU(),
                         nn.Linear(5, 2, device="cpu", seed=seed + 1))


def test_forward_is_the_layers_in_order_against_float64():
    m = _model()
    x = np.random.default_rng(1).normal(size=(7, 3))
    w1, b1 = m[0].weight.numpy().astype(np.float64), m[0].bias.numpy().astype(np.float64)
    w2, b2 = m[2].weight.numpy().astype(np.float64), m[2].bias.numpy().astype(np.float64)
    expected = np.maximum(x @ w1 + b1, 0) @ w2 + b2
    got = m(minitorch.tensor(x.astype(np.float32), device="cpu")).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


def test_indexing_slicing_iteration_len_repr():
    m = _model()
    assert len(m) == 3 and isinstance(m[1], nn.ReLU) and m[-1] is m[2]
    assert [type(layer).__name__ for layer in m] == ["Linear", "ReLU", "Linear"]
    head = m[:2]
    assert isinstance(head, nn.Sequential) and len(head) == 2 and head[0] is m[0]
    with pytest.raises(IndexError, match="out of range for 3"):
        m[3]
    with pytest.raises(TypeError, match="integers or slices"):
        m["0"]
    with pytest.raises(TypeError, match="argument 1 is a int"):
        nn.Sequential(nn.ReLU(), 3)
    r = repr(m)
    assert r.startswith("Sequential(\n  (0): Linear(in_features=3, out_features=5") and "(1): ReLU()" in r


def test_parameters_named_by_position_and_state_dict_round_trip(tmp_path):
    m = _model(seed=0)
    names = [n for n, _ in m.named_parameters()]
    assert names == ["0.weight", "0.bias", "2.weight", "2.bias"]
    other = _model(seed=10)
    assert not np.array_equal(other[0].weight.numpy(), m[0].weight.numpy())
    other.load_state_dict(m.state_dict())
    for (_, a), (_, b) in zip(m.named_parameters(), other.named_parameters(), strict=True):
        assert np.array_equal(a.numpy(), b.numpy())
    path = tmp_path / "model.npz"
    m.save(path)
    third = _model(seed=20).load(path)
    assert np.array_equal(third[2].bias.numpy(), m[2].bias.numpy())
    with pytest.raises(KeyError, match="missing"):
        nn.Sequential(nn.Linear(3, 5, device="cpu")).load_state_dict(m.state_dict())


def test_gradients_flow_through_every_layer(workspace):
    write_solutions(workspace)  # backward runs on the learner's autograd module
    m = _model()
    x = minitorch.tensor(np.random.default_rng(2).normal(size=(4, 3)).astype(np.float32), device="cpu")
    m(x).sum().backward()
    assert all(p.grad is not None for p in m.parameters())

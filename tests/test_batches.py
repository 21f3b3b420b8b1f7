"""minitorch.batches: the time-ordered split and the mini-batch iterator of the Phase 4 deliverable."""

from __future__ import annotations

import numpy as np
import pytest

import minitorch
from minitorch.batches import MiniBatches, train_test_split


def _rows(n: int, cols: int = 3) -> tuple[np.ndarray, np.ndarray]:
    """Features whose first column is the row number, and a target equal to it: rows can be traced."""
    x = np.zeros((n, cols), np.float32)
    x[:, 0] = np.arange(n)
    x[:, 1:] = np.random.default_rng(n).standard_normal((n, cols - 1))
    return x, np.arange(n, dtype=np.float32).reshape(-1, 1)


def test_split_keeps_time_order_and_the_fraction():
    x, y = _rows(10)
    x_train, x_test, y_train, y_test = train_test_split(x, y)
    assert x_train[:, 0].tolist() == list(range(8)) and x_test[:, 0].tolist() == [8, 9]
    assert y_train[:, 0].tolist() == list(range(8)) and y_test[:, 0].tolist() == [8, 9]
    a_train, a_test = train_test_split(np.arange(7), train_fraction=0.5)
    assert a_train.tolist() == [0, 1, 2] and a_test.tolist() == [3, 4, 5, 6]  # int(7 * 0.5) = 3


@pytest.mark.parametrize("bad", [0.0, 1.0, -0.2, 1.5])
def test_split_rejects_fractions_outside_0_1(bad):
    with pytest.raises(ValueError, match="train_fraction"):
        train_test_split(np.arange(4), train_fraction=bad)


def test_split_rejects_arrays_of_different_lengths():
    with pytest.raises(ValueError, match="array 1 has 4 rows, expected 5"):
        train_test_split(np.arange(5), np.arange(4))
    with pytest.raises(ValueError, match="at least one array"):
        train_test_split()


@pytest.mark.parametrize("n, batch, drop_last, sizes", [
    (10, 4, False, [4, 4, 2]), (10, 4, True, [4, 4]), (8, 4, False, [4, 4]), (3, 5, False, [3]), (1, 1, False, [1]),
])
def test_batch_sizes_and_count(n, batch, drop_last, sizes):
    x, y = _rows(n)
    batches = MiniBatches(x, y, batch, seed=0, drop_last=drop_last, device="cpu")
    got = [(xb.shape[0], yb.shape[0]) for xb, yb in batches]
    assert got == [(s, s) for s in sizes] and len(batches) == len(sizes)


def test_every_epoch_is_a_new_permutation_of_all_rows():
    x, y = _rows(1000)
    batches = MiniBatches(x, y, 64, seed=3, device="cpu")
    orders = []
    for _ in range(3):
        seen = []
        for xb, yb in batches:
            rows = xb.numpy()[:, 0]
            np.testing.assert_array_equal(yb.numpy()[:, 0], rows)  # features and target stay paired
            np.testing.assert_array_equal(xb.numpy(), x[rows.astype(int)])
            seen += rows.astype(int).tolist()
        assert sorted(seen) == list(range(1000))  # every row exactly once an epoch
        orders.append(seen)
    assert orders[0] != orders[1] != orders[2] and orders[0] != list(range(1000))


def test_a_seed_reproduces_the_epochs_and_shuffle_false_keeps_the_order():
    x, y = _rows(50)
    first = [b[0].numpy()[:, 0].tolist() for b in MiniBatches(x, y, 8, seed=7, device="cpu")]
    again = [b[0].numpy()[:, 0].tolist() for b in MiniBatches(x, y, 8, seed=7, device="cpu")]
    assert first == again
    ordered = [b[0].numpy()[:, 0].tolist() for b in MiniBatches(x, y, 8, shuffle=False, device="cpu")]
    assert sum(ordered, []) == list(range(50))


def test_tensors_are_accepted_and_batches_land_on_the_device(device_name):
    x, y = _rows(20)
    batches = MiniBatches(minitorch.from_numpy(x, device="cpu"), minitorch.from_numpy(y, device="cpu"), 6, seed=1,
                          device=device_name)
    xb, yb = next(iter(batches))
    assert isinstance(xb, minitorch.Tensor) and xb.device == device_name and xb.shape == (6, 3)
    assert yb.device == device_name and yb.shape == (6, 1)
    np.testing.assert_array_equal(xb.numpy(), x[batches.last_order[:6]])


def test_bad_arguments_are_named():
    x, y = _rows(5)
    with pytest.raises(TypeError, match="features must be float32, got float64"):
        MiniBatches(x.astype(np.float64), y, 2)
    with pytest.raises(ValueError, match="features have 5 rows but target has 4"):
        MiniBatches(x, y[:4], 2)
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="batch_size must be a positive integer"):
            MiniBatches(x, y, bad)
    with pytest.raises(ValueError, match="row dimension"):
        MiniBatches(np.float32(1.0), np.float32(1.0), 1)

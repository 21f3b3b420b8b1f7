"""Feeding a model: a time-ordered train/test split and shuffled mini-batches (Phase 4's deliverable).

``MiniBatches`` keeps its rows in host memory and copies one batch at a time to the device. Shuffling
means gathering rows in a new order every epoch, and minitorch has no gather kernel (you would write it);
so, like PyTorch's ``DataLoader``, the rows are gathered on the host and each batch crosses the link once,
a few kilobytes per training step.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from minitorch.tensor import Tensor, from_numpy

__all__ = ["MiniBatches", "train_test_split"]


def train_test_split(*arrays: Any, train_fraction: float = 0.8) -> list[Any]:
    """``[a_train, a_test, b_train, b_test, ...]``: the first ``train_fraction`` of the rows, then the rest.

    No shuffling: rows in time order, the model is tested on the sales after the ones it learned from.
    Every array must have the same number of rows; the split is at ``int(rows * train_fraction)``.
    """
    if not arrays:
        raise ValueError("train_test_split expects at least one array")
    if not 0.0 < train_fraction < 1.0:
        raise ValueError(f"train_fraction must be strictly between 0 and 1, got {train_fraction!r}")
    rows = len(arrays[0])
    for i, a in enumerate(arrays):
        if len(a) != rows:
            raise ValueError(f"train_test_split: array {i} has {len(a)} rows, expected {rows} (as array 0)")
    split = int(rows * train_fraction)
    return [part for a in arrays for part in (a[:split], a[split:])]


def _host_rows(name: str, value: Any) -> np.ndarray:
    host = value.numpy() if isinstance(value, Tensor) else np.asarray(value)
    if host.dtype != np.float32:
        raise TypeError(f"MiniBatches: {name} must be float32, got {host.dtype}")
    if host.ndim == 0:
        raise ValueError(f"MiniBatches: {name} must have a row dimension, got a 0-d array")
    return np.ascontiguousarray(host)


class MiniBatches:
    """Iterate over ``(x_batch, y_batch)`` device tensors of ``batch_size`` rows, in a new order every epoch.

    ``features`` and ``target`` (host arrays or tensors, float32, same number of rows) are copied to the
    host once. Each ``iter()`` is one epoch: a fresh permutation of the rows (``shuffle=True``) from a
    generator seeded once with ``seed``, so epochs differ from each other and a run is reproducible.
    The last batch holds the remaining rows unless ``drop_last`` is set.
    """

    def __init__(self, features: Any, target: Any, batch_size: int, *, shuffle: bool = True,
                 seed: int | None = None, drop_last: bool = False, device: str | None = None) -> None:
        self.features = _host_rows("features", features)
        self.target = _host_rows("target", target)
        if len(self.features) != len(self.target):
            raise ValueError(f"MiniBatches: features have {len(self.features)} rows but target has "
                             f"{len(self.target)}")
        if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
            raise ValueError(f"MiniBatches: batch_size must be a positive integer, got {batch_size!r}")
        self.batch_size = int(batch_size)
        self.shuffle, self.drop_last, self.device = shuffle, drop_last, device
        self._rng = np.random.default_rng(seed)
        self.last_order: np.ndarray | None = None  # the row order of the latest epoch (for tests)

    @property
    def rows(self) -> int:
        return len(self.features)

    def __len__(self) -> int:
        """Batches in one epoch."""
        full, rest = divmod(self.rows, self.batch_size)
        return full + (1 if rest and not self.drop_last else 0)

    def __iter__(self) -> Iterator[tuple[Tensor, Tensor]]:
        order = self._rng.permutation(self.rows) if self.shuffle else np.arange(self.rows)
        self.last_order = order
        for b in range(len(self)):
            rows = order[b * self.batch_size:(b + 1) * self.batch_size]
            yield (from_numpy(self.features[rows], device=self.device),
                   from_numpy(self.target[rows], device=self.device))

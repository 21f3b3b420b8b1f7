"""Text for language models (Phase 7): a character tokenizer, a train/validation split, and windows of
tokens (inputs and the targets one position later) drawn at random for training or fixed for evaluation."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np

__all__ = ["CharTokenizer", "RandomWindows", "evaluation_windows", "train_val_split", "windows_at"]


class CharTokenizer:
    """One token per distinct character: ids 0..vocab_size-1 in the order of ``chars`` (sorted by
    ``from_text``)."""

    def __init__(self, chars: Sequence[str]) -> None:
        chars = list(chars)
        if not chars or any(not isinstance(c, str) or len(c) != 1 for c in chars) or len(set(chars)) != len(chars):
            raise ValueError("CharTokenizer: expected distinct single characters")
        self.chars = chars
        self._ids = {c: i for i, c in enumerate(chars)}

    @classmethod
    def from_text(cls, text: str) -> CharTokenizer:
        """The characters of ``text``, sorted by code point."""
        return cls(sorted(set(text)))

    @property
    def vocab_size(self) -> int:
        return len(self.chars)

    def encode(self, text: str) -> np.ndarray:
        """int32 ids of the characters of ``text``."""
        try:
            return np.fromiter((self._ids[c] for c in text), dtype=np.int32, count=len(text))
        except KeyError as err:
            raise ValueError(f"CharTokenizer.encode: {err.args[0]!r} is not in the vocabulary of "
                             f"{self.vocab_size} characters") from None

    def decode(self, ids: Sequence[int] | np.ndarray) -> str:
        ids = np.asarray(ids).reshape(-1)
        if ids.size and (ids.min() < 0 or ids.max() >= self.vocab_size):
            raise ValueError(f"CharTokenizer.decode: ids must be in [0, {self.vocab_size}), got {ids.min()} to "
                             f"{ids.max()}")
        return "".join(self.chars[i] for i in ids)


def train_val_split(ids: np.ndarray, train_fraction: float = 0.9) -> tuple[np.ndarray, np.ndarray]:
    """The first ``train_fraction`` of the tokens for training, the rest for validation (in text order)."""
    if not 0 < train_fraction < 1:
        raise ValueError(f"train_val_split: train_fraction must be in (0, 1), got {train_fraction}")
    n = int(train_fraction * len(ids))
    return ids[:n], ids[n:]


def windows_at(ids: np.ndarray, starts: np.ndarray, block_size: int) -> tuple[np.ndarray, np.ndarray]:
    """(x, y), each (len(starts), block_size) int32: x = ids[s : s + block_size], y the same one later."""
    offsets = np.asarray(starts, np.int64)[:, None] + np.arange(block_size)
    return ids[offsets].astype(np.int32), ids[offsets + 1].astype(np.int32)


def evaluation_windows(ids: np.ndarray, block_size: int, count: int) -> tuple[np.ndarray, np.ndarray]:
    """``count`` windows whose starts are spread evenly over ``ids`` (the same ones every time)."""
    last = len(ids) - block_size - 1
    if last < 0:
        raise ValueError(f"evaluation_windows: {len(ids)} tokens hold no window of {block_size} + 1")
    return windows_at(ids, np.linspace(0, last, count).round().astype(np.int64), block_size)


class RandomWindows:
    """Batches of ``batch_size`` windows at random starts, from ``seed``: ``x, y = windows.sample()``, or
    iterate (endlessly)."""

    def __init__(self, ids: np.ndarray, block_size: int, batch_size: int, seed: int | None = None) -> None:
        if len(ids) < block_size + 1:
            raise ValueError(f"RandomWindows: {len(ids)} tokens hold no window of {block_size} + 1")
        self.ids, self.block_size, self.batch_size = np.asarray(ids), int(block_size), int(batch_size)
        self._rng = np.random.default_rng(seed)

    def sample(self) -> tuple[np.ndarray, np.ndarray]:
        starts = self._rng.integers(0, len(self.ids) - self.block_size, self.batch_size)
        return windows_at(self.ids, starts, self.block_size)

    def __iter__(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        while True:
            yield self.sample()

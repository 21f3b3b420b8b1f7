"""Dataset loaders: checksums, parsing, and the data-directory override (no network in tests)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from minitorch import data

SHARED = os.environ.get("MINITORCH_DATA_DIR") or str(Path(__file__).resolve().parents[2] / "shared" / "data")
needs_shared = pytest.mark.skipif(not (Path(SHARED) / "mnist").is_dir(), reason="no local copy of the datasets")


@pytest.fixture(autouse=True)
def no_network(monkeypatch):
    def refuse(url, dest):
        raise OSError(f"network disabled in tests ({url})")

    monkeypatch.setattr(data, "_download", refuse)


@needs_shared
def test_mnist_loads_and_matches_known_facts():
    images, labels = data.load_mnist("train", Path(SHARED))
    assert images.shape == (60000, 28, 28) and images.dtype == np.uint8
    assert labels.shape == (60000,) and set(np.unique(labels)) == set(range(10))
    assert labels[:5].tolist() == [5, 0, 4, 1, 9]  # the well-known first training labels
    test_images, test_labels = data.load_mnist("test", Path(SHARED))
    assert test_images.shape == (10000, 28, 28) and test_labels[:3].tolist() == [7, 2, 1]
    assert 33.0 < images.mean() < 33.5  # mean pixel of the training set is 33.3


@needs_shared
def test_tinyshakespeare():
    text = data.load_tinyshakespeare(Path(SHARED))
    assert len(text) == 1_115_394 and text.startswith("First Citizen:")
    assert len(set(text)) == 65


def test_env_override(monkeypatch, tmp_path):
    monkeypatch.setenv("MINITORCH_DATA_DIR", str(tmp_path))
    assert data.data_dir() == tmp_path


def test_corrupt_file_is_rejected(tmp_path):
    (tmp_path / "tinyshakespeare").mkdir()
    (tmp_path / "tinyshakespeare" / "input.txt").write_text("not shakespeare")
    with pytest.raises(data.DataError, match=r"not the expected file: sha256 .* expected 86c4e6aa"):
        data.load_tinyshakespeare(tmp_path)


def test_failed_download_says_what_to_do(tmp_path):
    with pytest.raises(data.DataError, match=r"(?s)could not download input.txt.*network disabled.*MINITORCH_DATA_DIR"):
        data.load_tinyshakespeare(tmp_path)
    assert list((tmp_path / "tinyshakespeare").iterdir()) == []  # no partial file left behind


def test_download_is_verified_before_use(tmp_path, monkeypatch):
    monkeypatch.setattr(data, "_download", lambda url, dest: Path(dest).write_text("truncated"))
    with pytest.raises(data.DataError, match=r"sha256 .*expected 86c4e6aa"):
        data.load_tinyshakespeare(tmp_path)


def test_unknown_dataset_and_split():
    with pytest.raises(data.DataError, match="unknown dataset 'cifar'"):
        data.fetch("cifar")
    with pytest.raises(ValueError, match="'train' or 'test'"):
        data.load_mnist("validation")


def _shift_reference(image: np.ndarray, dy: int, dx: int, fill: int) -> np.ndarray:
    """image moved dy pixels down and dx right, pixel by pixel."""
    out = np.full_like(image, fill)
    height, width = image.shape[-2:]
    for y in range(height):
        for x in range(width):
            if 0 <= y - dy < height and 0 <= x - dx < width:
                out[..., y, x] = image[..., y - dy, x - dx]
    return out


@pytest.mark.parametrize("shape, max_shift", [((40, 7, 5), 1), ((300, 2, 6, 9), 2), ((3, 4, 4), 0)])
def test_random_shift_moves_each_image_by_an_offset_in_range(shape, max_shift):
    images = np.random.default_rng(0).integers(1, 255, shape, dtype=np.uint8)  # no pixel equals the fill
    shifted = data.random_shift(images, np.random.default_rng(1), max_shift, fill=0)
    assert shifted.shape == images.shape and shifted.dtype == images.dtype
    seen = set()
    for image, got in zip(images, shifted, strict=True):
        matches = [(dy, dx) for dy in range(-max_shift, max_shift + 1) for dx in range(-max_shift, max_shift + 1)
                   if np.array_equal(got, _shift_reference(image, dy, dx, 0))]
        assert len(matches) == 1, "each image is its original moved by one offset within max_shift"
        seen.add(matches[0])
    if len(images) >= 300:  # every offset drawn (25 of them, 300 draws)
        assert len(seen) == (2 * max_shift + 1) ** 2, f"offsets drawn: {sorted(seen)}"
    assert np.array_equal(data.random_shift(images, np.random.default_rng(1), max_shift), shifted)  # seeded


def test_random_shift_fills_and_checks_its_arguments():
    images = np.ones((200, 6, 6), np.float32)
    shifted = data.random_shift(images, np.random.default_rng(2), 1, fill=-0.5)
    uncovered = shifted == -0.5
    assert uncovered.any() and set(np.unique(shifted)) == {-0.5, 1.0}
    assert uncovered.sum(axis=(1, 2)).max() == 11  # a corner move uncovers a row and a column: 6 + 6 - 1
    with pytest.raises(ValueError, match="max_shift must be an int from 0 to 5"):
        data.random_shift(images, np.random.default_rng(0), 6)
    with pytest.raises(ValueError, match="max_shift"):
        data.random_shift(images, np.random.default_rng(0), 1.5)
    with pytest.raises(ValueError, match=r"shape \(N, ..., H, W\)"):
        data.random_shift(np.ones((6, 6)), np.random.default_rng(0), 1)

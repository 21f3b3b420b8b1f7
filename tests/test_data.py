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

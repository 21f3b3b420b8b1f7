"""Datasets for the deliverables: download once, verify every byte, load into NumPy.

Files are looked up in the data directory (``MINITORCH_DATA_DIR``, else ``data/`` at the repository
root, else ``~/.cache/minitorch/data``), under one sub-directory per dataset. A missing file is
downloaded from its canonical source; every file, downloaded or found, must match its SHA-256, so a
truncated download or a different version is an error, never a silently different result.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import tempfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import numpy as np

REPO_DATA = Path(__file__).resolve().parent.parent / "data"


@dataclass(frozen=True)
class RemoteFile:
    name: str
    sha256: str
    urls: tuple[str, ...]


_MNIST_MIRRORS = ("https://ossci-datasets.s3.amazonaws.com/mnist/", "http://yann.lecun.com/exdb/mnist/")

DATASETS: dict[str, tuple[RemoteFile, ...]] = {
    "mnist": tuple(RemoteFile(name, digest, tuple(m + name for m in _MNIST_MIRRORS)) for name, digest in (
        ("train-images-idx3-ubyte.gz", "440fcabf73cc546fa21475e81ea370265605f56be210a4024d2ca8f203523609"),
        ("train-labels-idx1-ubyte.gz", "3552534a0a558bbed6aed32b30c495cca23d567ec52cac8be1a0730e8010255c"),
        ("t10k-images-idx3-ubyte.gz", "8d422c7b0a1c1c79245a5bcf07fe86e33eeafee792b84584aec276f5a2dbc4e6"),
        ("t10k-labels-idx1-ubyte.gz", "f7ae60f92e00ec6debd23a6088c31dbd2371eca3ffa0defaefb259924204aec6"),
    )),
    "tinyshakespeare": (RemoteFile(
        "input.txt", "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed",
        ("https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt",)),),
}


class DataError(RuntimeError):
    """A dataset file is missing, cannot be downloaded, or is not the expected file."""


def data_dir() -> Path:
    env = os.environ.get("MINITORCH_DATA_DIR", "").strip()
    if env:
        return Path(env).expanduser()
    if REPO_DATA.is_dir():
        return REPO_DATA
    return Path.home() / ".cache" / "minitorch" / "data"


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _download(url: str, dest: Path) -> None:
    with urllib.request.urlopen(url, timeout=60) as response, open(dest, "wb") as out:  # noqa: S310
        while chunk := response.read(1 << 20):
            out.write(chunk)


def fetch(dataset: str, root: Path | None = None) -> Path:
    """The directory holding ``dataset``'s verified files, downloading any that are missing."""
    if dataset not in DATASETS:
        raise DataError(f"unknown dataset {dataset!r}: expected one of {', '.join(sorted(DATASETS))}")
    folder = (root or data_dir()) / dataset
    for remote in DATASETS[dataset]:
        path = folder / remote.name
        if not path.exists():
            folder.mkdir(parents=True, exist_ok=True)
            errors = []
            for url in remote.urls:
                fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{remote.name}.")
                os.close(fd)
                try:
                    _download(url, Path(tmp))
                    got = sha256_file(Path(tmp))
                    if got != remote.sha256:
                        raise DataError(f"sha256 {got}, expected {remote.sha256}")
                    os.replace(tmp, path)
                    break
                except Exception as exc:  # try the next mirror
                    errors.append(f"{url}: {exc}")
                    Path(tmp).unlink(missing_ok=True)
            else:
                raise DataError(f"could not download {remote.name} for {dataset!r}:\n  " + "\n  ".join(errors)
                                + f"\nPut the file in {folder} yourself, or set MINITORCH_DATA_DIR.")
        got = sha256_file(path)
        if got != remote.sha256:
            raise DataError(f"{path} is not the expected file: sha256 {got}, expected {remote.sha256}. "
                            f"Delete it to download it again.")
    return folder


def _read_idx(path: Path) -> np.ndarray:
    with gzip.open(path, "rb") as f:
        raw = f.read()
    magic = int.from_bytes(raw[:4], "big")
    if magic >> 8 != 0x08:  # 0x08 = unsigned bytes
        raise DataError(f"{path} is not an IDX file of unsigned bytes (magic {magic:#x})")
    ndim = magic & 0xFF
    shape = tuple(int.from_bytes(raw[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim))
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(shape)


def load_mnist(split: str = "train", root: Path | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``(images, labels)``: uint8 arrays of shape (N, 28, 28) and (N,); N = 60000 (train) or 10000 (test)."""
    prefix = {"train": "train", "test": "t10k"}.get(split)
    if prefix is None:
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    folder = fetch("mnist", root)
    images = _read_idx(folder / f"{prefix}-images-idx3-ubyte.gz")
    labels = _read_idx(folder / f"{prefix}-labels-idx1-ubyte.gz")
    if images.shape[0] != labels.shape[0]:
        raise DataError(f"MNIST {split}: {images.shape[0]} images but {labels.shape[0]} labels")
    return images, labels


def load_tinyshakespeare(root: Path | None = None) -> str:
    """The Tiny Shakespeare corpus (1,115,394 characters) as one string."""
    return (fetch("tinyshakespeare", root) / "input.txt").read_text(encoding="utf-8")

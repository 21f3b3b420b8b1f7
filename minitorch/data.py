"""Datasets for the deliverables: download once, verify every byte, load into NumPy.

Files are looked up in the data directory (``MINITORCH_DATA_DIR``, else ``data/`` at the repository
root, else ``~/.cache/minitorch/data``), under one sub-directory per dataset. A missing file is
downloaded from its canonical source; every file, downloaded or found, must match its SHA-256, so a
truncated download or a different version is an error, never a silently different result.

``sales.tsv`` (Phase 4) is not downloaded: it is the learner's own file, or the synthetic one that
``data/make_sales.py`` writes (``make data``, or ``ensure_sales()``); ``load_sales`` validates every line.
"""

from __future__ import annotations

import datetime
import gzip
import hashlib
import importlib.util
import math
import os
import re
import tempfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

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


def random_shift(images: np.ndarray, rng: np.random.Generator, max_shift: int = 1, fill: int | float = 0
                 ) -> np.ndarray:
    """A copy of ``images`` (N, ..., H, W) with each image moved by a random whole number of pixels, from
    ``-max_shift`` to ``max_shift`` along each of its last two axes (every offset equally likely), the pixels
    it uncovers set to ``fill``. Training on digits moved by a pixel teaches a network that a digit moved is
    the same digit: the data augmentation of the MNIST recipe (Phase 6)."""
    images = np.asarray(images)
    if images.ndim < 3:
        raise ValueError(f"random_shift: expected images of shape (N, ..., H, W), got shape {images.shape}")
    if isinstance(max_shift, bool) or not isinstance(max_shift, (int, np.integer)) or not (
            0 <= max_shift < min(images.shape[-2:])):
        raise ValueError(f"random_shift: max_shift must be an int from 0 to {min(images.shape[-2:]) - 1} for "
                         f"images of {images.shape[-2]} x {images.shape[-1]}, got {max_shift!r}")
    k = int(max_shift)
    offsets = rng.integers(-k, k + 1, size=(len(images), 2))
    out = np.full_like(images, fill)
    height, width = images.shape[-2:]
    for dy in range(-k, k + 1):  # one slice copy per offset: (2k + 1)^2 copies, not one per image
        for dx in range(-k, k + 1):
            chosen = np.flatnonzero((offsets[:, 0] == dy) & (offsets[:, 1] == dx))
            if chosen.size:
                out[chosen, ..., max(dy, 0):height + min(dy, 0), max(dx, 0):width + min(dx, 0)] = \
                    images[chosen, ..., max(-dy, 0):height + min(-dy, 0), max(-dx, 0):width + min(-dx, 0)]
    return out


def load_tinyshakespeare(root: Path | None = None) -> str:
    """The Tiny Shakespeare corpus (1,115,394 characters) as one string."""
    return (fetch("tinyshakespeare", root) / "input.txt").read_text(encoding="utf-8")


# --- sales.tsv: the Phase 4 deliverable's retail transactions -------------------------------------------
# The roadmap's file is its author's own data; the course generates one with the same schema
# (data/make_sales.py, run by `make data`). A learner's own sales.tsv is used instead, never overwritten.

SALES_FILE = "sales.tsv"
SALES_FIELDS = ("product", "code", "date", "entered", "quantity", "unit_price", "category", "user", "total",
                "status")
SALES_GENERATOR = REPO_DATA / "make_sales.py"
# total must be quantity × unit price to within a cent, or 0.01% of larger totals (prices printed rounded).
TOTAL_TOLERANCE = (0.01, 1e-4)

_CODE = re.compile(r"[A-Z]{2}[0-9]{5}")
_DATE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
_TIMESTAMP = re.compile(r"([0-9]{4}-[0-9]{2}-[0-9]{2}) ([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.([0-9]{1,6}))?")
_EPOCH = datetime.date(1970, 1, 1).toordinal()


@dataclass(frozen=True)
class SalesTable:
    """The columns of ``sales.tsv`` as NumPy arrays, one element per sale, in file order.

    Text columns (``product``, ``code``, ``category``, ``user``) hold Python strings (object arrays);
    ``date`` is ``datetime64[D]``, ``entered`` ``datetime64[ms]``, ``status`` int64, the rest float64.
    ``malformed`` maps the line number (from 1) of each skipped line to what was wrong with it.
    """

    product: np.ndarray
    code: np.ndarray
    date: np.ndarray
    entered: np.ndarray
    quantity: np.ndarray
    unit_price: np.ndarray
    category: np.ndarray
    user: np.ndarray
    total: np.ndarray
    status: np.ndarray
    path: Path
    malformed: dict[int, str]

    @property
    def n_skipped(self) -> int:
        return len(self.malformed)

    def __len__(self) -> int:
        return len(self.total)


class SalesFeatures(NamedTuple):
    features: np.ndarray  # float32 (rows, n_features)
    target: np.ndarray  # float32 (rows,): total price
    names: list[str]  # one per feature column


def sales_path() -> Path:
    """Where ``load_sales`` looks: ``sales.tsv`` in the data directory, else in the repository's ``data/``.

    When neither exists, the place ``ensure_sales`` writes to: the repository's ``data/`` (as ``make
    data`` does), or the data directory when the package is installed without the repository.
    """
    candidates = [data_dir() / SALES_FILE, REPO_DATA / SALES_FILE]
    for candidate in candidates:
        if candidate.exists():
            return candidate
    return candidates[1] if REPO_DATA.is_dir() else candidates[0]


def ensure_sales() -> Path:
    """The path of ``sales.tsv``, writing the synthetic file first if there is none (never overwriting)."""
    path = sales_path()
    if path.exists():
        return path
    if not SALES_GENERATOR.exists():
        raise DataError(f"no {SALES_FILE} at {path} and no generator at {SALES_GENERATOR}: put your own "
                        f"{SALES_FILE} there, or run data/make_sales.py from the course repository.")
    spec = importlib.util.spec_from_file_location("make_sales", SALES_GENERATOR)
    generator = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generator)
    try:
        return generator.write(path)
    except FileExistsError:  # written meanwhile by another process: use it
        return path


class _MalformedLineError(ValueError):
    pass


def _number(text: str, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise _MalformedLineError(f"{what} {text!r} is not a number") from None
    if not math.isfinite(value):
        raise _MalformedLineError(f"{what} {text!r} is not a finite number")
    return value


def _day(text: str, what: str, days: dict[str, int]) -> int:
    """Days since 1970-01-01 of an ISO date ``YYYY-MM-DD`` (cached: a file has few distinct dates)."""
    day = days.get(text)
    if day is None:
        try:
            if not _DATE.fullmatch(text):
                raise ValueError
            day = datetime.date.fromisoformat(text).toordinal() - _EPOCH
        except ValueError:
            raise _MalformedLineError(f"{what} {text!r} is not a date YYYY-MM-DD") from None
        days[text] = day
    return day


def _parse_sales_line(line: str, days: dict[str, int], strings: dict[str, str]) -> tuple:
    fields = line.split("\t")
    if len(fields) != len(SALES_FIELDS):
        raise _MalformedLineError(f"expected {len(SALES_FIELDS)} tab-separated fields, got {len(fields)}")
    product, code, date, entered, quantity, unit_price, category, user, total, status = fields
    if not product.strip():
        raise _MalformedLineError("empty product name")
    if not _CODE.fullmatch(code):
        raise _MalformedLineError(f"product code {code!r} is not two capital letters and five digits (like TY00015)")
    if not category.strip():
        raise _MalformedLineError("empty category")
    day = _day(date, "date", days)
    stamp = _TIMESTAMP.fullmatch(entered)
    hour, minute, second = (int(stamp.group(i)) for i in (2, 3, 4)) if stamp else (0, 0, 0)
    if not stamp or hour > 23 or minute > 59 or second > 59:
        raise _MalformedLineError(f"entry timestamp {entered!r} is not YYYY-MM-DD HH:MM:SS[.fff]")
    millis = int((stamp.group(5) or "0").ljust(3, "0")[:3])
    entered_ms = (((_day(stamp.group(1), "entry timestamp date", days) * 24 + hour) * 60 + minute) * 60
                  + second) * 1000 + millis
    q, p, t = (_number(quantity, "quantity"), _number(unit_price, "unit price"), _number(total, "total price"))
    if abs(t - q * p) > TOTAL_TOLERANCE[0] + TOTAL_TOLERANCE[1] * abs(q * p):
        raise _MalformedLineError(f"total price {total} is not quantity × unit price = {quantity} × {unit_price} = {q * p:g}")
    try:
        code_status = int(status)
    except ValueError:
        raise _MalformedLineError(f"status code {status!r} is not an integer") from None
    return (strings.setdefault(product, product), strings.setdefault(code, code), day, entered_ms, q, p,
            strings.setdefault(category, category), strings.setdefault(user, user), t, code_status)


def load_sales(path: str | Path | None = None, *, skip_malformed: bool = False) -> SalesTable:
    """Read and validate ``sales.tsv`` (default: ``sales_path()``): 10 tab-separated fields, no header.

    A malformed line raises ``ValueError`` naming its line number and what is wrong; with
    ``skip_malformed=True`` it is skipped instead and recorded in ``SalesTable.malformed``.
    """
    path = Path(path) if path is not None else sales_path()
    if not path.exists():
        raise DataError(f"{path} does not exist: run `make data` (or minitorch.data.ensure_sales()) to write the "
                        f"synthetic sales file, or put your own {SALES_FILE} there.")
    rows, malformed, days, strings = [], {}, {}, {}
    with open(path, encoding="utf-8", errors="replace") as f:  # universal newlines: \r\n files load too
        for number, line in enumerate(f, start=1):
            try:
                rows.append(_parse_sales_line(line.rstrip("\n"), days, strings))
            except _MalformedLineError as exc:
                if not skip_malformed:
                    raise ValueError(f"{path}, line {number}: {exc} (load_sales(..., skip_malformed=True) skips "
                                     f"and counts such lines)") from None
                malformed[number] = str(exc)
    columns = list(zip(*rows, strict=True)) if rows else [()] * len(SALES_FIELDS)
    dtypes = (object, object, "datetime64[D]", "datetime64[ms]", np.float64, np.float64, object, object,
              np.float64, np.int64)
    arrays = {}
    for name, values, dtype in zip(SALES_FIELDS, columns, dtypes, strict=True):
        if dtype == "datetime64[D]" or dtype == "datetime64[ms]":
            arrays[name] = np.array(values, dtype=np.int64).astype(dtype)
        elif dtype is object:
            arrays[name] = np.empty(len(values), dtype=object)
            arrays[name][:] = values
        else:
            arrays[name] = np.array(values, dtype=dtype)
    return SalesTable(**arrays, path=path, malformed=malformed)


def sales_features(table: SalesTable, drop_status: int | None = 3) -> SalesFeatures:
    """The Phase 4 regression's inputs and target, rows in file order (train on the first 80%).

    Features: quantity, unit price, one column per category (one-hot, categories sorted by name) and the
    day of the year of the sale (1..366), unnormalised. Target: total price. Rows whose status code is
    ``drop_status`` (3: voided sales) are left out; ``None`` keeps every row.
    """
    keep = np.ones(len(table), dtype=bool) if drop_status is None else table.status != drop_status
    categories, category_index = np.unique(table.category[keep].astype(str), return_inverse=True)
    date = table.date[keep]
    day_of_year = (date - date.astype("datetime64[Y]")).astype(np.int64) + 1
    n_rows = int(keep.sum())
    features = np.zeros((n_rows, 3 + len(categories)), dtype=np.float32)
    features[:, 0] = table.quantity[keep]
    features[:, 1] = table.unit_price[keep]
    features[np.arange(n_rows), 2 + category_index.reshape(-1)] = 1.0
    features[:, -1] = day_of_year
    names = ["quantity", "unit_price", *(f"category={c}" for c in categories), "day_of_year"]
    return SalesFeatures(features, table.total[keep].astype(np.float32), names)

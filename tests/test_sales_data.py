"""The synthetic sales.tsv (data/make_sales.py) and its loader (minitorch.data.load_sales, sales_features)."""

from __future__ import annotations

import datetime
import hashlib
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from minitorch import data

GENERATOR = Path(__file__).resolve().parent.parent / "data" / "make_sales.py"
_spec = importlib.util.spec_from_file_location("make_sales", GENERATOR)
make_sales = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(make_sales)

SMALL_ROWS = 3000
SMALL_SHA256 = "2a8f74986a174f857f3ebaf1fe02d901028d9298e8fa4572ddc98995fd911436"  # generate(3000), default seed


@pytest.fixture(scope="module")
def default_file(tmp_path_factory) -> Path:
    """The default file, generated once for the module (about a second)."""
    return make_sales.write(tmp_path_factory.mktemp("sales") / "sales.tsv")


@pytest.fixture(scope="module")
def default_table(default_file) -> data.SalesTable:
    return data.load_sales(default_file)


@pytest.fixture
def repo_data(tmp_path, monkeypatch) -> Path:
    """An empty repository data/ and an empty MINITORCH_DATA_DIR: where sales.tsv is looked for."""
    repo, override = tmp_path / "repo_data", tmp_path / "override"
    repo.mkdir()
    override.mkdir()
    monkeypatch.setattr(data, "REPO_DATA", repo)
    monkeypatch.setenv("MINITORCH_DATA_DIR", str(override))
    return repo


def small_lines(rows: int = 20) -> list[str]:
    return make_sales.generate(rows).decode().splitlines(keepends=True)


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(lines), encoding="utf-8", newline="")
    return path


# --- the generator ----------------------------------------------------------------------------------------

def test_default_file_is_the_recorded_one(default_file):
    content = default_file.read_bytes()
    assert hashlib.sha256(content).hexdigest() == make_sales.SALES_SHA256
    assert content.count(b"\n") == make_sales.DEFAULT_ROWS == 366_500 and content.endswith(b"\n")


def test_same_seed_same_bytes():
    first = make_sales.generate(SMALL_ROWS)
    assert make_sales.generate(SMALL_ROWS) == first
    assert hashlib.sha256(first).hexdigest() == SMALL_SHA256  # same bytes on every platform and NumPy version
    assert make_sales.generate(SMALL_ROWS, seed=7) != first
    assert make_sales.generate(0) == b""
    with pytest.raises(ValueError, match="rows must be >= 0"):
        make_sales.generate(-1)


def test_numbers_are_printed_as_python_prints_the_float():
    # Integer formatting stands in for float formatting (exact everywhere): check it against repr.
    assert all(make_sales.decimal(v, 2) == repr(v / 100) for v in range(0, 200_000, 7))
    assert all(make_sales.decimal(v, 3) == repr(v / 1000) for v in range(0, 200_000, 7))
    assert make_sales.decimal(19500, 2) == "195.0" and make_sales.decimal(250, 3) == "0.25"


def test_refuses_to_overwrite(tmp_path, capsys):
    own = tmp_path / "sales.tsv"
    own.write_text("the learner's own data\n")
    with pytest.raises(FileExistsError, match="already exists.*your own sales data.*--force"):
        make_sales.write(own, rows=10)
    assert make_sales.main(["--out", str(own), "--rows", "10"]) == 1
    assert "left untouched" in capsys.readouterr().err
    assert own.read_text() == "the learner's own data\n"
    assert make_sales.main(["--out", str(own), "--rows", "10", "--force"]) == 0
    assert own.read_bytes() == make_sales.generate(10)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sales.tsv"]  # no temporary file left


def test_command_line(tmp_path):
    out = tmp_path / "new" / "sales.tsv"
    run = subprocess.run([sys.executable, str(GENERATOR), "--out", str(out), "--rows", "25", "--seed", "3"],
                         capture_output=True, text=True, check=True)
    assert out.read_bytes() == make_sales.generate(25, seed=3)
    assert f"wrote {out}: 25 rows, sha256 {hashlib.sha256(out.read_bytes()).hexdigest()}" in run.stdout


# --- the default file looks like the roadmap's -------------------------------------------------------------

def test_schema_and_size(default_table):
    t = default_table
    assert len(t) == 366_500 and t.n_skipped == 0 and t.malformed == {}
    assert all(re.fullmatch(r"[A-Z]{2}[0-9]{5}", c) for c in set(t.code))
    assert t.date.dtype == np.dtype("datetime64[D]") and t.entered.dtype == np.dtype("datetime64[ms]")
    assert np.all(np.diff(t.date.astype(np.int64)) >= 0)  # in order of sale date
    days = int((t.date[-1] - t.date[0]).astype(np.int64))
    assert 365 <= days <= 730
    np.testing.assert_allclose(t.total, t.quantity * t.unit_price, atol=0.005 + 1e-9)
    # a product has one code and one category
    pairs = set(zip(t.product, t.code, t.category, strict=True))
    assert len(pairs) == len(set(t.product)) == len(set(t.code))
    assert 200 <= len(pairs) <= 400


def test_distributions(default_table):
    t = default_table
    assert 15 <= len(set(t.category)) <= 16
    assert 0.015 < np.mean(t.status == 3) < 0.025
    assert 0.75 < np.mean(t.quantity == 1.0) < 0.9
    assert 0.01 < np.mean(t.quantity != np.round(t.quantity)) < 0.1  # loose kilograms
    assert 0.01 < np.mean(t.quantity >= 10) < 0.1  # bulk
    entry_day = t.entered.astype("datetime64[D]")
    assert np.mean(entry_day > t.date) > 0.7 and np.mean(entry_day < t.date) < 0.05
    assert "ADMIN" in set(t.user) and len(set(t.user)) >= 3
    assert 1.0 <= t.unit_price.min() and t.unit_price.max() <= 500.0
    # one price per product (up to a price rise); across products log-normal-like: skewed, its log is not
    _, first = np.unique(t.product.astype(str), return_index=True)
    prices = t.unit_price[first]

    def skew(x):
        return float(np.mean((x - x.mean()) ** 3) / x.std() ** 3)

    assert skew(prices) > 1.5 and abs(skew(np.log(prices))) < 0.6
    # the shop is busier on Saturdays than on Sundays
    weekday = (t.date.astype(np.int64) + 3) % 7  # 1970-01-01 was a Thursday; Monday = 0
    counts = np.bincount(weekday, minlength=7)
    assert counts[5] > 1.5 * counts[6]


# --- the loader ----------------------------------------------------------------------------------------

def test_default_path_and_ensure_sales(repo_data, tmp_path):
    with pytest.raises(data.DataError, match="does not exist: run `make data`"):
        data.load_sales()
    path = data.ensure_sales()
    assert path == repo_data / "sales.tsv"
    assert data.sha256_file(path) == make_sales.SALES_SHA256
    path.write_text("the learner's own data\n")
    assert data.ensure_sales() == path and path.read_text() == "the learner's own data\n"  # never overwritten
    # a file in MINITORCH_DATA_DIR comes first
    own = write_lines(tmp_path / "override" / "sales.tsv", small_lines(5))
    assert data.sales_path() == own and len(data.load_sales()) == 5


def test_missing_file(tmp_path):
    with pytest.raises(data.DataError, match=r"sales.tsv does not exist: run `make data`.*ensure_sales"):
        data.load_sales(tmp_path / "sales.tsv")


def test_reads_what_was_written(tmp_path):
    lines = small_lines(50)
    table = data.load_sales(write_lines(tmp_path / "sales.tsv", lines))
    fields = [line.rstrip("\n").split("\t") for line in lines]
    assert list(table.product) == [f[0] for f in fields] and list(table.user) == [f[7] for f in fields]
    assert [str(d) for d in table.date] == [f[2] for f in fields]
    assert [str(e).replace("T", " ") for e in table.entered] == [f[3] for f in fields]
    np.testing.assert_array_equal(table.quantity, [float(f[4]) for f in fields])
    np.testing.assert_array_equal(table.total, [float(f[8]) for f in fields])
    np.testing.assert_array_equal(table.status, [int(f[9]) for f in fields])
    # Windows line endings load the same
    crlf = data.load_sales(write_lines(tmp_path / "crlf.tsv", [line.replace("\n", "\r\n") for line in lines]))
    np.testing.assert_array_equal(crlf.total, table.total)
    assert list(crlf.status) == list(table.status) and list(crlf.user) == list(table.user)


def _with_field(line: str, index: int, value: str) -> str:
    fields = line.rstrip("\n").split("\t")
    fields[index] = value
    return "\t".join(fields) + "\n"


def _short(line: str) -> str:
    return "\t".join(line.split("\t")[:9]) + "\n"


MALFORMED = {
    "fields": (_short, r"expected 10 tab-separated fields, got 9"),
    "empty line": (lambda line: "\n", r"expected 10 tab-separated fields, got 1"),
    "code": (lambda line: _with_field(line, 1, "T000015"), r"product code 'T000015' is not two capital letters"),
    "date": (lambda line: _with_field(line, 2, "2022-02-30"), r"date '2022-02-30' is not a date YYYY-MM-DD"),
    "date format": (lambda line: _with_field(line, 2, "01/04/2022"), r"date '01/04/2022' is not a date"),
    "timestamp": (lambda line: _with_field(line, 3, "2022-05-08 24:54:08.797"), r"entry timestamp .* is not"),
    "quantity": (lambda line: _with_field(line, 4, "one"), r"quantity 'one' is not a number"),
    "price": (lambda line: _with_field(line, 5, "nan"), r"unit price 'nan' is not a finite number"),
    "total": (lambda line: _with_field(line, 8, "123456.0"), r"total price 123456.0 is not quantity × unit price"),
    "status": (lambda line: _with_field(line, 9, "void"), r"status code 'void' is not an integer"),
    "category": (lambda line: _with_field(line, 6, ""), r"empty category"),
}


@pytest.mark.parametrize("kind", MALFORMED)
def test_malformed_line_is_named_by_number(tmp_path, kind):
    spoil, message = MALFORMED[kind]
    lines = small_lines(12)
    lines[6] = spoil(lines[6])  # line 7
    path = write_lines(tmp_path / "sales.tsv", lines)
    with pytest.raises(ValueError, match=rf"sales.tsv, line 7: {message}.*skip_malformed=True"):
        data.load_sales(path)


def test_skip_and_count(tmp_path):
    lines = small_lines(30)
    good = [line for i, line in enumerate(lines, start=1) if i not in (1, 13, 30)]
    lines[0] = _short(lines[0])
    lines[12] = _with_field(lines[12], 3, "yesterday")
    lines[29] = _with_field(lines[29], 8, "-1.0")
    table = data.load_sales(write_lines(tmp_path / "sales.tsv", lines), skip_malformed=True)
    assert table.n_skipped == 3 and list(table.malformed) == [1, 13, 30]
    assert "entry timestamp 'yesterday'" in table.malformed[13]
    expected = data.load_sales(write_lines(tmp_path / "good.tsv", good))
    assert len(table) == 27
    np.testing.assert_array_equal(table.total, expected.total)
    assert list(table.code) == list(expected.code)


def test_empty_file(tmp_path):
    table = data.load_sales(write_lines(tmp_path / "sales.tsv", []))
    assert len(table) == 0 and table.n_skipped == 0


# --- the features of the Phase 4 regression -----------------------------------------------------------------

ROWS = [  # product, code, date, quantity, unit price, category, total, status
    ("Ruby Jasmine Rice 5Kg", "TY00001", "2022-01-01", "1.0", "60.0", "Rice", "60.0", "2"),
    ("Sunny Fields Palm Oil 1L", "OL00002", "2022-12-31", "3.0", "24.5", "Oil", "73.5", "1"),
    ("Ruby Loose Jasmine Rice per Kg", "TY00003", "2024-12-31", "0.75", "11.5", "Rice", "8.63", "2"),
    ("Crystal White Sugar 1Kg", "SG00004", "2023-03-15", "2.0", "10.0", "Sugar", "20.0", "3"),
    ("Klean Bleach 500g", "DT00005", "2024-02-29", "1.0", "9.95", "Detergents", "9.95", "2"),
]


def test_features_by_hand(tmp_path):
    lines = [f"{p}\t{c}\t{d}\t{d} 12:00:00.000\t{q}\t{u}\t{cat}\tADMIN\t{t}\t{s}\n" for p, c, d, q, u, cat, t, s in ROWS]
    table = data.load_sales(write_lines(tmp_path / "sales.tsv", lines))
    features, target, names = data.sales_features(table)
    kept = [r for r in ROWS if r[7] != "3"]
    categories = sorted({r[5] for r in kept})  # Sugar only appears in a dropped row
    assert names == ["quantity", "unit_price", *(f"category={c}" for c in categories), "day_of_year"]
    assert features.dtype == np.float32 and target.dtype == np.float32 and features.shape == (4, 3 + 3)
    for row, (_, _, date, quantity, price, category, _, _) in zip(features, kept, strict=True):
        one_hot = [1.0 if c == category else 0.0 for c in categories]
        day = datetime.date.fromisoformat(date).timetuple().tm_yday
        assert row.tolist() == [np.float32(quantity), np.float32(price), *one_hot, day]
    assert target.tolist() == [np.float32(r[6]) for r in kept]
    assert features[:, -1].tolist() == [1, 365, 366, 60]
    everything = data.sales_features(table, drop_status=None)
    assert everything.features.shape == (5, 3 + 4) and "category=Sugar" in everything.names


def test_features_of_the_default_file(default_table):
    t = default_table
    features, target, names = data.sales_features(t)
    keep = t.status != 3
    assert features.shape == (int(keep.sum()), 18) and len(names) == 18
    np.testing.assert_array_equal(target, t.total[keep].astype(np.float32))  # file order kept
    np.testing.assert_array_equal(features[:, 0], t.quantity[keep].astype(np.float32))
    one_hot = features[:, 2:-1]
    assert set(np.unique(one_hot)) == {0.0, 1.0} and np.all(one_hot.sum(axis=1) == 1)
    categories = [n.removeprefix("category=") for n in names[2:-1]]
    np.testing.assert_array_equal(np.asarray(categories, dtype=object)[one_hot.argmax(axis=1)], t.category[keep])
    assert 1 <= features[:, -1].min() and features[:, -1].max() <= 366

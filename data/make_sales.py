"""Write a synthetic ``sales.tsv``: the retail transactions of the Phase 4 deliverable.

The roadmap's ``sales.tsv`` is its author's own data and was never published, so the course generates a
file with exactly its schema: tab-separated, no header, one sale per line, 10 columns (the roadmap's
example: ``Ruby Viet Rice 5 % Broken 22.5Kg``, ``TY00015``, ``2022-04-01``, ``2022-05-08 20:54:08.797``,
``1.0``, ``195.0``, ``Rice``, ``ADMIN``, ``195.0``, ``2``): product name, product code, sale date, entry
timestamp, quantity, unit price, category, user, total price, status code.

280 products in 15 grocery categories, each with its own shelf price (log-normal-like across products;
one price rise for most of them); sales over 18 months (2022-01 .. 2023-06) with weekly, seasonal and
holiday patterns and slow growth; rows in order of sale date; entries usually typed in days or weeks
after the sale, late ones by ADMIN; quantities mostly 1.0 with bulk and loose-kilogram tails; total =
quantity x unit price rounded to the cent; status code 3 (about 2% of rows) marks voided sales, the rows
the roadmap's own preparation script drops.

Same seed, same bytes, on every platform and NumPy version (a test checks the SHA-256):
- randomness comes only from the raw 64-bit stream of ``numpy.random.PCG64``, which NumPy's
  compatibility policy (NEP 19) keeps fixed, unlike ``Generator``'s distribution methods, which may change
  between releases; it is turned into integers with exact uint64 arithmetic (``raw % n``);
- no floating point at all: prices are integer cents (a log-spaced price ladder built with integer powers,
  so no ``exp``/``log`` whose last bit depends on the C library), quantities integer thousandths, and every
  number is printed from integers, never with float formatting.

Usage: ``python data/make_sales.py [--out data/sales.tsv] [--rows N] [--seed S] [--force]``.
An existing file is never replaced without ``--force``: it may be your own sales data.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import os
import sys
from pathlib import Path

import numpy as np

DEFAULT_ROWS = 366_500
DEFAULT_SEED = 2022
DEFAULT_OUT = Path(__file__).resolve().parent / "sales.tsv"
# sha256 of generate(DEFAULT_ROWS, DEFAULT_SEED): the bytes `make data` writes (tests/test_sales_data.py).
SALES_SHA256 = "4b2ceefb84d199f8d54416975ccdb99cf16bbb4ef3ef60ae182cba593f3eb3fb"

FIRST_DAY = datetime.date(2022, 1, 1)
DAYS = 546  # 2022-01-01 .. 2023-06-30
CLOSED = {(1, 1), (12, 25), (12, 26)}  # (month, day): the shop is shut
WEEKDAY_WEIGHT = (100, 92, 95, 100, 112, 128, 55)  # Monday .. Sunday
MONTH_WEIGHT = (88, 86, 98, 100, 96, 92, 90, 95, 100, 104, 112, 140)  # January .. December
HOUR_WEIGHT = (0, 0, 0, 0, 0, 0, 1, 4, 8, 9, 9, 8, 7, 7, 8, 8, 9, 10, 11, 12, 12, 9, 5, 2)  # 00 .. 23 h

# Prices are steps on a log-spaced ladder: step k costs 100 * 1.09**k cents (k = 0..70: 1.00 .. 417).
PRICE_STEPS = 70
LADDER = tuple(100 * 109**k // 100**k for k in range(PRICE_STEPS + 1))

# Category: (code prefix, share of sales, price step of the base size, brands, items, sizes as
# (label, extra price steps; 8 steps double the price), items also sold loose by the kilogram).
CATEGORIES: dict[str, tuple[str, int, int, tuple[str, ...], tuple[str, ...], tuple[tuple[str, int], ...],
                            tuple[str, ...]]] = {
    "Rice": ("TY", 14, 29, ("Ruby", "Royal Feast", "Bella Rosa", "Mama's Table", "Golden Tiger", "Sahara"),
             ("Viet Rice 5 % Broken", "Jasmine Rice", "Long Grain Parboiled Rice", "Basmati Rice",
              "Thai Fragrant Rice"),
             (("1Kg", 0), ("5Kg", 17), ("10Kg", 25), ("22.5Kg", 33), ("25Kg", 35), ("50Kg", 43)),
             ("Jasmine Rice", "Long Grain Parboiled Rice")),
    "Oil": ("OL", 10, 37, ("Golden Drop", "Sunny Fields", "Pure Gold", "Mama's Table", "Kingsway"),
            ("Vegetable Oil", "Palm Oil", "Sunflower Oil", "Soya Oil"),
            (("500ml", -7), ("1L", 0), ("2L", 7), ("5L", 17), ("25L", 34)), ()),
    "Sugar": ("SG", 9, 27, ("Sweetco", "Crystal", "Royal Feast", "Kingsway"),
              ("White Sugar", "Brown Sugar", "Sugar Cubes"),
              (("500g", -8), ("1Kg", 0), ("5Kg", 17), ("25Kg", 34), ("50Kg", 42)), ("White Sugar", "Brown Sugar")),
    "Flour": ("FL", 8, 24, ("Golden Mill", "Miller's Best", "Kingsway", "Homestead"),
              ("Hard Wheat Flour", "Soft Wheat Flour", "Maize Flour", "Cassava Flour"),
              (("1Kg", 0), ("2Kg", 7), ("10Kg", 25), ("25Kg", 35), ("50Kg", 43)), ("Maize Flour", "Cassava Flour")),
    "Beverages": ("BV", 8, 31, ("Morning Star", "Malt King", "Cocoa Gold", "Highland"),
                  ("Chocolate Drink", "Instant Coffee", "Black Tea", "Malt Drink", "Orange Juice"),
                  (("200g", -6), ("400g", 0), ("1Kg", 9), ("Pack of 24", 22)), ()),
    "Dairy": ("DY", 7, 24, ("Blue Cow", "Ideal", "Peak Valley", "Farmfresh"),
              ("Evaporated Milk", "Powdered Milk", "Condensed Milk", "Yoghurt Drink", "Butter"),
              (("170g", -4), ("400g", 0), ("900g", 8), ("2.5Kg", 18)), ()),
    "Detergents": ("DT", 7, 27, ("Sunbeam", "Klean", "Fresh Wave", "Brightex"),
                   ("Washing Powder", "Bar Soap", "Dishwashing Liquid", "Bleach"),
                   (("200g", -8), ("500g", 0), ("1Kg", 7), ("5Kg", 22)), ()),
    "Canned Foods": ("CN", 7, 21, ("Bella Rosa", "Sea King", "Ocean Pride", "Red Ripe", "Exeter"),
                     ("Tomato Paste", "Sardines in Oil", "Corned Beef", "Baked Beans", "Mackerel in Tomato Sauce"),
                     (("70g", -8), ("155g", -2), ("400g", 5), ("2.2Kg", 20)), ()),
    "Pasta": ("PS", 6, 19, ("Golden Mill", "Quick Bowl", "Pasta Bella", "Royal Feast"),
              ("Spaghetti", "Macaroni", "Instant Noodles", "Vermicelli"),
              (("70g", -13), ("500g", 0), ("1Kg", 7), ("Carton of 20", 32)), ()),
    "Spices": ("SP", 5, 13, ("Star Cube", "Savanna", "Chef's Choice", "Spice Route"),
               ("Curry Powder", "Dried Thyme", "Stock Cubes", "Ground Pepper", "Salt"),
               (("50g", -4), ("100g", 0), ("500g", 14), ("1Kg", 20)), ("Ground Pepper", "Salt")),
    "Toiletries": ("TL", 5, 27, ("Bright Smile", "Lily", "Silk Touch", "Softcare"),
                   ("Toothpaste", "Bathing Soap", "Body Lotion", "Toilet Roll", "Shampoo"),
                   (("Small", -6), ("Regular", 0), ("Family Size", 7), ("Pack of 12", 22)), ()),
    "Snacks": ("SN", 5, 13, ("Crown Bakery", "Kingsbite", "Tip Top", "Crunchy Bites"),
               ("Biscuits", "Groundnuts", "Plantain Chips", "Chocolate Bar", "Cream Crackers"),
               (("50g", -4), ("150g", 0), ("300g", 6), ("Carton of 24", 30)), ()),
    "Cereals": ("CR", 3, 35, ("Sunrise", "Meadow", "Golden Morning", "Morning Star"),
                ("Corn Flakes", "Rolled Oats", "Wheat Biscuits", "Muesli"),
                (("375g", -3), ("500g", 0), ("1Kg", 8), ("Pack of 6", 18)), ()),
    "Baby Care": ("BB", 3, 43, ("Little Ones", "Cuddles", "Tiny Tummy", "Softcare"),
                  ("Baby Diapers", "Baby Wipes", "Infant Formula", "Baby Cereal"),
                  (("Small", -5), ("Medium", 0), ("Jumbo", 8), ("Value Pack", 14)), ()),
    "Household": ("HH", 3, 19, ("Mozzie Guard", "Lion", "Safari", "Homestead"),
                  ("Mosquito Coil", "Matches", "Candles", "Insecticide Spray", "Air Freshener"),
                  (("Single", -4), ("Pack of 10", 10), ("Carton", 28)), ()),
}
CASHIERS = (("ADMIN", 20), ("AMA", 25), ("KOFI", 20), ("ESI", 15), ("YAW", 12), ("ABENA", 8))
STATUS = ((1, 50), (2, 930), (3, 20))  # (code, per mille): 3 = voided sale
PACK = ((1, 860), (2, 50), (3, 25), (4, 15), (5, 10), (6, 8), (10, 8), (12, 10), (20, 5), (24, 6),
        (50, 2), (100, 1))  # (units bought, per mille)
LOOSE_GRAMS = ((250, 20), (500, 30), (750, 8), (1000, 20), (1500, 6), (2000, 8), (2500, 3), (5000, 5))


class Draws:
    """Integers from PCG64's raw 64-bit stream, the one part of NumPy's random API fixed across versions."""

    def __init__(self, seed: int):
        self.bits = np.random.PCG64(seed)

    def below(self, n: int, size: int | tuple[int, ...]) -> np.ndarray:
        """``size`` integers uniform in [0, n) (modulo bias below n / 2**64: negligible)."""
        return (self.bits.random_raw(size) % np.uint64(n)).astype(np.int64)

    def weighted(self, weights, size: int) -> np.ndarray:
        """``size`` indices into ``weights`` (non-negative integers), each drawn with probability ∝ weight."""
        cumulative = np.cumsum(np.asarray(weights, dtype=np.int64))
        return np.searchsorted(cumulative, self.below(int(cumulative[-1]), size), side="right")

    def pick(self, table: tuple[tuple[int, int], ...], size: int) -> np.ndarray:
        """``size`` values from a table of (value, weight) pairs."""
        return np.asarray([v for v, _ in table], dtype=np.int64)[self.weighted([w for _, w in table], size)]


def decimal(value: int, places: int) -> str:
    """``value / 10**places`` as Python prints the float: ``195.0``, ``0.25``, ``48.75``."""
    whole, frac = divmod(value, 10**places)
    digits = f"{frac:0{places}d}".rstrip("0") or "0"
    return f"{whole}.{digits}"


def nice_cents(cents: int) -> int:
    """A shelf price: to 5 cents below 10, to 50 cents below 100, else to whole units."""
    step = 5 if cents < 1000 else 50 if cents < 10000 else 100
    return max(step, (cents + step // 2) // step * step)


def catalogue(draw: Draws) -> list[tuple[str, str, str, int, int, bool]]:
    """Products: (name, code, category, popularity, price step, sold loose)."""
    products = []
    for category, (prefix, share, base, brands, items, sizes, loose) in CATEGORIES.items():
        combos = [(b, i, s, extra) for b in brands for i in items for s, extra in sizes]
        combos += [(b, i, "per Kg", -1) for b in brands for i in loose]
        count = 12 + share
        chosen = np.argsort(draw.below(2**62, len(combos)), kind="stable")[:count]
        noise = draw.below(5, (count, 3)).sum(axis=1) - 6  # -6..6 steps, bell-shaped: log-normal-ish prices
        serials = np.cumsum(1 + draw.below(3, count))
        for rank, (j, offset, serial) in enumerate(zip(chosen.tolist(), noise.tolist(), serials.tolist(), strict=True)):
            brand, item, size, extra = combos[j]
            name = f"{brand} {item} {size}" if size != "per Kg" else f"{brand} Loose {item} per Kg"
            popularity = share * 1200 // (rank + 3)  # Zipf-like within the category
            step = min(max(base + extra + offset, 0), PRICE_STEPS)
            products.append((name, f"{prefix}{serial:05d}", category, popularity, step, size == "per Kg"))
    return products


def generate(rows: int = DEFAULT_ROWS, seed: int = DEFAULT_SEED) -> bytes:
    """The file's bytes: ``rows`` sales drawn from ``seed``."""
    if rows < 0:
        raise ValueError(f"rows must be >= 0, got {rows}")
    draw = Draws(seed)
    products = catalogue(draw)
    names, codes, categories, popularity, steps, loose = zip(*products, strict=True)
    n_products = len(products)
    base_cents = [nice_cents(LADDER[s]) for s in steps]
    # Most products get one price rise (3-15%) on some day of the period.
    rises = draw.below(100, n_products) < 65
    rise_day = np.where(rises, draw.below(DAYS, n_products), DAYS)
    risen_cents = [nice_cents(c * (103 + int(p)) // 100) for c, p in zip(base_cents, draw.below(13, n_products),
                                                                            strict=True)]

    dates = [FIRST_DAY + datetime.timedelta(days=d) for d in range(DAYS)]
    day_weight = [0 if (d.month, d.day) in CLOSED else
                  WEEKDAY_WEIGHT[d.weekday()] * MONTH_WEIGHT[d.month - 1] * (1000 + 300 * i // DAYS)
                  for i, d in enumerate(dates)]
    day = np.sort(draw.weighted(day_weight, rows))  # the file is in order of sale date
    product = draw.weighted(popularity, rows)
    price = np.where(day >= rise_day[product], np.asarray(risen_cents, dtype=np.int64)[product],
                     np.asarray(base_cents, dtype=np.int64)[product])

    # Quantity in thousandths: packs of whole units, or a weight in grams for loose products.
    units = draw.pick(PACK, rows) * 1000
    grams = np.where(draw.below(2, rows) == 0, draw.pick(LOOSE_GRAMS, rows),
                     100 + 50 * draw.below(79, rows))  # 0.10 .. 4.00 kg weighed on the scale
    quantity = np.where(np.asarray(loose)[product], grams, units)
    total = (quantity * price + 500) // 1000  # cents, rounded half up

    # Entries: 15% typed in on the day, 3% the days before (orders), the rest 1-40 days after.
    kind = draw.below(100, rows)
    later = 1 + np.minimum(draw.below(40, rows), draw.below(40, rows))
    earlier = -1 - draw.below(3, rows)
    delay = np.where(kind < 15, 0, np.where(kind < 18, earlier, later))
    entry_ms = (draw.weighted(HOUR_WEIGHT, rows) * 3_600_000 + draw.below(3_600_000, rows))
    order = np.lexsort((entry_ms, delay, day))  # within a day, in order of entry
    day, product, price, quantity, total, delay, entry_ms = (
        a[order] for a in (day, product, price, quantity, total, delay, entry_ms))

    # Back-office entries (a week or more late) are typed by ADMIN; the till by the cashier on shift.
    cashier = draw.weighted([w for _, w in CASHIERS], rows)
    user = np.where(delay > 7, 0, cashier)
    status = draw.pick(STATUS, rows)

    date_text = {i: (FIRST_DAY + datetime.timedelta(days=i)).isoformat() for i in range(-3, DAYS + 41)}
    cents_text: dict[int, str] = {}
    qty_text: dict[int, str] = {}
    users = [u for u, _ in CASHIERS]
    lines = []
    for d, p, c, q, t, lag, ms, u, s in zip(day.tolist(), product.tolist(), price.tolist(), quantity.tolist(),
                                            total.tolist(), delay.tolist(), entry_ms.tolist(), user.tolist(),
                                            status.tolist(), strict=True):
        seconds, millis = divmod(ms, 1000)
        minutes, second = divmod(seconds, 60)
        hour, minute = divmod(minutes, 60)
        price_text = cents_text.get(c) or cents_text.setdefault(c, decimal(c, 2))
        quantity_text = qty_text.get(q) or qty_text.setdefault(q, decimal(q, 3))
        lines.append(f"{names[p]}\t{codes[p]}\t{date_text[d]}\t{date_text[d + lag]} "
                     f"{hour:02d}:{minute:02d}:{second:02d}.{millis:03d}\t{quantity_text}\t{price_text}\t"
                     f"{categories[p]}\t{users[u]}\t{decimal(t, 2)}\t{s}\n")
    return "".join(lines).encode("utf-8")


def write(out: Path = DEFAULT_OUT, rows: int = DEFAULT_ROWS, seed: int = DEFAULT_SEED, force: bool = False) -> Path:
    """Write the file at ``out``; an existing file is an error unless ``force`` (it may be the learner's own)."""
    out = Path(out)
    if out.exists() and not force:
        raise FileExistsError(f"{out} already exists and was left untouched (it may be your own sales data). "
                              f"Use --force to replace it with the synthetic file.")
    content = generate(rows, seed)
    out.parent.mkdir(parents=True, exist_ok=True)
    if force:  # replace atomically: readers never see half a file
        tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
        tmp.write_bytes(content)
        os.replace(tmp, out)
        return out
    with open(out, "xb") as f:  # "x": fails if a file appeared meanwhile, never overwrites
        try:
            f.write(content)
        except BaseException:
            out.unlink()  # no half-written file left behind
            raise
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="where to write (default: data/sales.tsv)")
    parser.add_argument("--rows", type=int, default=DEFAULT_ROWS, help=f"number of sales (default {DEFAULT_ROWS})")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED, help=f"random seed (default {DEFAULT_SEED})")
    parser.add_argument("--force", action="store_true", help="replace an existing file (never done otherwise)")
    args = parser.parse_args(argv)
    try:
        out = write(args.out, args.rows, args.seed, args.force)
    except FileExistsError as exc:
        print(f"make_sales: {exc}", file=sys.stderr)
        return 1
    digest = hashlib.sha256(out.read_bytes()).hexdigest()
    print(f"wrote {out}: {args.rows:,} rows, sha256 {digest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""``{measured}`87% <file>``` : a number typed in prose, checked at build time against a committed result.

Most numbers in the chapters are glued from ``benchmarks/results/`` by the figure modules. A number that
sits better in a sentence than in a glued paragraph is written with this role instead: the text shows as
written (``87%``), and the build checks that the file (under ``benchmarks/results/``) holds a number
that rounds to it at the precision shown: ``87%`` needs one within 0.5 of 87, ``0.54`` one within 0.005
of 0.54. ``<file, scale=1e-3>`` multiplies the file's numbers first (a file in GB/s quoted in TB/s);
``<file, near=DRAM Throughput>`` counts only the numbers on the file's lines that contain that text;
``<file.json, key=config.epochs>`` only the value at that key of a JSON (or TOML) file, where a list is
narrowed to its entries whose fields match: ``key=results[kind=summary&optimizer=sgd].train_seconds``. A
file named with a folder (``grader/thresholds.toml``) is read from the repository's root instead. A
number that no longer matches its file (a re-measured run, a mistyped digit) fails the strict build, and
``tests/test_measured_numbers.py`` checks every role of every chapter without building.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from urllib.parse import unquote

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"
ROLE = re.compile(r"\{measured\}`([^`<]*?)\s*<([^>`]+)>`")
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?:[eE][-+]?\d+)?")
_SEGMENT = re.compile(r"([^.\[\]]+)((?:\[[^\]]+\])*)")


def _path(name: str) -> Path:
    return ROOT / name if "/" in name else RESULTS / name


@cache
def _file_numbers(name: str, near: str) -> tuple[float, ...]:
    lines = [line for line in _path(name).read_text().splitlines() if near in line]
    return tuple(float(m.group(0)) for line in lines
                 for m in re.finditer(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?", line))


@cache
def _parsed(name: str):
    text = _path(name).read_text()
    if name.endswith(".toml"):
        import tomllib

        return tomllib.loads(text)
    import json

    return json.loads(text)


def _matches(entry, selector: str) -> bool:
    """``field=value`` (equal) or ``field*=text`` (contains), joined by ``&``; values %-escaped where they hold
    what a role cannot (``%2C`` a comma, ``%3C`` and ``%3E`` angle brackets: a kernel's template arguments)."""
    if not isinstance(entry, dict):
        return False
    for part in selector.split("&"):
        field, _, value = part.partition("=")
        value = unquote(value)
        if field.endswith("*"):
            if value not in str(entry.get(field[:-1], "")):
                return False
        elif str(entry.get(field)) != value:
            return False
    return True


def _key_numbers(name: str, key: str) -> tuple[float, ...] | None:
    """The numbers at ``key`` in a JSON or TOML file (every match where a selector keeps several entries);
    None when the key names nothing."""
    values = [_parsed(name)]
    for segment in key.split("."):
        match = _SEGMENT.fullmatch(segment)
        if match is None:
            return None
        values = [v[match[1]] for v in values if isinstance(v, dict) and match[1] in v]
        for selector in re.findall(r"\[([^\]]+)\]", match[2]):
            values = [e for v in values if isinstance(v, list) for e in v if _matches(e, selector)]
    if not values:
        return None
    numbers = []
    for v in values:
        for x in (v if isinstance(v, list) else [v]):
            if isinstance(x, int | float) and not isinstance(x, bool):
                numbers.append(float(x))
    return tuple(numbers)


def check(shown: str, target: str) -> str | None:
    """None when the number in ``shown`` is in the file ``target`` names (at its precision), else why not."""
    name, *options = (part.strip() for part in target.split(","))
    settings = dict(option.partition("=")[::2] for option in options)
    if (not name or set(settings) - {"scale", "near", "key"} or any(not v for v in settings.values())
            or {"near", "key"} <= set(settings)):
        return (f"{{measured}}`{shown} <{target}>`: the target must be '<file>' with 'scale=S' and 'near=TEXT' "
                f"or 'key=PATH'")
    scale, near, key = float(settings.get("scale", 1.0)), settings.get("near", ""), settings.get("key")
    number = _NUMBER.search(shown)
    if number is None:
        return f"{{measured}}`{shown} <{target}>`: the text holds no number"
    digits = number.group(0).replace(",", "")
    value = float(digits)
    mantissa, _, exponent = digits.lower().partition("e")
    decimals = len(mantissa.split(".")[1]) if "." in mantissa else 0
    half = 0.5 * 10.0 ** (int(exponent or 0) - decimals)  # 3.3e-05: within 0.05e-05
    shown_path = name if "/" in name else f"benchmarks/results/{name}"
    if not _path(name).is_file():
        return f"{{measured}}`{shown} <{target}>`: {shown_path} does not exist"
    numbers = _key_numbers(name, key) if key else _file_numbers(name, near)
    if numbers is None:
        return f"{{measured}}`{shown} <{target}>`: {shown_path} has no value at {key!r}"
    if any(abs(x * scale - value) <= half * (1 + 1e-9) for x in numbers):
        return None
    where = f" at {key!r}" if key else f" on a line with {near!r}" if near else ""
    times = f" (times {scale:g})" if scale != 1 else ""
    return f"{{measured}}`{shown} <{target}>`: no number{where} in {shown_path}{times} rounds to {digits}"


def problems(markdown: str) -> list[str]:
    """Every ``{measured}`` role of a page whose number its file does not hold, and every one that does not parse
    (a target holding a '>' or a backtick: it would be shown as it is, checked by nothing)."""
    found = [why for shown, target in ROLE.findall(markdown) if (why := check(shown, target))]
    unparsed = markdown.count("{measured}`") - len(ROLE.findall(markdown))
    if unparsed:
        found.append(f"{unparsed} {{measured}} role(s) do not parse as {{measured}}`NUMBER <TARGET>` (a '>' in the "
                     f"target? write it %3E)")
    return found


def _role(name, rawtext, text, lineno, inliner, options=None, content=None):
    from docutils import nodes

    match = re.match(r"^(.*?)\s*<([^>]+)>\s*$", text, re.S)
    if not match:
        message = inliner.reporter.error(f"{{measured}} needs 'text <file>', got {text!r}", line=lineno)
        return [inliner.problematic(rawtext, rawtext, message)], [message]
    shown, target = match.group(1), match.group(2)
    if why := check(shown, target):
        message = inliner.reporter.error(why, line=lineno)
        return [inliner.problematic(rawtext, rawtext, message)], [message]
    return [nodes.Text(shown)], []


def setup(app):
    app.add_role("measured", _role)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}

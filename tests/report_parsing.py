"""Read the Markdown run report back into values, so tests assert on cells and numbers, not on wording.

- ``table``/``tables``/``cells``: pipe tables as rows of cells keyed by the header (``rows[0]["GPUs"] == "3"``)
- ``fields``/``bullets``: list items, ``- key: value`` items as a mapping
- ``quantities``/``count``: the numbers in a sentence (with their unit), the number in front of a phrase
- ``line_with``, ``links``, ``images``, ``bold``: one line by a key phrase, Markdown links, images, bold text

The helpers raise ``ValueError`` on a malformed table or an ambiguous look-up instead of guessing; the tests
do the asserting.
"""
from __future__ import annotations

import re

_CELL_SEPARATOR = re.compile(r"(?<!\\)\|")
_RULE_CELL = re.compile(r":?-+:?")
NUMBER = r"[+\-−±]?\d+(?:,\d{3})*(?:\.\d+)?"
_UNIT = r"(?:\s?%|\s(?:tok/s/GPU|tok/s/user|tok/s|req/s|tokens|ms|s|h)(?![\w/]))"
_QUANTITY = re.compile(rf"(?<![\w.,/-])({NUMBER}{_UNIT}?)(?![\w/]|\.\d)")
_COUNTED = re.compile(rf"(?<![\w.,/-])({NUMBER}) ([a-z][a-z ]*?[a-z])(?=[,.;:()]|$)", re.M)


class Table(list):
    """The rows of one Markdown table (each a dict keyed by the header); ``header`` keeps the column order."""

    def __init__(self, header: list[str], rows: list[dict[str, str]]) -> None:
        super().__init__(rows)
        self.header = header

    def column(self, name: str) -> list[str]:
        return [row[name] for row in self]

    def by(self, key: str) -> dict[str, dict[str, str]]:
        """Rows indexed by the cell in column ``key`` (which must be unique)."""
        index = {row[key]: row for row in self}
        if len(index) != len(self):
            raise ValueError(f"column {key!r} repeats a value: {self.column(key)}")
        return index


def _cells(line: str) -> list[str]:
    line = line.strip()
    if not (line.startswith("|") and line.endswith("|")) or len(line) < 2:
        raise ValueError(f"not a table row: {line!r}")
    return [cell.strip().replace("\\|", "|") for cell in _CELL_SEPARATOR.split(line[1:-1])]


def _table(block: list[str]) -> Table:
    header = _cells(block[0])
    if len(block) < 2 or not all(_RULE_CELL.fullmatch(c) for c in _cells(block[1])):
        raise ValueError(f"a table needs a header and a |---| rule: {block[:2]}")
    rows = []
    for line in block[2:]:
        cells = _cells(line)
        if len(cells) != len(header):
            raise ValueError(f"{len(cells)} cells under {len(header)} headers: {line!r}")
        rows.append(dict(zip(header, cells)))
    return Table(header, rows)


def cells(row: dict[str, str], *columns: str) -> tuple[str, ...]:
    """Some cells of one row, in the order asked: ``cells(row, "outcome", "count") == ("infeasible", "2")``."""
    return tuple(row[c] for c in columns)


def tables(text: str) -> list[Table]:
    """Every pipe table in ``text``, in order."""
    found: list[Table] = []
    block: list[str] = []
    for line in [*text.splitlines(), ""]:
        if line.lstrip().startswith("|"):
            block.append(line)
        elif block:
            found.append(_table(block))
            block = []
    return found


def table(text: str, column: str | None = None) -> Table:
    """The one table in ``text`` (or the one that has a column named ``column``)."""
    found = [t for t in tables(text) if column is None or column in t.header]
    if len(found) != 1:
        raise ValueError(f"{len(found)} tables" + (f" with a column {column!r}" if column else "") + " in the text")
    return found[0]


def bullets(text: str, indent: int = 0) -> list[str]:
    """The text of each ``- item`` at exactly ``indent`` spaces."""
    return [m.group(1) for m in re.finditer(rf"^ {{{indent}}}- (.*)$", text, re.M)]


def fields(text: str, indent: int = 0) -> dict[str, str]:
    """``- key: value`` items as ``{key: value}`` (the key ends at the first colon; items without one are left out)."""
    found: dict[str, str] = {}
    for item in bullets(text, indent):
        m = re.match(r"(.+?):(?: (.*)|$)", item)
        if m:
            if m.group(1) in found:
                raise ValueError(f"the item {m.group(1)!r} repeats")
            found[m.group(1)] = m.group(2) or ""
    return found


def line_with(text: str, phrase: str) -> str:
    """The one line of ``text`` that contains ``phrase``."""
    found = [line for line in text.splitlines() if phrase in line]
    if len(found) != 1:
        raise ValueError(f"{len(found)} lines contain {phrase!r}")
    return found[0]


def quantities(text: str) -> list[str]:
    """The numbers in ``text`` in order, each with its sign and unit as written:
    ``"1,800 tok/s vs 1,500 tok/s, +300 tok/s (+20.0%)"`` -> ``["1,800 tok/s", "1,500 tok/s", "+300 tok/s", "+20.0%"]``.
    Digits inside words (``TP2``, ``rank-1.yaml``) are not numbers."""
    return _QUANTITY.findall(text)


def number(text: str) -> float:
    """``"1,800"`` -> 1800.0, ``"+20.0"`` -> 20.0, ``"−3"`` -> -3.0."""
    return float(text.replace(",", "").replace("−", "-").replace("±", ""))


def counts(text: str) -> dict[str, int]:
    """Every ``<n> <words>`` up to a punctuation mark: ``"8 attempts: 3 feasible, 1 cache hits."`` ->
    ``{"attempts": 8, "feasible": 3, "cache hits": 1}``."""
    found: dict[str, int] = {}
    for n, what in _COUNTED.findall(text):
        if what in found:
            raise ValueError(f"{what!r} is counted twice")
        found[what] = int(number(n))
    return found


def count(text: str, phrase: str) -> int:
    """The number written right before ``phrase`` (``count("2 emitted as manifests", "emitted") == 2``)."""
    found = re.findall(rf"(?<![\w.,/-])({NUMBER}) {re.escape(phrase)}", text)
    if len(found) != 1:
        raise ValueError(f"{len(found)} numbers before {phrase!r}: {found}")
    return int(number(found[0]))


def links(text: str) -> list[tuple[str, str]]:
    """Markdown links ``[label](target)`` (not images) as ``(label, target)``."""
    return re.findall(r"(?<!!)\[([^\]]*)\]\(([^)\s]+)\)", text)


def images(text: str) -> list[tuple[str, str]]:
    """Markdown images ``![alt](path)`` as ``(alt, path)``."""
    return re.findall(r"!\[([^\]]*)\]\(([^)\s]+)\)", text)


def bold(text: str) -> list[str]:
    """The ``**bold**`` spans of ``text``."""
    return re.findall(r"\*\*(.+?)\*\*", text)


def code(text: str) -> list[str]:
    """The ```code``` spans of ``text``."""
    return re.findall(r"`([^`]+)`", text)

"""The one place a benchmark writes its section of ``docs/benchmarks.md`` (between begin/end markers)."""
from __future__ import annotations

from pathlib import Path

DOCS = Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md"


def write_section(name: str, heading: str, lines: list[str]) -> None:
    """Replace the block ``<!-- NAME:begin -->`` … ``<!-- NAME:end -->``, or append it under ``heading``."""
    text = DOCS.read_text() if DOCS.exists() else "# Benchmarks\n"
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    block = f"{begin}\n" + "\n".join(lines) + f"\n{end}"
    if begin in text:
        text = text[:text.index(begin)] + block + text[text.index(end) + len(end):]
    else:
        text = text.rstrip() + f"\n\n## {heading}\n\n" + block + "\n"
    DOCS.write_text(text)

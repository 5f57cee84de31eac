"""What every maintained benchmark shares: its results file, where it was measured, and its block of ``docs/benchmarks.md``.

Not a benchmark. Each benchmark writes one file under ``bench/results/`` (:func:`write_results`, whole or one
section of it) and then rewrites its own block of ``docs/benchmarks.md`` from that file (:func:`write_section`),
so every figure in the document comes from a results file, next to the command that produced it.
"""
from __future__ import annotations

import json
import os
import platform
import subprocess
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs" / "benchmarks.md"
RESULTS = REPO / "bench" / "results"


def provenance(command: str) -> dict[str, Any]:
    """The date, the command, the commit (``-dirty`` when the tree had changes) and the machine of a run."""
    def git(*args: str) -> str:
        try:
            return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=True).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            return ""

    commit = git("rev-parse", "--short", "HEAD")
    if commit and git("status", "--porcelain", "--untracked-files=no"):
        commit += "-dirty"
    return {"date": time.strftime("%Y-%m-%d"), "command": command, "commit": commit or None,
            "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
            "load_avg_1m": round(os.getloadavg()[0], 2)}


def write_results(path: Path, data: dict[str, Any], section: str | None = None) -> dict[str, Any]:
    """Overwrite ``path`` with ``data``, or only its ``section`` (the file's other sections are kept).
    Returns the whole document as written."""
    doc: dict[str, Any] = data
    if section is not None:
        doc = json.loads(path.read_text()) if path.exists() else {}
        doc[section] = data
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2, default=str) + "\n")
    return doc


def headline(run: dict[str, Any], minutes: float | None = None) -> str:
    """``command`` (date, at commit, machine; N min), from a results document or section."""
    parts = [run.get("date") or (f"committed in {run['committed_in']}" if run.get("committed_in") else "undated")]
    if run.get("commit"):
        parts.append(f"at {run['commit']}")
    if run.get("machine"):
        parts.append(run["machine"])
    if run.get("load_avg_1m") is not None:
        parts.append(f"load average {run['load_avg_1m']:.1f}")
    if minutes is not None:
        parts.append(f"{minutes:.0f} min" if minutes >= 1 else f"{minutes * 60:.0f} s")
    return f"`{run.get('command', '?')}` ({', '.join(parts)})"


def write_section(name: str, heading: str, lines: list[str], path: Path = DOCS) -> None:
    """Replace the block ``<!-- NAME:begin -->`` … ``<!-- NAME:end -->`` of ``path`` (docs/benchmarks.md), or
    append it under ``heading``."""
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    block = f"{begin}\n" + "\n".join(lines).rstrip() + f"\n{end}"
    if begin in text:
        text = text[:text.index(begin)] + block + text[text.index(end) + len(end):]
    else:
        text = text.rstrip() + f"\n\n## {heading}\n\n" + block + "\n"
    path.write_text(text)

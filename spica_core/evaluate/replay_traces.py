"""Mooncake JSONL traces the replay reads: a trace fitted to the context, ``workload.length_spread``'s
synthetic requests, and a closed loop of identical requests started over ``workload.start_window_ms``. The
examples' and tests' generated traffic is ``examples/make_traces.py``."""
from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from spica_core.config.trace import TRACE_BLOCK_SIZE, trace_lines
from spica_core.errors import TraceError


@dataclass(frozen=True)
class FittedTrace:
    """A trace with its requests over the context left out (workload.over_context drop or fail)."""

    path: Path          # what the replay reads
    kept: int           # requests replayed
    left_out: int       # requests over the context


def fitted_trace(path: str | Path, max_seq_len: int, directory: Path) -> FittedTrace:
    """The trace without the requests whose input, or input + output, exceeds ``max_seq_len``.

    Written once per (trace content, context length) under ``directory``, atomically, with its counts
    beside it, so every worker process of a sweep replays the same file and only the first parses the
    trace; looked up once per process for an unchanged file."""
    source = Path(path).resolve()
    stat = source.stat()
    return _fitted(str(source), stat.st_size, stat.st_mtime_ns, int(max_seq_len), str(directory))


@lru_cache(maxsize=8)
def _fitted(path: str, size: int, mtime_ns: int, max_seq_len: int, directory: str) -> FittedTrace:
    from spica_core.store import file_fingerprint

    source = Path(path)
    target = Path(directory) / f"fitted-{file_fingerprint(source)}-ctx{int(max_seq_len)}.jsonl"
    counts = target.with_suffix(".json")
    try:
        known = json.loads(counts.read_text())
        if target.is_file() and type(known["kept"]) is int and type(known["left_out"]) is int:
            return FittedTrace(target, known["kept"], known["left_out"])
    except (OSError, ValueError, TypeError, KeyError):  # absent or damaged: parse the trace again
        pass
    kept: list[str] = []
    left_out = 0
    for line, row in trace_lines(source):
        if row.input_length + row.output_length > max_seq_len:
            left_out += 1
        else:
            kept.append(line if line.endswith("\n") else line + "\n")
    if not kept:
        raise TraceError(f"{source}: every request exceeds the context length {max_seq_len:,}; nothing is left "
                         "to replay (raise context_length, or pick a model with a longer context)")
    from spica_core.store import write_file

    if not target.is_file():
        write_file(target, "".join(kept))
    write_file(counts, json.dumps({"kept": len(kept), "left_out": left_out}))  # after the file it counts
    return FittedTrace(target, len(kept), left_out)


SPREAD_SEED = 0  # one fixed draw: the same config replays the same requests on every machine


def spread_lengths(isl: int, osl: int, count: int, spread: float) -> list[tuple[int, int]]:
    """(input, output) per request, each a uniform integer in [⌊(1 − spread) × L⌋, L]."""
    rng = random.Random(SPREAD_SEED)
    lo_in, lo_out = max(1, math.floor((1 - spread) * isl)), max(1, math.floor((1 - spread) * osl))
    return [(rng.randint(lo_in, isl), rng.randint(lo_out, osl)) for _ in range(count)]


def spread_trace(isl: int, osl: int, count: int, spread: float, interval_ms: float, directory: Path,
                 block: int = TRACE_BLOCK_SIZE) -> Path:
    """``workload.length_spread``: the synthetic requests as a mooncake trace, lengths spread, prompts unshared,
    one arrival every ``interval_ms`` (0: all at once, for a closed loop). Written once per spec, atomically."""
    from spica_core.store import fingerprint, write_file

    key = fingerprint({"isl": isl, "osl": osl, "count": count, "spread": spread, "interval_ms": interval_ms,
                       "seed": SPREAD_SEED, "block": block})
    path = Path(directory) / f"spread-{key}.jsonl"
    if path.is_file():
        return path
    lines, next_id = [], 0
    for i, (n_in, n_out) in enumerate(spread_lengths(isl, osl, count, spread)):
        blocks = -(-n_in // block)
        lines.append(json.dumps({"timestamp": round(i * interval_ms, 3), "input_length": n_in, "output_length": n_out,
                                 "hash_ids": list(range(next_id, next_id + blocks))}, separators=(",", ":")) + "\n")
        next_id += blocks
    write_file(path, "".join(lines))
    return path


def staggered_trace(isl: int, osl: int, count: int, lanes: int, window_ms: float, directory: Path,
                    block: int = TRACE_BLOCK_SIZE) -> Path:
    """A closed loop of ``count`` identical requests as ``lanes`` sessions (the replay sends a session's next
    request as soon as its previous one completes), lane i's first request at i × window ÷ lanes: the load of
    ``replay_concurrency=lanes``, with the first wave spread over ``window_ms``. Prompts unshared; written once
    per spec, atomically."""
    from spica_core.store import fingerprint, write_file

    key = fingerprint({"isl": isl, "osl": osl, "count": count, "lanes": lanes, "window_ms": window_ms,
                       "block": block})
    path = Path(directory) / f"staggered-{key}.jsonl"
    if path.is_file():
        return path
    blocks = -(-isl // block)
    lines = []
    for i in sorted(range(count), key=lambda i: (i % lanes, i // lanes)):   # each session's turns in order
        lane = i % lanes
        row = {"session_id": f"lane-{lane}", "timestamp": round(lane * window_ms / lanes, 3), "delay": 0,
               "input_length": isl, "output_length": osl, "hash_ids": list(range(i * blocks, (i + 1) * blocks))}
        lines.append(json.dumps(row, separators=(",", ":")) + "\n")
    write_file(path, "".join(lines))
    return path

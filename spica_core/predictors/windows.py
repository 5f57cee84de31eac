"""Per-interval trace windows: what the planner's throughput loop would observe."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from spica_core.config.trace import read_trace


@dataclass(frozen=True)
class Window:
    """One throughput interval of the trace: arrivals and their mean token lengths."""

    num_req: int
    isl: float
    osl: float
    start_s: float = 0.0


@dataclass(frozen=True)
class TraceArrivals:
    """The three columns of a mooncake trace the predictor needs, in file order."""

    timestamp_ms: np.ndarray
    input_length: np.ndarray
    output_length: np.ndarray


def read_arrivals(path: str | Path) -> TraceArrivals:
    """Timestamp (ms), input_length and output_length of every row of a mooncake JSONL trace, as arrays."""
    ts: list[float] = []
    isl: list[float] = []
    osl: list[float] = []
    for row in read_trace(path):
        ts.append(row.timestamp_ms)
        isl.append(row.input_length)
        osl.append(row.output_length)
    return TraceArrivals(np.asarray(ts, dtype=np.float64), np.asarray(isl, dtype=np.float64),
                         np.asarray(osl, dtype=np.float64))


def windows_from_arrivals(arrivals: TraceArrivals, interval_s: float, origin_s: float = 0.0) -> list[Window]:
    """Bucket arrivals by ⌊(t − origin)/I⌋; keep every bucket from the first to the last active one.

    The planner's intervals start at 0 s (``origin_s`` 0); the report's plot starts at the first arrival."""
    if interval_s <= 0:
        raise ValueError(f"interval must be positive, got {interval_s}")
    if arrivals.timestamp_ms.size == 0:
        return []
    keys = np.floor((arrivals.timestamp_ms / 1000.0 - origin_s) / interval_s).astype(np.int64)
    first, last = int(keys.min()), int(keys.max())
    span = last - first + 1
    idx = keys - first
    counts = np.bincount(idx, minlength=span)
    isl_sum = np.bincount(idx, weights=arrivals.input_length, minlength=span)
    osl_sum = np.bincount(idx, weights=arrivals.output_length, minlength=span)
    out: list[Window] = []
    for k in range(span):
        n = int(counts[k])
        out.append(Window(num_req=n, isl=float(isl_sum[k] / n) if n else 0.0,
                          osl=float(osl_sum[k] / n) if n else 0.0,
                          start_s=float(origin_s + (first + k) * interval_s)))
    return out


def build_windows(trace_path: str | Path, interval_s: float) -> list[Window]:
    """Windows of one throughput interval, straight from a trace file."""
    return windows_from_arrivals(read_arrivals(trace_path), interval_s)


__all__ = ["Window", "TraceArrivals", "read_arrivals", "windows_from_arrivals", "build_windows"]

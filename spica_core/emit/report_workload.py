"""The report's "Workload" section, with the trace's request rate over time (:func:`trace_profile`).

The profile is also what the trace plot draws and where AI Configurator's estimate takes its mean lengths.
"""
from __future__ import annotations

import functools
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from spica_core.emit.numbers import fmt
from spica_core.emit.report_format import _seconds
from spica_core.errors import SpicaError

if TYPE_CHECKING:
    from spica_core.emit.report import ReportInputs


# ---------------------------------------------------------------- the trace


@dataclass(frozen=True)
class TraceProfile:
    requests: int
    duration_s: float
    mean_isl: float
    mean_osl: float
    bin_s: float
    rates: tuple[float, ...]         # requests/s per bin, from the first arrival

    @property
    def mean_rps(self) -> float:
        return self.requests / self.duration_s if self.duration_s > 0 else 0.0

    @property
    def peak_rps(self) -> float:
        return max(self.rates, default=0.0)


_NICE_BINS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600)


def trace_profile(path: Path, bins: int = 60) -> TraceProfile:
    """Arrivals per time bin (about ``bins`` bins of a round width) and mean lengths of a mooncake trace.

    The last profile is kept by the file's identity (path, size, mtime), so the report's text, its plot and
    AIC's mean lengths share one parse of a trace that may hold a million rows."""
    stat = os.stat(path)
    return _profile(str(Path(path).resolve()), stat.st_size, stat.st_mtime_ns, bins)


@functools.lru_cache(maxsize=1)
def _profile(path: str, size: int, mtime_ns: int, bins: int) -> TraceProfile:
    """One parse of the trace; ``size`` and ``mtime_ns`` are only part of the cache's key."""
    from spica_core.predictors.windows import read_arrivals, windows_from_arrivals

    arrivals = read_arrivals(path)
    n = int(arrivals.timestamp_ms.size)
    if n == 0:
        return TraceProfile(0, 0.0, 0.0, 0.0, 1.0, ())
    start, end = float(arrivals.timestamp_ms.min()) / 1000.0, float(arrivals.timestamp_ms.max()) / 1000.0
    span = end - start
    width = float(next((b for b in _NICE_BINS if b * bins >= span), math.ceil(span / bins)))
    windows = windows_from_arrivals(arrivals, width, origin_s=start)
    return TraceProfile(n, span, float(arrivals.input_length.mean()), float(arrivals.output_length.mean()), width,
                        tuple(w.num_req / width for w in windows))


# ---------------------------------------------------------------- the section


def _over_context_lines(inputs: ReportInputs) -> list[str]:
    """How many requests exceed the context and what became of them (workload.over_context)."""
    from spica_core.run.inputs import over_context_note

    note = over_context_note(inputs.config, inputs.trace_file)
    return [f"- {note}"] if note else []


def _workload_section(inputs: ReportInputs, plots: Mapping[str, str]) -> list[str]:
    w = inputs.config.workload
    lines = ["## Workload", ""]
    if w.is_trace:
        name = inputs.trace_file.name if inputs.trace_file is not None else w.trace_path
        lines.append(f"- trace: `{name}` ({w.trace_format})")
        if w.arrival_speedup_ratio != 1.0:
            lines.append(f"- arrivals replayed {fmt(w.arrival_speedup_ratio)}× as fast as recorded")
        if w.replay_concurrency is not None:
            lines.append(f"- replay concurrency cap: {fmt(w.replay_concurrency)} in flight")
        profile: TraceProfile | None = None
        if inputs.trace_file is not None:
            try:
                profile = trace_profile(inputs.trace_file)
            except (OSError, SpicaError) as exc:  # a report renders whatever became of the trace
                lines.append(f"- the trace could not be read: {exc}")
        else:
            lines.append("- the trace file is not available to this report (a copied run folder)")
        if profile is not None:
            lines.append(f"- {fmt(profile.requests)} requests over {fmt(profile.duration_s, 's')}: mean "
                         f"{fmt(profile.mean_rps, 'req/s')}, peak {fmt(profile.peak_rps, 'req/s')} "
                         f"(per {_seconds(profile.bin_s)} bin)")
            lines.append(f"- mean ISL {fmt(profile.mean_isl, 'tokens')}, mean OSL {fmt(profile.mean_osl, 'tokens')}")
        lines += _over_context_lines(inputs)
        if "trace_rate" in plots:
            lines += ["", f"![requests per second over time]({plots['trace_rate']})"]
    else:
        lines.append(f"- synthetic: ISL {fmt(w.isl, 'tokens')}, OSL {fmt(w.osl, 'tokens')}")
        if w.request_rate is not None:
            load = f"open loop at {fmt(w.request_rate, 'req/s')}"
        elif w.concurrency is not None:
            load = f"closed loop, {fmt(w.concurrency)} requests in flight"
        elif w.kv_load_range is not None:
            lo, hi = w.kv_load_range
            load = f"closed loop, KV load ratio searched in [{fmt(lo)}, {fmt(hi)}] of KV capacity"
        else:
            load = f"closed loop, KV load ratio {fmt(w.kv_load_ratio)} of KV capacity"
        lines.append(f"- load: {load}")
        if w.num_request_ratio is not None:
            count = w.concurrency or w.request_rate
            extra = (f" ({fmt(round(w.num_request_ratio * count) * w.turns_per_session)} requests)"
                     if count is not None else "")
            lines.append(f"- num_request_ratio {fmt(w.num_request_ratio)}{extra}")
        if w.shared_prefix_ratio > 0 or w.num_prefix_groups > 0:
            lines.append(f"- shared prefix: {fmt(w.shared_prefix_ratio * 100)}% of the prompt, "
                         f"{fmt(w.num_prefix_groups)} groups")
        if w.turns_per_session > 1:
            lines.append(f"- {fmt(w.turns_per_session)} turns per session, "
                         f"{fmt(w.inter_turn_delay_ms, 'ms')} between turns")
    lines.append("")
    return lines


__all__ = ["trace_profile"]

"""Load-predictor sub-sweep: pick the planner's load predictor per throughput interval.

Dynamo's planner forecasts the next throughput window's request count, mean ISL and mean OSL
with one of four predictor families (``families``). Which family forecasts best depends on the
traffic, so before the Vizier rounds we replay the trace's per-interval windows through every
configured ``load_predictor_candidates`` entry and keep the one with the lowest weighted log loss.

Pure domain code: no Prefect, no file writes (the trace is read, the caller persists rows).
"""
from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from threadpoolctl import threadpool_limits

from spica_core.config.knobs import entry_label
from spica_core.config.model import SmartSearchConfig
from spica_core.config.policies import throughput_intervals
from spica_core.predictors.families import Entry, LoadPredictor, entry_fields, family_min_points, make_predictor
from spica_core.predictors.loss import window_loss
from spica_core.predictors.windows import Window, read_arrivals, windows_from_arrivals

# Reasons. The swept reason gets "; no_winner_fallback_constant_last@[…]" when some
# interval had no finite loss.
REASON_NO_THROUGHPUT: Final = "no_throughput_scaling_candidate"
REASON_STATIC: Final = "static_workload_constant"
REASON_SWEPT: Final = "swept"
FALLBACK_ENTRY: Final = "constant_last"
_FALLBACK_TAG: Final = "no_winner_fallback_constant_last"


# ---------------------------------------------------------------- result


@dataclass(frozen=True)
class LoadPredictorResult:
    """Outcome of the sub-sweep: the winner per throughput interval and every entry's loss."""

    best_by_interval: dict[int, Entry]
    losses: dict[int, dict[str, float]]
    reason: str
    entries: dict[str, Entry] = field(default_factory=dict)  # label -> entry, for entry_json

    def rows(self) -> list[dict[str, Any]]:
        """Rows of load_predictor.parquet: one per (interval, scored entry), plus unscored winners."""
        out: list[dict[str, Any]] = []
        for interval in sorted(set(self.losses) | set(self.best_by_interval)):
            best = self.best_by_interval.get(interval)
            best_json = _entry_json(best) if best is not None else None
            winner_seen = False
            for label, loss in self.losses.get(interval, {}).items():
                entry_js = _entry_json(self.entries.get(label, label))
                is_winner = not winner_seen and entry_js == best_json
                winner_seen = winner_seen or is_winner
                out.append({"interval_seconds": interval, "entry_label": label, "entry_json": entry_js,
                            "mean_loss": float(loss), "winner": is_winner, "reason": self.reason})
            if best is not None and not winner_seen:
                # static workload, or the constant_last fallback when it was not a configured entry
                label = next((lb for lb, e in self.entries.items() if _entry_json(e) == best_json),
                             best if isinstance(best, str) else "fallback")
                out.append({"interval_seconds": interval, "entry_label": label, "entry_json": best_json,
                            "mean_loss": None, "winner": True, "reason": self.reason})
        return out

    @classmethod
    def from_rows(cls, rows: Sequence[dict[str, Any]]) -> LoadPredictorResult:
        """Rebuild the result from load_predictor.parquet rows (a resumed run reads the artifact)."""
        if not rows:
            return cls(best_by_interval={}, losses={}, reason=REASON_NO_THROUGHPUT)
        best: dict[int, Entry] = {}
        losses: dict[int, dict[str, float]] = {}
        entries: dict[str, Entry] = {}
        for row in rows:
            interval = int(row["interval_seconds"])
            entry = json.loads(row["entry_json"])
            entries.setdefault(row["entry_label"], entry)
            if row["mean_loss"] is not None:
                losses.setdefault(interval, {})[row["entry_label"]] = float(row["mean_loss"])
            if row["winner"]:
                best[interval] = entry
        return cls(best_by_interval=best, losses=losses, reason=str(rows[0]["reason"]), entries=entries)

    def winner_for(self, interval_seconds: int | float | None) -> Entry | None:
        """The entry a candidate with this throughput interval runs (None: no throughput scaling)."""
        if interval_seconds is None:
            return None
        return self.best_by_interval.get(int(interval_seconds))


def _entry_json(entry: Entry) -> str:
    return json.dumps(entry, sort_keys=True)


# ---------------------------------------------------------------- evaluation


def common_warmup(entries: Sequence[Entry]) -> int:
    """W = the largest minimum_data_points over all entries, so every entry is scored on the same windows."""
    return max((family_min_points(entry_fields(e)) for e in entries), default=1)


def _predict_or_last(predictor: LoadPredictor) -> float:
    try:
        return float(predictor.predict_next())
    except Exception:  # noqa: BLE001 - the planner falls back to the last value on any failure
        return predictor.get_last_value()


def evaluate_entry(windows: Sequence[Window], fields: dict[str, Any], interval_s: float, warmup: int) -> float:
    """Mean window loss of one entry: forecast window t from windows < t; score t ≥ warm-up; inf if none.

    BLAS is held to one thread: the fits are tiny, and on a busy machine OpenBLAS's spinning threads
    made the ARIMA fits about ten times slower (measured 1.6 s → 14 s for one interval).
    """
    with threadpool_limits(limits=1):
        return _evaluate_entry(windows, fields, interval_s, warmup)


def _evaluate_entry(windows: Sequence[Window], fields: dict[str, Any], interval_s: float, warmup: int) -> float:
    n_pred, i_pred, o_pred = (make_predictor(fields, interval_s) for _ in range(3))
    total = 0.0
    scored = 0
    for t, win in enumerate(windows):
        n_hat, i_hat, o_hat = _predict_or_last(n_pred), _predict_or_last(i_pred), _predict_or_last(o_pred)
        if t >= warmup:
            total += window_loss(n_hat, i_hat, o_hat, win.num_req, win.isl, win.osl)
            scored += 1
        n_pred.add_data_point(win.num_req)
        i_pred.add_data_point(win.isl)
        o_pred.add_data_point(win.osl)
    return total / scored if scored else math.inf


def pick_winner(entries: Sequence[Entry], losses: Sequence[float]) -> Entry | None:
    """Lowest finite mean loss; strict ``<`` so the earlier entry wins ties; None when all are inf."""
    best: Entry | None = None
    best_loss = math.inf
    for entry, loss in zip(entries, losses):
        if loss < best_loss:
            best, best_loss = entry, loss
    return best


def sweep_windows(windows_by_interval: Mapping[int, Sequence[Window]], entries: Sequence[Entry]) -> LoadPredictorResult:
    """Score every entry on every interval's windows and choose winners (the trace-free core)."""
    fields = [entry_fields(e) for e in entries]  # validates every family up front
    labels = [entry_label("load_predictor_candidates", e, i) for i, e in enumerate(entries)]
    warmup = common_warmup(entries)
    best: dict[int, Entry] = {}
    losses: dict[int, dict[str, float]] = {}
    no_winner: list[int] = []
    for interval in sorted(windows_by_interval):
        windows = windows_by_interval[interval]
        scores = [evaluate_entry(windows, f, interval, warmup) for f in fields]
        losses[interval] = dict(zip(labels, scores))
        winner = pick_winner(entries, scores)
        if winner is None:
            no_winner.append(interval)
            winner = FALLBACK_ENTRY
        best[interval] = winner
    reason = REASON_SWEPT
    if no_winner:
        reason += f"; {_FALLBACK_TAG}@{no_winner}"
    return LoadPredictorResult(best_by_interval=best, losses=losses, reason=reason,
                               entries=dict(zip(labels, entries)))


def sweep_load_predictor(config: SmartSearchConfig, trace_path: Path | None,
                         kept_policies: Sequence[Entry]) -> LoadPredictorResult:
    """Sub-sweep: skip without throughput scaling, constant for synthetic load, else grid-search."""
    intervals = throughput_intervals(list(kept_policies))
    if not intervals:
        return LoadPredictorResult(best_by_interval={}, losses={}, reason=REASON_NO_THROUGHPUT)
    if not config.workload.is_trace:
        return LoadPredictorResult(best_by_interval={i: FALLBACK_ENTRY for i in intervals}, losses={},
                                   reason=REASON_STATIC, entries={FALLBACK_ENTRY: FALLBACK_ENTRY})
    if trace_path is None:
        raise ValueError("workload.trace_path is set but no resolved trace file was given to the "
                         "load-predictor sub-sweep")
    entries = list(config.search_space.load_predictor_candidates)
    for e in entries:
        entry_fields(e)  # fail on an unknown family before reading the trace
    arrivals = read_arrivals(trace_path)
    windows = {i: windows_from_arrivals(arrivals, i) for i in intervals}
    return sweep_windows(windows, entries)


__all__ = [
    "LoadPredictorResult", "common_warmup", "evaluate_entry", "pick_winner", "sweep_windows", "sweep_load_predictor",
    "REASON_NO_THROUGHPUT", "REASON_STATIC", "REASON_SWEPT", "FALLBACK_ENTRY",
]

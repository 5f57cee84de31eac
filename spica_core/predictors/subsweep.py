"""Load-predictor sub-sweep (reference §8): pick the planner's load predictor per throughput interval.

Dynamo's planner forecasts the next throughput window's request count, mean ISL and mean OSL
with one of four predictor families. Which family forecasts best depends on the traffic, so
before the Vizier rounds we replay the trace's per-interval windows through every configured
``load_predictor_candidates`` entry and keep the one with the lowest weighted log loss. The
predictor classes below are our own implementation of the behaviour described in
``spec/planner.md`` §3.2, so the winner behaves like what the planner would run.

Pure domain code: no Prefect, no file writes (the trace is read, the caller persists rows).
"""
from __future__ import annotations

import json
import logging
import math
import warnings
from abc import ABC, abstractmethod
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Sequence

import numpy as np
import pyarrow as pa
from threadpoolctl import threadpool_limits

from spica_core.evaluate import traces
from spica_core.config.knobs import PREDICTOR_FAMILIES, decode_composite, entry_label, predictor_fields
from spica_core.config.model import SmartSearchConfig
from spica_core.config.policies import throughput_intervals

# Reasons (§8.1). The swept reason gets "; no_winner_fallback_constant_last@[…]" when some
# interval had no finite loss.
REASON_NO_THROUGHPUT: Final = "no_throughput_scaling_candidate"
REASON_STATIC: Final = "static_workload_constant"
REASON_SWEPT: Final = "swept"
FALLBACK_ENTRY: Final = "constant_last"
_FALLBACK_TAG: Final = "no_winner_fallback_constant_last"

# Loss weights (§8.4): prefill work N·I and decode work N·O dominate, the means refine.
W_PREFILL: Final = 0.4
W_DECODE: Final = 0.4
W_ISL: Final = 0.1
W_OSL: Final = 0.1

_PROPHET_EPOCH: Final = "2024-01-01"
_Q_FLOOR: Final = 1e-12

# Arrow schema of load_predictor.parquet, so an empty result still writes a typed table.
LOAD_PREDICTOR_SCHEMA: Final = pa.schema([
    ("interval_seconds", pa.int64()),
    ("entry_label", pa.string()),
    ("entry_json", pa.string()),
    ("mean_loss", pa.float64()),
    ("winner", pa.bool_()),
    ("reason", pa.string()),
])

Entry = str | dict[str, Any]


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


# ---------------------------------------------------------------- windows (§8.2)


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


def read_trace(path: str | Path) -> TraceArrivals:
    """Read timestamp (ms), input_length and output_length of every row of a mooncake JSONL trace."""
    ts: list[float] = []
    isl: list[float] = []
    osl: list[float] = []
    for row in traces.read_trace(path):
        ts.append(row.timestamp_ms)
        isl.append(row.input_length)
        osl.append(row.output_length)
    return TraceArrivals(np.asarray(ts, dtype=np.float64), np.asarray(isl, dtype=np.float64),
                         np.asarray(osl, dtype=np.float64))


def windows_from_arrivals(arrivals: TraceArrivals, interval_s: float) -> list[Window]:
    """Bucket arrivals by ⌊t/I⌋; keep every bucket from the first to the last active one."""
    if interval_s <= 0:
        raise ValueError(f"interval must be positive, got {interval_s}")
    if arrivals.timestamp_ms.size == 0:
        return []
    keys = np.floor((arrivals.timestamp_ms / 1000.0) / interval_s).astype(np.int64)
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
                          osl=float(osl_sum[k] / n) if n else 0.0, start_s=float((first + k) * interval_s)))
    return out


def build_windows(trace_path: str | Path, interval_s: float) -> list[Window]:
    """Windows of one throughput interval, straight from a trace file."""
    return windows_from_arrivals(read_trace(trace_path), interval_s)


# ---------------------------------------------------------------- loss (§8.4)


def log_error(predicted: float, actual: float) -> float:
    """|ln(1+p⁺) − ln(1+a⁺)|: scale-free, so a 10 % miss costs the same at any load."""
    return abs(math.log1p(max(predicted, 0.0)) - math.log1p(max(actual, 0.0)))


def window_loss(n_hat: float, i_hat: float, o_hat: float, n: float, i: float, o: float) -> float:
    """Weighted log loss of one window; num_req only counts through the N·I and N·O products."""
    return (W_PREFILL * log_error(n_hat * i_hat, n * i)
            + W_DECODE * log_error(n_hat * o_hat, n * o)
            + W_ISL * log_error(i_hat, i)
            + W_OSL * log_error(o_hat, o))


# ---------------------------------------------------------------- predictors (§8.5, planner.md §3.2)


def _quiet_forecasting_libraries() -> None:
    """Prophet/cmdstanpy log every fit at INFO and prophet logs a plotly error at import.

    cmdstanpy installs its own INFO handler unless the logger already has one, so a NullHandler
    goes in first.
    """
    for name in ("cmdstanpy", "prophet", "prophet.plot", "prophet.models", "prophet.forecaster"):
        logger = logging.getLogger(name)
        if not any(isinstance(h, logging.NullHandler) for h in logger.handlers):
            logger.addHandler(logging.NullHandler())
        logger.setLevel(logging.CRITICAL)
        logger.propagate = False


class LoadPredictor(ABC):
    """Common behaviour: NaN → 0, skip the idle run of leading zeros, last value until warm."""

    minimum_data_points: int = 1

    def __init__(self, log1p: bool = False) -> None:
        self.log1p = log1p
        self._values: list[float] = []

    @property
    def values(self) -> list[float]:
        return list(self._values)

    def add_data_point(self, value: float) -> None:
        v = float(value)
        if not math.isfinite(v):
            v = 0.0
        if not self._values and v == 0.0:
            return  # idle period before the first traffic carries no information
        self._values.append(v)
        self._on_added(v)

    def _on_added(self, value: float) -> None:
        """Hook for stateful families (Kalman)."""

    def get_last_value(self) -> float:
        return self._values[-1] if self._values else 0.0

    def predict_next(self) -> float:
        if len(self._values) < self.minimum_data_points:
            return self.get_last_value()
        return self._forecast()

    @abstractmethod
    def _forecast(self) -> float:
        """One-step-ahead forecast, only called once warm."""

    def _to_model(self, value: float) -> float:
        return math.log1p(max(value, 0.0)) if self.log1p else value

    def _from_model(self, value: float) -> float:
        return max(0.0, math.expm1(value) if self.log1p else value)


class ConstantPredictor(LoadPredictor):
    """Next window = last window."""

    minimum_data_points = 1

    def _forecast(self) -> float:
        return self.get_last_value()


class ArimaPredictor(LoadPredictor):
    """pmdarima auto_arima fitted once on the whole history, then updated incrementally."""

    minimum_data_points = 5

    def __init__(self, log1p: bool = False) -> None:
        super().__init__(log1p)
        self._model: Any = None
        self._log_space = log1p
        self._fitted = 0  # number of buffered values the model has seen

    def _transform(self, values: Sequence[float]) -> np.ndarray:
        arr = np.asarray(values, dtype=np.float64)
        return np.log1p(np.maximum(arr, 0.0)) if self._log_space else arr

    @staticmethod
    def _fit(series: np.ndarray) -> Any:
        import pmdarima

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return pmdarima.auto_arima(series, suppress_warnings=True, error_action="ignore")

    def _forecast(self) -> float:
        values = self._values
        if all(v == values[0] for v in values):
            return values[0]  # auto_arima cannot fit a constant series; the constant is the answer
        with threadpool_limits(limits=1):  # tiny fits: extra BLAS threads only contend
            return self._fit_and_forecast(values)

    def _fit_and_forecast(self, values: list[float]) -> float:
        try:
            if self._model is None:
                self._model = self._fit(self._transform(values))
                p, _d, q = self._model.order
                if not self._log_space and p == 0 and q == 0:
                    # a (0,d,0) fit only repeats/extrapolates the last value: retry in log space
                    self._log_space = True
                    self._model = self._fit(self._transform(values))
                self._fitted = len(values)
            elif self._fitted < len(values):
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    self._model.update(self._transform(values[self._fitted:]))
                self._fitted = len(values)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                y = float(np.asarray(self._model.predict(n_periods=1))[0])
            if not math.isfinite(y):
                return self.get_last_value()
            return max(0.0, math.expm1(y) if self._log_space else y)
        except Exception:  # noqa: BLE001 - any fitting failure degrades to the constant forecast
            return self.get_last_value()


class ProphetPredictor(LoadPredictor):
    """Prophet refitted on the last ``window_size`` points, spaced by the throughput interval."""

    minimum_data_points = 5

    def __init__(self, log1p: bool = False, window_size: int = 50, interval_s: float = 180.0) -> None:
        super().__init__(log1p)
        self.window_size = int(window_size)
        self.interval_s = float(interval_s)
        self._window: deque[tuple[int, float]] = deque(maxlen=max(self.window_size, 1))
        self._count = 0

    def _on_added(self, value: float) -> None:
        self._window.append((self._count, value))
        self._count += 1

    def predict_next(self) -> float:
        if len(self._window) < self.minimum_data_points:
            return self.get_last_value()
        return self._forecast()

    def _forecast(self) -> float:
        import pandas as pd

        _quiet_forecasting_libraries()
        from prophet import Prophet

        epoch = pd.Timestamp(_PROPHET_EPOCH)
        step = pd.Timedelta(seconds=self.interval_s)
        frame = pd.DataFrame({
            "ds": [epoch + k * step for k, _ in self._window],
            "y": [self._to_model(v) for _, v in self._window],
        })
        next_ds = epoch + (self._window[-1][0] + 1) * step
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                # uncertainty_samples=0 skips the interval sampling; yhat (all we use) is unchanged
                model = Prophet(uncertainty_samples=0)
                model.fit(frame)
                yhat = float(model.predict(pd.DataFrame({"ds": [next_ds]}))["yhat"].iloc[0])
        except Exception:  # noqa: BLE001 - a failed fit falls back to the last value
            return self.get_last_value()
        if not math.isfinite(yhat):
            return self.get_last_value()
        return self._from_model(yhat)


class KalmanPredictor(LoadPredictor):
    """Local-linear-trend Kalman filter: cheap, reactive, follows ramps without refitting."""

    def __init__(self, log1p: bool = False, q_level: float = 1.0, q_trend: float = 0.1,
                 r: float = 10.0, min_points: int = 5) -> None:
        super().__init__(log1p)
        from filterpy.kalman import KalmanFilter

        self.minimum_data_points = int(min_points)
        kf = KalmanFilter(dim_x=2, dim_z=1)
        kf.F = np.array([[1.0, 1.0], [0.0, 1.0]])
        kf.H = np.array([[1.0, 0.0]])
        kf.P = np.eye(2) * 1000.0
        kf.R = np.array([[float(r)]])
        kf.Q = np.diag([max(float(q_level), _Q_FLOOR), max(float(q_trend), _Q_FLOOR)])
        self._kf = kf
        self._initialised = False
        self._advanced = False  # a forecast already ran the predict step for this interval
        self._cached: float | None = None

    def _on_added(self, value: float) -> None:
        z = self._to_model(value)
        if not self._initialised:
            self._kf.x = np.array([[z], [0.0]])
            self._initialised = True
        else:
            if not self._advanced:
                self._kf.predict()
            self._kf.update(np.array([[z]]))
        self._advanced = False
        self._cached = None

    def _forecast(self) -> float:
        if not self._advanced:
            self._kf.predict()
            self._advanced = True
            self._cached = float(self._kf.x[0, 0])
        assert self._cached is not None
        return self._from_model(self._cached)


def family_min_points(fields: dict[str, Any]) -> int:
    """Points a family needs before it forecasts (constant 1, arima/prophet 5, kalman its own)."""
    family = fields["load_predictor"]
    if family == "constant":
        return ConstantPredictor.minimum_data_points
    if family == "arima":
        return ArimaPredictor.minimum_data_points
    if family == "prophet":
        return ProphetPredictor.minimum_data_points
    if family == "kalman":
        return int(fields["kalman_min_points"])
    raise _unknown_family(family)


def make_predictor(fields: dict[str, Any], interval_s: float) -> LoadPredictor:
    """A fresh predictor of the entry's family, configured from its flat planner fields."""
    family = fields["load_predictor"]
    log1p = bool(fields.get("load_predictor_log1p", False))
    if family == "constant":
        return ConstantPredictor(log1p)
    if family == "arima":
        return ArimaPredictor(log1p)
    if family == "prophet":
        return ProphetPredictor(log1p, window_size=int(fields["prophet_window_size"]), interval_s=interval_s)
    if family == "kalman":
        return KalmanPredictor(log1p, q_level=float(fields["kalman_q_level"]),
                               q_trend=float(fields["kalman_q_trend"]), r=float(fields["kalman_r"]),
                               min_points=int(fields["kalman_min_points"]))
    raise _unknown_family(family)


def _unknown_family(family: Any) -> ValueError:
    return ValueError(f"load_predictor {family!r} is not a known family; allowed: {list(PREDICTOR_FAMILIES)}")


def entry_fields(entry: Entry) -> dict[str, Any]:
    """Validated flat fields of one load_predictor_candidates entry (ValueError names a bad family)."""
    raw = decode_composite("load_predictor_candidates", entry)
    family = raw.get("load_predictor")
    if family not in PREDICTOR_FAMILIES:
        raise _unknown_family(family)
    return predictor_fields(entry)


# ---------------------------------------------------------------- evaluation (§8.3)


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


def sweep_windows(windows_by_interval: dict[int, Sequence[Window]], entries: Sequence[Entry]) -> LoadPredictorResult:
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
    """The §8 sub-sweep: skip without throughput scaling, constant for synthetic load, else grid-search."""
    intervals = throughput_intervals(kept_policies)
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
    arrivals = read_trace(trace_path)
    windows = {i: windows_from_arrivals(arrivals, i) for i in intervals}
    return sweep_windows(windows, entries)


__all__ = [
    "LoadPredictorResult", "LOAD_PREDICTOR_SCHEMA", "Window", "TraceArrivals", "throughput_intervals",
    "read_trace", "windows_from_arrivals", "build_windows", "log_error", "window_loss", "LoadPredictor",
    "ConstantPredictor", "ArimaPredictor", "ProphetPredictor", "KalmanPredictor", "make_predictor",
    "family_min_points", "entry_fields", "common_warmup", "evaluate_entry", "pick_winner", "sweep_windows",
    "sweep_load_predictor", "REASON_NO_THROUGHPUT", "REASON_STATIC", "REASON_SWEPT", "FALLBACK_ENTRY",
]

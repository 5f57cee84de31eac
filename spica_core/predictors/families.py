"""The planner's four load-predictor families behind one registry.

Our own implementation of the behaviour the planner documents, so a sub-sweep winner forecasts
like what the planner would run. Each family builds itself from a load_predictor_candidates
entry's flat fields and knows how many points it needs before it forecasts.
"""
from __future__ import annotations

import logging
import math
import warnings
from abc import ABC, abstractmethod
from collections import deque
from typing import Any, Final, Sequence

import numpy as np
from threadpoolctl import threadpool_limits

from spica_core.config.knobs import decode_composite, predictor_fields

Entry = str | dict[str, Any]

_PROPHET_EPOCH: Final = "2024-01-01"
_Q_FLOOR: Final = 1e-12


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

    @classmethod
    def from_fields(cls, fields: dict[str, Any], interval_s: float) -> LoadPredictor:
        """A fresh predictor configured from an entry's flat fields; families with knobs override."""
        return cls(_log1p(fields))

    @classmethod
    def min_points(cls, fields: dict[str, Any]) -> int:
        """Points needed before the first forecast; a family whose entry sets it overrides."""
        return cls.minimum_data_points

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


def _log1p(fields: dict[str, Any]) -> bool:
    return bool(fields.get("load_predictor_log1p", False))


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

    @classmethod
    def from_fields(cls, fields: dict[str, Any], interval_s: float) -> ProphetPredictor:
        return cls(_log1p(fields), window_size=int(fields["prophet_window_size"]), interval_s=interval_s)

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

    @classmethod
    def from_fields(cls, fields: dict[str, Any], interval_s: float) -> KalmanPredictor:
        return cls(_log1p(fields), q_level=float(fields["kalman_q_level"]), q_trend=float(fields["kalman_q_trend"]),
                   r=float(fields["kalman_r"]), min_points=cls.min_points(fields))

    @classmethod
    def min_points(cls, fields: dict[str, Any]) -> int:
        return int(fields["kalman_min_points"])

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


# The allowed names are config.knobs.PREDICTOR_FAMILIES (config must not import this module);
# tests assert the two agree, in order.
FAMILIES: Final[dict[str, type[LoadPredictor]]] = {
    "constant": ConstantPredictor,
    "arima": ArimaPredictor,
    "prophet": ProphetPredictor,
    "kalman": KalmanPredictor,
}


def _family(name: Any) -> type[LoadPredictor]:
    """The registry entry; a non-string name (a YAML list, say) is unknown too, not a TypeError."""
    family = FAMILIES.get(name) if isinstance(name, str) else None
    if family is None:
        raise ValueError(f"load_predictor {name!r} is not a known family; allowed: {list(FAMILIES)}")
    return family


def make_predictor(fields: dict[str, Any], interval_s: float) -> LoadPredictor:
    """A fresh predictor of the entry's family, configured from its flat planner fields."""
    return _family(fields["load_predictor"]).from_fields(fields, interval_s)


def family_min_points(fields: dict[str, Any]) -> int:
    """Points a family needs before it forecasts (constant 1, arima/prophet 5, kalman its own)."""
    return _family(fields["load_predictor"]).min_points(fields)


def entry_fields(entry: Entry) -> dict[str, Any]:
    """Validated flat fields of one load_predictor_candidates entry (ValueError names a bad family)."""
    _family(decode_composite("load_predictor_candidates", entry).get("load_predictor"))
    return predictor_fields(entry)


__all__ = ["Entry", "LoadPredictor", "ConstantPredictor", "ArimaPredictor", "ProphetPredictor", "KalmanPredictor",
           "FAMILIES", "make_predictor", "family_min_points", "entry_fields"]

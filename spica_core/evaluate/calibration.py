"""A calibration: how far Spica's predictions were off on the user's own GPUs, per (model, SKU, backend) group.

``spica calibrate`` writes one from measurements (AIPerf exports of the benchmark plans, or silicon-format CSV
rows); ``--calibration FILE`` and ``goal.calibration`` apply it. For each group the user measured, and each
latency (mean TTFT, mean ITL), the file holds the quantiles of measured ÷ predicted and the *correction*, the
factor a prediction of that group is multiplied by:

- a group with at least :data:`OWN_ROWS` rows (the shipped band file's own threshold) gets its own median as its
  correction and its own quantiles as its band, never narrower than the shipped band's spread around it;
- a group with fewer rows gets a shrunk correction (``spica_core.calibrate.fit``) and the shipped band's
  spread around it.

A candidate of a group the user did not measure keeps the shipped prediction and band.
"""
from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from spica_core.errors import CalibrationFileError
from spica_core.evaluate.bands import BAND_METRICS, Band, Ratio, group_keys
from spica_core.store import fingerprint

CALIBRATION_KIND = "spica-calibration"
CALIBRATION_SCHEMA = 1
OWN_ROWS = 10    # a group with this many rows gets its own quantiles: the shipped band file's own min_rows
_RATIO_FIELDS = ("p10", "p50", "p90", "p95", "p99", "p05")
_METRIC_OF = {"ttft_ms": "mean_ttft_ms", "itl_ms": "mean_itl_ms"}


@dataclass(frozen=True)
class MeasuredRow:
    """One measurement, what Spica predicted for it, and where it came from (``file:line``)."""

    id: str
    source: str
    measured: Mapping[str, float]     # ttft_ms, itl_ms
    predicted: Mapping[str, float]    # the same, uncalibrated

    def ratio(self, metric: str) -> float:
        return float(self.measured[metric]) / float(self.predicted[metric])

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "source": self.source, "measured": dict(self.measured),
                "predicted": dict(self.predicted)}


@dataclass(frozen=True)
class MetricCalibration:
    """One latency of one group: the factor predictions are multiplied by, and the quantiles of measured ÷
    predicted (uncalibrated) its band is drawn from."""

    rows: int
    correction: float
    ratio: Ratio
    method: str           # "own" (its own quantiles) or "shrunk" (too few rows: see spica_core.calibrate.fit)
    weight: float         # the share of the group's own mean log ratio in the correction (1 for "own")

    def factor(self, confidence: float) -> float:
        """What a prediction is multiplied by before it is held against the SLA: the correction at 0.5, the
        calibrated quantile above it (never below the correction)."""
        return self.correction if confidence <= 0.5 else max(self.correction, self.ratio.quantile(confidence))

    def to_dict(self) -> dict[str, Any]:
        ratios = {n: getattr(self.ratio, n) for n in _RATIO_FIELDS if getattr(self.ratio, n) is not None}
        return {"rows": self.rows, "correction": self.correction, "method": self.method, "weight": self.weight,
                "ratios": ratios}


@dataclass(frozen=True)
class GroupCalibration:
    """The calibration of one (model, SKU, backend) group and the rows it was made from."""

    model: str
    system: str
    backend: str
    metrics: Mapping[str, MetricCalibration]
    rows: tuple[MeasuredRow, ...]

    @property
    def key(self) -> str:
        return group_keys(self.model, self.system, self.backend)[0]


@dataclass(frozen=True)
class Applied:
    """Which calibration applied to a candidate: ``{file, group, rows}`` in every output (group None: the
    candidate's group was not measured, so it keeps the shipped numbers)."""

    file: str
    group: str | None
    rows: int

    def to_dict(self) -> dict[str, Any]:
        return {"file": self.file, "group": self.group, "rows": self.rows}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> Applied | None:
        if not data:
            return None
        return cls(str(data["file"]), None if data.get("group") is None else str(data["group"]), int(data["rows"]))

    def text(self) -> str:
        if self.group is None:
            return f"{self.file} (this group was not measured: shipped numbers)"
        return f"{self.file} ({self.group}, {self.rows} rows)"


@dataclass(frozen=True)
class Calibration:
    """A calibration file, read or just fitted."""

    groups: Mapping[str, GroupCalibration]
    shrinkage: Mapping[str, Mapping[str, float]] = field(default_factory=dict)   # metric -> sigma2, tau2, k
    path: str = ""

    def group(self, model: str, system: str, backend: str) -> GroupCalibration | None:
        return self.groups.get(group_keys(model, system, backend)[0])

    def applied(self, model: str, system: str, backend: str) -> Applied:
        g = self.group(model, system, backend)
        return Applied(self.path, None if g is None else g.key, 0 if g is None else len(g.rows))

    def corrections(self, model: str, system: str, backend: str) -> dict[str, float]:
        """The factor each latency's prediction is multiplied by ({}: not measured, nothing changes)."""
        g = self.group(model, system, backend)
        return {} if g is None else {m: c.correction for m, c in g.metrics.items()}

    def sla_factors(self, model: str, system: str, backend: str, confidence: float) -> dict[str, float]:
        g = self.group(model, system, backend)
        return {} if g is None else {m: c.factor(confidence) for m, c in g.metrics.items()}

    def bands(self, model: str, system: str, backend: str, predicted: Mapping[str, float],
              shipped: Mapping[str, Band]) -> dict[str, Band]:
        """The band on each latency: the calibrated group's quantiles times the uncalibrated prediction
        (``predicted``: metric name → value, as a candidate's metrics), else the shipped band."""
        g = self.group(model, system, backend)
        out = dict(shipped)
        if g is None:
            return out
        for metric, cal in g.metrics.items():
            value = predicted.get(_METRIC_OF[metric])
            if value is None or not math.isfinite(float(value)):
                continue
            spread = shipped[metric].spread if metric in shipped else 0.0
            out[metric] = cal.ratio.band(value, spread, f"calibrated {g.key}")
        return out

    @property
    def fingerprint(self) -> str:
        """The content's fingerprint (not the path's): part of a calibrated run's identity."""
        return fingerprint(self.to_dict())

    def to_dict(self) -> dict[str, Any]:
        return {"kind": CALIBRATION_KIND, "schema": CALIBRATION_SCHEMA,
                "shrinkage": {m: dict(v) for m, v in sorted(self.shrinkage.items())},
                "groups": {key: {"model": g.model, "system": g.system, "backend": g.backend,
                                 **{m: c.to_dict() for m, c in sorted(g.metrics.items())},
                                 "rows": [r.to_dict() for r in g.rows]}
                           for key, g in sorted(self.groups.items())}}


def write_calibration(calibration: Calibration, path: str | Path) -> Path:
    from spica_core.store import write_file

    return write_file(Path(path), json.dumps(calibration.to_dict(), indent=2, sort_keys=True) + "\n")


def load_calibration(path: str | Path) -> Calibration:
    """Read and check a calibration file; CalibrationFileError names the file and what is wrong."""
    resolved = Path(path).expanduser().resolve()
    try:
        stamp = resolved.stat().st_mtime_ns
    except OSError as exc:
        raise CalibrationFileError(f"calibration file {path}: cannot be read ({exc.strerror}); write one with "
                                   "`spica calibrate MEASUREMENTS... --out FILE`") from None
    return _load(str(resolved), stamp)


@lru_cache(maxsize=8)
def _load(path: str, _stamp: int) -> Calibration:
    where = f"calibration file {path}"
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CalibrationFileError(f"{where}: not a readable JSON file ({exc})") from None
    if not isinstance(doc, dict) or doc.get("kind") != CALIBRATION_KIND or doc.get("schema") != CALIBRATION_SCHEMA:
        raise CalibrationFileError(f"{where}: not a Spica calibration (needs kind {CALIBRATION_KIND!r} and schema "
                                   f"{CALIBRATION_SCHEMA}); write one with `spica calibrate`")
    groups: dict[str, GroupCalibration] = {}
    for key, g in (doc.get("groups") or {}).items():
        try:
            metrics = {m: _metric(g[m]) for m in BAND_METRICS if m in g}
            rows = tuple(MeasuredRow(str(r["id"]), str(r["source"]), _positive(r["measured"]),
                                     _positive(r["predicted"])) for r in g.get("rows") or ())
            group = GroupCalibration(str(g["model"]), str(g["system"]), str(g["backend"]), metrics, rows)
        except (KeyError, TypeError, ValueError) as exc:
            raise CalibrationFileError(f"{where}: groups[{key!r}] is malformed ({type(exc).__name__}: {exc}); "
                                       "write it again with `spica calibrate`") from None
        if group.key != key or not metrics:
            raise CalibrationFileError(f"{where}: groups[{key!r}] must be keyed by its own model, system and backend "
                                       "and calibrate ttft_ms or itl_ms")
        groups[key] = group
    shrinkage = {str(m): {str(k): float(v) for k, v in s.items()} for m, s in (doc.get("shrinkage") or {}).items()}
    return Calibration(groups, shrinkage, path)


def _positive(values: Mapping[str, Any]) -> dict[str, float]:
    out = {str(k): float(v) for k, v in values.items()}
    if not all(math.isfinite(v) and v > 0 for v in out.values()):
        raise ValueError(f"latencies must be positive finite numbers, got {out}")
    return out


def _metric(data: Mapping[str, Any]) -> MetricCalibration:
    r = data["ratios"]
    values = _positive({n: r[n] for n in _RATIO_FIELDS if r.get(n) is not None})
    correction = float(data["correction"])
    if not (math.isfinite(correction) and correction > 0):
        raise ValueError(f"correction must be a positive number, got {correction}")
    ratio = Ratio("calibration", int(data["rows"]), values["p10"], values["p50"], values["p90"], values.get("p95"),
                  values.get("p99"), values.get("p05"))
    return MetricCalibration(int(data["rows"]), correction, ratio, str(data["method"]), float(data["weight"]))


__all__ = ["Applied", "Calibration", "GroupCalibration", "MeasuredRow", "MetricCalibration", "OWN_ROWS",
           "CALIBRATION_KIND", "CALIBRATION_SCHEMA", "load_calibration", "write_calibration"]

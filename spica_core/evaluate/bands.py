"""Error bands: how far predictions of a candidate's kind have been off on measured GPUs.

``bench/bench_accuracy.py`` replays aiconfigurator-core's measured rows (``silicon_sample.csv``)
through the product's own evaluation path and writes ``data/bands.json``: per group, quantiles of
measured ÷ predicted for mean TTFT and mean ITL, with row counts. A candidate's group falls back from
(model, SKU, backend) to the backend, and then to all rows, taking the first that has at least
``min_rows`` rows. Its band is the prediction times those quantiles: where the true
value has landed, on measured GPUs, for predictions like this one.

``goal.sla_confidence`` asks the SLA to hold at a band quantile: a request meets the SLA only if its
latency times the quantile factor meets it, which is the same as replaying against the SLA divided by
the factor. At 0.5 the factor is 1 (the point prediction, as before); above it the factor is the
quantile of measured ÷ predicted at that confidence, never below 1, so a higher confidence never
loosens an SLA.
"""
from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from spica_core.errors import BandFileError
from spica_core.evaluate.data_files import read_data_file

BAND_FILE = Path(__file__).parent / "data" / "bands.json"
BAND_SCHEMA = 1
BAND_METRICS = ("ttft_ms", "itl_ms")
_METRIC_OF = {"ttft_ms": "mean_ttft_ms", "itl_ms": "mean_itl_ms"}
_QUANTILES = (("p50", 0.5), ("p90", 0.9), ("p95", 0.95), ("p99", 0.99))
_REQUIRED = ("p10", "p50", "p90", "rows")


@dataclass(frozen=True)
class Ratio:
    """Quantiles of measured ÷ predicted for one metric in one group of measured rows."""

    group: str
    rows: int
    p10: float
    p50: float
    p90: float
    p95: float | None = None
    p99: float | None = None
    p05: float | None = None

    def quantile(self, confidence: float) -> float:
        """Measured ÷ predicted at ``confidence``, linear between the stored quantiles (flat past the last)."""
        points = [(q, getattr(self, name)) for name, q in _QUANTILES if getattr(self, name) is not None]
        if confidence <= points[0][0]:
            return points[0][1]
        for (q0, v0), (q1, v1) in zip(points, points[1:]):
            if confidence <= q1:
                return v0 + (v1 - v0) * (confidence - q0) / (q1 - q0)
        return points[-1][1]

    def factor(self, confidence: float) -> float:
        """What a predicted latency is multiplied by before it is held against the SLA (1 at 0.5)."""
        return 1.0 if confidence <= 0.5 else max(1.0, self.quantile(confidence))

    def band(self, value: float, spread: float = 0.0, group: str | None = None) -> Band:
        """The band on a prediction ``value``: its p10–p90 widened by the replays' own ``spread`` (a fraction)."""
        return Band(value * self.p10 * (1 - spread), value * self.p50, value * self.p90 * (1 + spread), self.rows,
                    self.group if group is None else group, spread)


@dataclass(frozen=True)
class Band:
    """The band on the true value of one prediction, in the metric's own unit (ms)."""

    p10: float
    p50: float
    p90: float
    rows: int
    group: str
    spread: float = 0.0   # the run-to-run spread of this candidate's own replays, as a fraction (0: exact)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Band:
        return cls(float(data["p10"]), float(data["p50"]), float(data["p90"]), int(data["rows"]), str(data["group"]),
                   float(data.get("spread", 0.0)))


def bands_to_dict(bands: Mapping[str, Band]) -> dict[str, dict[str, Any]]:
    return {k: b.to_dict() for k, b in bands.items()}


def bands_from_dict(data: Mapping[str, Any] | None) -> dict[str, Band]:
    return {k: Band.from_dict(v) for k, v in (data or {}).items()}


def group_keys(model: str, system: str, backend: str) -> tuple[str, ...]:
    """The fallback chain of a candidate's group, most specific first.

    A model without enough measured rows of its own on this SKU and backend takes the quantiles of every
    measured row, whatever its backend: how far a model nobody has measured lands is the spread between
    models, and one backend's rows come from too few of them. The out-of-fold coverage in
    docs/accuracy.md shows it: predicted for a model left out, with the model's network left out too, the
    backend's rows held 76 % of TTFTs and 72 % of TPOTs in their p10-p90, every row's 77 % and 78 %."""
    return (f"model={model};system={system};backend={backend}", "all")


@dataclass(frozen=True)
class BandTable:
    """The shipped band file, read once per process."""

    path: str
    aic_version: str
    min_rows: int
    ratios: Mapping[str, Mapping[str, Ratio]]   # metric -> group key -> ratio quantiles

    def ratio(self, metric: str, model: str, system: str, backend: str) -> Ratio:
        table = self.ratios[metric]
        for key in group_keys(model, system, backend):
            found = table.get(key)
            if found is not None and (found.rows >= self.min_rows or key == "all"):
                return found
        raise BandFileError(f"{self.path}: no '{metric}' band for {model} on {system} ({backend}) and no 'all' "
                            "group; regenerate it with `python bench/bench_accuracy.py`")

    def bands(self, model: str, system: str, backend: str, metrics: Mapping[str, float],
              spread: Mapping[str, float] | None = None) -> dict[str, Band]:
        """The band on each predicted latency present in ``metrics`` (mean TTFT, mean ITL)."""
        out: dict[str, Band] = {}
        for metric in BAND_METRICS:
            value = metrics.get(_METRIC_OF[metric])
            if value is None or not math.isfinite(float(value)):
                continue
            extra = float((spread or {}).get(metric, 0.0))
            out[metric] = self.ratio(metric, model, system, backend).band(value, extra)
        return out

    def sla_factors(self, model: str, system: str, backend: str, confidence: float) -> dict[str, float]:
        return {m: self.ratio(m, model, system, backend).factor(confidence) for m in BAND_METRICS}


def band_file() -> Path:
    """The band file: ``SPICA_BANDS_FILE`` when set (a re-run benchmark's own), else the shipped one."""
    return Path(os.environ.get("SPICA_BANDS_FILE") or BAND_FILE)


def load_bands(path: str | Path | None = None) -> BandTable:
    """Read and check a band file; BandFileError names the file and what is wrong with it."""
    return _load(str(Path(path) if path is not None else band_file()))


@lru_cache(maxsize=4)
def _load(path: str) -> BandTable:
    fix = "regenerate it with `python bench/bench_accuracy.py`, or unset SPICA_BANDS_FILE"
    doc = read_data_file(path, "band", BAND_SCHEMA, "bands", fix)
    ratios: dict[str, dict[str, Ratio]] = {}
    for metric in BAND_METRICS:
        groups = doc["bands"].get(metric)
        if not isinstance(groups, dict) or "all" not in groups:
            raise BandFileError(f"band file {path}: bands.{metric} must be a mapping with an 'all' group; {fix}")
        ratios[metric] = {}
        for key, q in groups.items():
            ok = isinstance(q, dict) and all(isinstance(q.get(n), (int, float)) and not isinstance(q.get(n), bool)
                                             for n in _REQUIRED)
            values = [q.get(n) for n in ("p10", "p50", "p90", "p95", "p99", "p05")] if ok else []
            if not ok or not all(v is None or (math.isfinite(v) and v > 0) for v in values) or q["rows"] < 1:
                raise BandFileError(f"band file {path}: bands.{metric}[{key!r}] needs positive finite p10, p50, "
                                    f"p90 (optional p05, p95, p99) and rows >= 1; {fix}")
            ratios[metric][key] = Ratio(key, int(q["rows"]), *(None if v is None else float(v) for v in values))
    return BandTable(path, str(doc.get("aic_version", "")), int(doc.get("min_rows", 10)), ratios)


__all__ = ["Band", "BandTable", "Ratio", "BAND_FILE", "BAND_METRICS", "band_file", "load_bands", "group_keys",
           "bands_to_dict", "bands_from_dict"]

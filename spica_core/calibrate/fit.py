"""From measured rows to a calibration: per group quantiles of measured ÷ predicted, and a shrunk correction
where a group has too few rows for its own (fewer than ``OWN_ROWS``, 10).

**How a few rows are shrunk.** On a log scale, a group's true bias b (its median measured ÷ predicted) is
modelled as drawn around the shipped band's median ratio m for that group, with variance τ² (how far groups'
medians land from one another); one measured row scatters around b with variance σ² (how far single rows land
from their group's median). With n rows of mean log ratio x̄, the posterior mean of b is
``log m + w · (x̄ − log m)`` with ``w = n / (n + k)``, ``k = σ² / τ²``: the correction is that posterior median.

**Why that amount.** Both variances come from the shipped band file, the same measured rows that make the
shipped bands (``bench/bench_accuracy.py``): σ² is the mean over its per-model groups of the variance implied
by their p10–p90 width, τ² the variance of those groups' log medians. On the shipped file TTFT has k ≈ 2
(one row moves the correction a third of the way to what it measured) and ITL k ≈ 0.6 (one row, about 60 %):
TTFT rows of one group scatter more than groups differ; ITL rows scatter less. On held-out rows
(``bench/bench_calibration.py``) one row taken as it is makes TTFT predictions worse; shrunk, far less so.
"""
from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from spica_core.evaluate import OWN_ROWS, Calibration, GroupCalibration, MeasuredRow, MetricCalibration
from spica_core.evaluate import BAND_METRICS, BandTable, Ratio

_Z90 = 1.2815515655446004            # the standard normal's 90 % quantile: p10–p90 spans 2 × _Z90 σ
_QUANTILES = (("p05", 0.05), ("p10", 0.10), ("p50", 0.50), ("p90", 0.90), ("p95", 0.95), ("p99", 0.99))


@dataclass(frozen=True)
class Shrinkage:
    """The two variances (log scale) that set how far one or two rows move a group's correction."""

    sigma2: float      # one row around its group's median
    tau2: float        # a group's median around the shipped one

    @property
    def k(self) -> float:
        return self.sigma2 / self.tau2 if self.tau2 > 0 else math.inf

    def weight(self, rows: int) -> float:
        return rows / (rows + self.k) if math.isfinite(self.k) else 0.0

    def to_dict(self) -> dict[str, float]:
        return {"sigma2": self.sigma2, "tau2": self.tau2, "k": self.k}


def shrinkage(bands: BandTable, metric: str) -> Shrinkage:
    """σ² and τ² from the shipped band file's per-model groups that have enough rows of their own."""
    groups = [r for key, r in bands.ratios[metric].items() if key.startswith("model=") and r.rows >= bands.min_rows]
    if len(groups) < 2:
        raise ValueError(f"band file {bands.path}: fewer than two per-model '{metric}' groups to shrink with")
    sigma2 = statistics.fmean(((math.log(r.p90) - math.log(r.p10)) / (2 * _Z90)) ** 2 for r in groups)
    tau2 = statistics.variance([math.log(r.p50) for r in groups])
    return Shrinkage(sigma2, tau2)


def quantile(values: Sequence[float], q: float) -> float:
    """Linear interpolation between order statistics (numpy's default); NaN of nothing. The shipped bands'
    quantiles (bench/bench_accuracy.py) are this function's too."""
    xs = sorted(values)
    if not xs:
        return math.nan
    pos = q * (len(xs) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def _recentred(shipped: Ratio, correction: float, rows: int) -> Ratio:
    """The shipped band's spread, centred on ``correction``."""
    scale = correction / shipped.p50
    return Ratio("calibration", rows, **{n: getattr(shipped, n) * scale for n, _ in _QUANTILES
                                         if getattr(shipped, n) is not None})


def _own(rows: Sequence[MeasuredRow], metric: str, shipped: Ratio) -> MetricCalibration:
    """The group's own median; its band is its own quantiles, never narrower than the shipped spread around
    that median (rows measured at a few traffic points spread less than the group does at others)."""
    ratios = [r.ratio(metric) for r in rows]
    own = {n: quantile(ratios, q) for n, q in _QUANTILES}
    floor = _recentred(shipped, own["p50"], len(rows))
    wider = {n: (min if q < 0.5 else max)(v, getattr(floor, n)) if getattr(floor, n) is not None else v
             for (n, q), v in zip(_QUANTILES, own.values())}
    ratio = Ratio("calibration", len(rows), **wider)
    return MetricCalibration(len(rows), own["p50"], ratio, "own", 1.0)


def _shrunk(rows: Sequence[MeasuredRow], metric: str, shipped: Ratio, shrink: Shrinkage) -> MetricCalibration:
    mean_log = statistics.fmean(math.log(r.ratio(metric)) for r in rows)
    w = shrink.weight(len(rows))
    correction = math.exp(math.log(shipped.p50) + w * (mean_log - math.log(shipped.p50)))
    return MetricCalibration(len(rows), correction, _recentred(shipped, correction, len(rows)), "shrunk", w)


@dataclass(frozen=True)
class GroupedRow:
    """A measured row and the group it calibrates."""

    model: str
    system: str
    backend: str
    row: MeasuredRow


def fit_calibration(rows: Iterable[GroupedRow], bands: BandTable, path: str = "") -> Calibration:
    """One calibration from every measured row, grouped by (model, SKU, backend)."""
    by_group: dict[tuple[str, str, str], list[MeasuredRow]] = defaultdict(list)
    for g in rows:
        by_group[(g.model, g.system, g.backend)].append(g.row)
    shrink = {m: shrinkage(bands, m) for m in BAND_METRICS}
    groups: dict[str, GroupCalibration] = {}
    for (model, system, backend), measured in sorted(by_group.items()):
        metrics: dict[str, MetricCalibration] = {}
        for metric in BAND_METRICS:
            usable = [r for r in measured if metric in r.measured and metric in r.predicted]
            if not usable:
                continue
            shipped = bands.ratio(metric, model, system, backend)
            metrics[metric] = (_own(usable, metric, shipped) if len(usable) >= OWN_ROWS
                               else _shrunk(usable, metric, shipped, shrink[metric]))
        group = GroupCalibration(model, system, backend, metrics, tuple(measured))
        groups[group.key] = group
    return Calibration(groups, {m: s.to_dict() for m, s in shrink.items()}, path)


__all__ = ["GroupedRow", "Shrinkage", "fit_calibration", "shrinkage", "quantile"]

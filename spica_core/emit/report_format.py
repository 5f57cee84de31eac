"""How the report writes values: differences, percentages, SLA attainment, ranks, error bands, Markdown tables.

Also :class:`_Goal`, which turns a stored score into the value a person reads. The report's sections and
plots share these; ``spica evaluate``, ``spica sweep`` and the Prefect UI print with the public ones.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from spica_core.emit.numbers import fmt
from spica_core.emit.records import CandidateRecord
from spica_core.evaluate.bands import Band
from spica_core.evaluate.metrics import objective_metric
from spica_core.evaluate.scoring import minimised, raw_value
from spica_core.search.trials import Trial

if TYPE_CHECKING:
    from spica_core.emit.report import ReportInputs


# ---------------------------------------------------------------- number formatting


def _signed_fmt(delta: float, unit: str) -> str:
    sign = "+" if delta > 0 else "-" if delta < 0 else "±"
    return sign + fmt(abs(delta), unit)


def _difference(a: float, b: float, unit: str) -> str:
    """a − b with its unit, and relative to b."""
    d = a - b
    text = _signed_fmt(d, unit)
    if b != 0 and math.isfinite(d):
        text += f" ({d / abs(b) * 100:+.1f}%)"
    return text


def _target_label(objective: str) -> tuple[str, str]:
    metric = objective_metric(objective)
    return metric.label, metric.unit


def _direction(objective: str) -> str:
    return "lower is better" if minimised(objective) else "higher is better"


def _cell(text: Any) -> str:
    """Safe inside a Markdown table cell."""
    return str(text).replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    lines = ["| " + " | ".join(_cell(h) for h in header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return lines


# ---------------------------------------------------------------- what a score means


class _Goal:
    """Turns stored scores into the raw value a person reads (scores are higher-is-better)."""

    def __init__(self, inputs: ReportInputs):
        self.pareto = inputs.pareto
        self.objectives = tuple(inputs.objectives) or tuple(o.value for o in inputs.config.goal.objectives)
        self.first = self.objectives[0]

    def raw(self, score: float) -> float:
        """The first objective's value: a scalar score is signed; a Pareto score is already raw."""
        return score if self.pareto else raw_value(self.first, score)

    def better_key(self, score: float) -> float:
        """Higher is better, for both kinds of score."""
        return -score if self.pareto and minimised(self.first) else score

    def axis_label(self) -> str:
        label, unit = _target_label(self.first)
        return f"{label} ({unit})" if unit else label


def _feasible(trials: Sequence[Trial]) -> list[Trial]:
    """Feasible trials with a replay of their own (cache hits repeat one) and a score."""
    return [t for t in trials if t.is_evaluated_success and t.score is not None]


def _describe(record: CandidateRecord) -> str:
    c = record.candidate
    return f"{c.mode} {c.backend} {c.parallel.label()} on {c.system}"


def _whole(value: float) -> float | int:
    """An integral float as an int, so it prints without decimals."""
    return int(value) if float(value).is_integer() else value


def _seconds(value: float) -> str:
    return fmt(_whole(value), "s")


def percent(share: float) -> str:
    """``90 %``, ``80.5 %``: a share of requests."""
    return f"{share * 100:.3g} %"


def attainment_text(share: float | None, meets: bool | None) -> str:
    """``0.93 (meets)``, ``0.81 (misses)``: the SLA attainment and the requirement's verdict; ``—`` without an SLA."""
    if share is None:
        return "—"
    return f"{share:.2f} ({'meets' if meets else 'misses'})"


def rank_label(record: CandidateRecord) -> str:
    """``2`` or, in a near-tie, ``=2``: the order within a tie is not a result."""
    return f"={record.rank}" if record.tied_with else str(record.rank)


def _p10_p90(band: Band) -> str:
    return f"{fmt(band.p10)}–{fmt(band.p90)}"


def band_range(band: Band | None) -> str:
    """``34.0–46.0 ms (60 rows)``: where the true value has landed on measured GPUs (p10–p90)."""
    return "—" if band is None else f"{_p10_p90(band)} ms ({fmt(band.rows)} rows)"


def _with_band(value: float | None, band: Band | None) -> str:
    """``38 ms (34–46 on measured GPUs, 60 rows)``."""
    if value is None or band is None:
        return fmt(value, "ms")
    return f"{fmt(value, 'ms')} ({_p10_p90(band)} on measured GPUs, {fmt(band.rows)} rows)"


__all__ = ["attainment_text", "band_range", "percent", "rank_label"]

"""The report's "Calibration" section: which measurements corrected the numbers, and each candidate's calibrated
values next to the replay's own."""
from __future__ import annotations

from typing import TYPE_CHECKING

from spica_core.emit.numbers import fmt
from spica_core.emit.report_format import _describe, _table, band_range, percent
from spica_core.evaluate.scoring import attainment

if TYPE_CHECKING:
    from spica_core.emit.report import ReportInputs

_SHOWN = (("mean_ttft_ms", "TTFT ms"), ("mean_itl_ms", "ITL ms"), ("output_throughput_tok_s", "tok/s"))


def _calibration_section(inputs: ReportInputs) -> list[str]:
    applied = [r for r in inputs.records if r.calibration is not None]
    if not applied:
        return []
    file = applied[0].calibration.file  # type: ignore[union-attr]
    lines = ["## Calibration", "",
             f"Numbers are corrected by `{file}`, made by `spica calibrate` from measurements on your own GPUs: "
             "each measured (model, SKU, backend) group's latencies are multiplied by its correction, the SLA is "
             "counted again request by request, and the band is the group's own measured ÷ predicted spread. "
             "A group it did not measure keeps the shipped numbers.", ""]
    rows = []
    for r in applied:
        cal = r.calibration
        assert cal is not None
        raw = r.uncalibrated
        cells = [f"{fmt(r.metrics.get(k))} ({fmt(raw.get(k))})" if raw else fmt(r.metrics.get(k)) for k, _ in _SHOWN]
        share = attainment(r.metrics)
        before = attainment(raw) if raw else None
        rows.append([str(r.rank), _describe(r), cal.group or "not measured", str(cal.rows), *cells,
                     "—" if share is None else (f"{percent(share)} ({percent(before)})" if before is not None
                                                else percent(share)),
                     band_range(r.bands.get("ttft_ms"))])
    lines += _table(["#", "candidate", "group", "rows", *(f"{label} calibrated (replayed)" for _, label in _SHOWN),
                     "SLA attainment calibrated (replayed)", "TTFT band"], rows)
    return lines + [""]


__all__: list[str] = []

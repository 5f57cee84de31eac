"""One candidate as a table row, built once for every table that shows candidates: the CLI's, the report's and
the Prefect UI's. Each table picks its columns from :class:`CandidateRow` and formats them its own way."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from spica_core.deployment import Candidate
from spica_core.emit.report_format import attainment_text
from spica_core.evaluate.bands import Band
from spica_core.evaluate.metrics import derived_metrics, metric_or_fallback


@dataclass(frozen=True)
class CandidateRow:
    """What tells candidates apart and what each achieved, in the units the metrics registry gives."""

    mode: str
    backend: str
    gpu: str                         # the GPU type, or "<prefill>+<decode>" types when they differ
    parallel: str                    # replicas × shape per role, e.g. "1×TP4 + 2×TP2"
    gpus: int
    knobs: str                       # precision, batching, router, planner
    attainment: str | None           # "0.93 (meets)"; None without an SLA
    throughput_tok_s: float | None
    ttft_ms: float | None
    itl_ms: float | None             # ITL, or TPOT when the replay reported no ITL
    tpot_ms: float | None            # TPOT, or ITL when the replay reported no TPOT
    ttft_band: Band | None
    itl_band: Band | None
    priced: bool = False             # the goal has GPU prices: cost_per_mtok is a column (None: nothing met the SLA)
    cost_per_mtok: float | None = None


def candidate_row(candidate: Candidate, used_gpus: int, metrics: Mapping[str, float],
                  bands: Mapping[str, Band] | None = None, attainment: float | None = None,
                  meets_sla: bool | None = None) -> CandidateRow:
    """The row of one candidate, from its metrics, bands and SLA verdict (``attainment`` None: no SLA)."""
    m = derived_metrics(metrics)
    bands = bands or {}
    return CandidateRow(
        mode=candidate.mode, backend=candidate.backend, gpu=candidate.system, parallel=candidate.parallel.label(),
        gpus=used_gpus,
        knobs=candidate.knobs_label(),
        attainment=None if attainment is None else attainment_text(attainment, meets_sla),
        throughput_tok_s=m.get("output_throughput_tok_s"), ttft_ms=m.get("mean_ttft_ms"),
        itl_ms=metric_or_fallback(m, "mean_itl_ms"), tpot_ms=metric_or_fallback(m, "mean_tpot_ms"),
        ttft_band=bands.get("ttft_ms"), itl_band=bands.get("itl_ms"), priced="cost_per_mtok" in metrics,
        cost_per_mtok=metrics.get("cost_per_mtok"))


__all__ = ["CandidateRow", "candidate_row"]

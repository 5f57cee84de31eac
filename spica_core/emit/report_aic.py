"""The report's "AI Configurator's estimate" section: AIC's analytic numbers next to the replay's, static agg only."""
from __future__ import annotations

from typing import TYPE_CHECKING

from spica_core.deployment import Candidate
from spica_core.emit.numbers import fmt
from spica_core.emit.records import CandidateRecord
from spica_core.emit.report_format import _describe, _difference, _table
from spica_core.evaluate.metrics import derived_metrics, metric_or_fallback

if TYPE_CHECKING:
    from spica_core.emit.report import ReportInputs


def _is_static_agg(candidate: Candidate) -> bool:
    return candidate.mode == "agg" and not candidate.planner.scales


def _aic_section(inputs: ReportInputs) -> list[str]:
    if not any(_is_static_agg(r.candidate) or r.rank in inputs.aic for r in inputs.records):
        return []  # nothing AIC's static agg estimate applies to
    shown = inputs.records
    lines = ["## AI Configurator's estimate (static agg)", "",
             "AI Configurator's own analytic estimate of the same config, next to the replay's number.", ""]
    for r in shown:
        est = inputs.aic.get(r.rank)
        title = f"- rank {r.rank} ({_describe(r)}):"
        if est is None or isinstance(est, str):
            why = est if isinstance(est, str) and est else _no_estimate_reason(r, r.rank in inputs.aic)
            lines += [f"{title} no AIC estimate" + (f" ({why})" if why else ""), ""]
            continue
        source = getattr(est, "source", "")
        asked = getattr(est, "requested_concurrency", 0)
        point = f"concurrency {fmt(int(est.concurrency))}" + (
            f" (asked {fmt(int(asked))})" if asked and asked != est.concurrency else "")
        lines += [f"{title} at ISL {fmt(int(est.isl))}, OSL {fmt(int(est.osl))}, {point}"
                  + (f"; source: {source}" if source else ""), ""]
        if getattr(est, "kv_cache_warning", None):
            lines += [f"  AIC warns: {est.kv_cache_warning}", ""]
        m = derived_metrics(r.metrics)
        tpot = metric_or_fallback(m, "mean_tpot_ms")
        pairs = (("TTFT mean", est.ttft_ms, m.get("mean_ttft_ms"), "ms"),
                 ("TPOT / ITL mean", est.tpot_ms, tpot, "ms"),
                 ("throughput", est.output_throughput_tok_s, m.get("output_throughput_tok_s"), "tok/s"),
                 ("throughput per GPU", est.output_throughput_tok_s_per_gpu,
                  m.get("output_throughput_tok_s_per_gpu"), "tok/s/GPU"))
        rows = [[label, fmt(a, unit), fmt(b, unit), _difference(b, a, unit) if a is not None and b is not None
                 else "—"] for label, a, b, unit in pairs]
        lines += _table(["metric", "AI Configurator", "replay", "replay − AIC"], rows)
        lines.append("")
    return lines


def _no_estimate_reason(record: CandidateRecord, asked: bool) -> str:
    c = record.candidate
    if c.mode != "agg":
        return "disagg: AIC's estimate is for a static agg deployment"
    if c.planner.scales:
        return "the planner scales replicas: not a static deployment"
    if asked:
        return ("AIC has no analytic answer for it: no perf database, an unknown model or SKU, a shape or "
                "quant mode AIC cannot model, or it does not fit in GPU memory")
    return "not estimated"

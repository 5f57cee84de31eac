"""Goals and scores: report → metric → signed score, the budget gate, the headline.

Pure functions of a replay report (the flat summary dict) and the goal. Higher score is always
better (minimised targets are negated), so one sort serves every scalar target. The SLA enters
goodput, and ``goal.sla_attainment`` makes it a requirement: a candidate whose attainment (requests
that met the SLA ÷ all requests) is below it is still feasible, but ranks after every one that meets
it (``spica_core.search.ranking``). Only the GPU budget is a gate.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from spica_core.config.goal import GOODPUT_TARGETS, MINIMIZED_TARGETS, OptimizationGoal, OptimizationTarget
from spica_core.errors import GoodputContractError

# Candidate metrics, kept when present
METRIC_KEYS = ("output_throughput_tok_s", "mean_ttft_ms", "mean_tpot_ms", "mean_itl_ms", "mean_e2e_latency_ms",
               "mean_output_token_throughput_per_user", "goodput_output_throughput_tok_s", "gpu_hours",
               "prefill_worker_seconds", "prefill_gpus_per_worker", "decode_worker_seconds", "decode_gpus_per_worker",
               "prefill_power_w_per_gpu", "decode_power_w_per_gpu", "prefill_energy_coverage",
               "decode_energy_coverage", "avg_power_w_per_gpu", "energy_coverage", "duration_ms",
               "planner_total_ticks", "num_requests", "goodput_completed_requests", "rejected_requests")
NULLABLE_METRIC_KEYS = ("cost_per_mtok", "energy_j_per_token")   # null when nothing was served to divide by
TEXT_METRIC_KEYS = ("energy_source",)   # a word, not a number: where the energy figure came from



def _num(report: Mapping[str, Any], key: str, default: float = 0.0) -> float:
    value = report.get(key)
    if value is None:
        return default
    try:
        out = float(value)
    except (TypeError, ValueError):
        return default
    return default if math.isnan(out) else out


def avg_gpu(report: Mapping[str, Any]) -> float:
    """Time-averaged provisioned GPUs: gpu_hours / duration in hours; 0 when either is ≤ 0."""
    gpu_hours = _num(report, "gpu_hours")
    duration_ms = _num(report, "duration_ms")
    if gpu_hours <= 0 or duration_ms <= 0:
        return 0.0
    return gpu_hours / (duration_ms / 3_600_000.0)


def metric_value(target: OptimizationTarget | str, report: Mapping[str, Any]) -> float:
    """The raw (unsigned) value of one target from a report."""
    t = OptimizationTarget(target)
    if t is OptimizationTarget.throughput:
        return _num(report, "output_throughput_tok_s")
    if t is OptimizationTarget.throughput_per_gpu:
        g = avg_gpu(report)
        return _num(report, "output_throughput_tok_s") / g if g > 0 else 0.0
    if t is OptimizationTarget.throughput_per_user:
        return _num(report, "mean_output_token_throughput_per_user")
    if t is OptimizationTarget.e2e_latency:
        return _num(report, "mean_e2e_latency_ms", math.inf)
    if t is OptimizationTarget.goodput:
        return _num(report, "goodput_output_throughput_tok_s")
    if t is OptimizationTarget.goodput_per_gpu:
        g = avg_gpu(report)
        return _num(report, "goodput_output_throughput_tok_s") / g if g > 0 else 0.0
    if t is OptimizationTarget.min_gpus:
        g = avg_gpu(report)   # time-averaged under a planner
        return g if g > 0 else math.inf
    if t is OptimizationTarget.cost_per_mtok:
        return _num(report, "cost_per_mtok", math.inf)   # null: no token met the SLA
    if t is OptimizationTarget.energy_per_token:
        return _num(report, "energy_j_per_token", math.inf)
    raise ValueError("pareto is not a single metric; use objective_vector")


def minimised(objective: OptimizationTarget | str) -> bool:
    """Lower is better: a minimised goal target (latency, cost). Any other name (a Pareto metric) is not."""
    try:
        return OptimizationTarget(objective) in MINIMIZED_TARGETS
    except ValueError:
        return False


def signed(target: OptimizationTarget | str, value: float) -> float:
    """Higher-is-better form of a raw value (minimised targets are negated): the score every stage stores."""
    return -value if OptimizationTarget(target) in MINIMIZED_TARGETS else value


def raw_value(target: OptimizationTarget | str, score: float) -> float:
    """The value a person reads from a stored score (signing is its own inverse)."""
    return signed(target, score)


def check_goodput_contract(goal: OptimizationGoal, report: Mapping[str, Any]) -> None:
    """Fail-closed: a goodput objective needs goodput_output_throughput_tok_s in the report."""
    if GOODPUT_TARGETS & set(goal.objectives) and report.get("goodput_output_throughput_tok_s") is None:
        raise GoodputContractError("runner contract violation: the goal needs goodput but the replay report "
                                       "has no goodput_output_throughput_tok_s (was the SLA passed?)")


def objective_vector(goal: OptimizationGoal, report: Mapping[str, Any]) -> dict[str, float]:
    """Raw value per effective objective, keyed by target value (Pareto observations are unsigned)."""
    return {t.value: metric_value(t, report) for t in goal.objectives}


def score_report(goal: OptimizationGoal, report: Mapping[str, Any]) -> float:
    """Scalar score: signed target value; for Pareto the raw first objective (a headline, not a rank key)."""
    check_goodput_contract(goal, report)
    first = goal.objectives[0]
    value = metric_value(first, report)
    return value if goal.is_pareto else signed(first, value)


def is_feasible(used_gpus: int, gpu_budget: int) -> bool:
    """The only gate: the GPU budget. A candidate that misses the SLA is feasible (it ranks lower)."""
    return int(used_gpus) <= int(gpu_budget)


def attainment(metrics: Mapping[str, Any]) -> float | None:
    """Requests that met the SLA ÷ all requests, rejected ones included, from a report or a candidate's
    metrics; None when they do not hold the counts (no SLA was replayed)."""
    total, good = metrics.get("num_requests"), metrics.get("goodput_completed_requests")
    if total is None or good is None:
        return None
    return float(good) / float(total) if float(total) > 0 else 0.0


def reaches(share: float | None, required: float) -> bool:
    """Whether an attainment reaches ``required`` (always, when nothing is required; never, when unknown)."""
    return required <= 0 or (share is not None and share >= required)


def meets_requirement(required: float, metrics: Mapping[str, Any]) -> bool:
    """Whether the metrics' attainment reaches ``required`` (always, when nothing is required)."""
    return reaches(attainment(metrics), required)


def meets_sla(goal: OptimizationGoal, metrics: Mapping[str, Any]) -> bool | None:
    """Whether the attainment reaches ``goal.sla_attainment``; None without an SLA (nothing to meet)."""
    if goal.sla is None:
        return None
    share = attainment(metrics)
    return share is not None and reaches(share, goal.required_attainment)


def search_value(goal: OptimizationGoal, score: float, metrics: Mapping[str, Any], gpu_budget: int) -> float:
    """What a scalar study observes: the score, moved below every candidate that meets the SLA requirement
    when this one misses it, and higher the closer its attainment is, so the search heads where the ranking
    does. Exact for non-negative maximised targets and for min_gpus (whose GPUs are at most the budget);
    for e2e latency a miss looks up to twice as slow, for cost up to twice as dear."""
    if meets_sla(goal, metrics) is not False:
        return score
    short = (goal.required_attainment - (attainment(metrics) or 0.0)) / goal.required_attainment   # (0, 1]
    target = goal.objectives[0]
    if target is OptimizationTarget.min_gpus:
        return -float(gpu_budget) - 1.0 - short
    if target in (OptimizationTarget.e2e_latency, OptimizationTarget.cost_per_mtok,
                  OptimizationTarget.energy_per_token):
        return score * (1.0 + short)
    return -short


def sla_kwargs(goal: OptimizationGoal, factors: Mapping[str, float] | None = None) -> dict[str, float]:
    """The replay's SLA kwargs whenever the goal has an SLA (any target); {} otherwise.

    ``factors`` (``goal.sla_confidence`` above 0.5) are the band quantiles a predicted latency is
    multiplied by before it is held against the SLA, so the replay gets the SLA divided by them; an
    end-to-end SLA takes the larger of the TTFT and ITL factors. Validation already refused e2e_ms
    together with ttft_ms / itl_ms, which the runtime rejects.
    """
    if goal.sla is None:
        return {}
    f = dict(factors or {})
    f["e2e_ms"] = max(f.values(), default=1.0)
    return {f"sla_{name}": float(value) / f.get(name, 1.0)
            for name, value in goal.sla.model_dump(exclude_none=True).items()}


def candidate_metrics(report: Mapping[str, Any]) -> dict[str, Any]:
    """The candidate-metric subset of a report (present keys only; a nullable one as null, a text one as text)."""
    out: dict[str, Any] = {k: float(report[k]) for k in METRIC_KEYS if report.get(k) is not None}
    out.update({k: None if report[k] is None else float(report[k]) for k in NULLABLE_METRIC_KEYS if k in report})
    out.update({k: str(report[k]) for k in TEXT_METRIC_KEYS if report.get(k) is not None})
    return out


def headline(report: Mapping[str, Any]) -> dict[str, Any]:
    """The numbers a person reads first: throughput, per GPU/user, latencies, goodput, hit rate, cost."""
    out: dict[str, Any] = {k: report[k] for k in HEADLINE_KEYS if report.get(k) is not None}
    g = avg_gpu(report)
    out["avg_gpus"] = g
    if g > 0 and report.get("output_throughput_tok_s") is not None:
        out["output_throughput_tok_s_per_gpu"] = float(report["output_throughput_tok_s"]) / g
    return out


HEADLINE_KEYS = ("output_throughput_tok_s", "request_throughput_rps", "mean_output_token_throughput_per_user",
                 "mean_ttft_ms", "p99_ttft_ms", "mean_itl_ms", "p99_itl_ms", "mean_e2e_latency_ms",
                 "p99_e2e_latency_ms", "goodput_output_throughput_tok_s", "goodput_request_throughput_rps",
                 "prefix_cache_reused_ratio", "gpu_hours", "duration_ms", "completed_requests", "num_requests",
                 "rejected_requests", "cost_per_mtok", "energy_j_per_token", "avg_power_w_per_gpu", "energy_source",
                 "planner_total_ticks")


__all__ = ["avg_gpu", "metric_value", "signed", "objective_vector", "score_report", "is_feasible", "sla_kwargs",
           "check_goodput_contract", "candidate_metrics", "headline", "METRIC_KEYS", "minimised", "raw_value",
           "attainment", "meets_requirement", "meets_sla", "reaches", "search_value"]

"""Goals and scores (reference §4): report → metric → signed score, the budget gate, ranking, Pareto.

Pure functions of a replay report (the flat summary dict) and the goal. Higher score is always
better (e2e latency is negated), so one sort serves every scalar target. The SLA lives inside the
goodput metric only; it is never a separate gate.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeVar

from spica_core.config.model import GOODPUT_TARGETS, MINIMIZED_TARGETS, OptimizationGoal, OptimizationTarget
from spica_core.errors import GoodputContractError

T = TypeVar("T")

# §4.3 candidate metrics, kept when present
METRIC_KEYS = ("output_throughput_tok_s", "mean_ttft_ms", "mean_tpot_ms", "mean_e2e_latency_ms",
               "mean_output_token_throughput_per_user", "goodput_output_throughput_tok_s", "gpu_hours",
               "duration_ms", "planner_total_ticks")



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
    """§4.2 time-averaged provisioned GPUs: gpu_hours / duration in hours; 0 when either is ≤ 0."""
    gpu_hours = _num(report, "gpu_hours")
    duration_ms = _num(report, "duration_ms")
    if gpu_hours <= 0 or duration_ms <= 0:
        return 0.0
    return gpu_hours / (duration_ms / 3_600_000.0)


def metric_value(target: OptimizationTarget | str, report: Mapping[str, Any]) -> float:
    """§4.1: the raw (unsigned) value of one target from a report."""
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
    raise ValueError("pareto is not a single metric; use objective_vector")


def signed(target: OptimizationTarget | str, value: float) -> float:
    """Higher-is-better form of a raw value (minimised targets are negated)."""
    return -value if OptimizationTarget(target) in MINIMIZED_TARGETS else value


def check_goodput_contract(goal: OptimizationGoal, report: Mapping[str, Any]) -> None:
    """§4.3 fail-closed: a goodput objective needs goodput_output_throughput_tok_s in the report."""
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
    """§4.3 the only gate: the GPU budget. The SLA is inside goodput, never a gate."""
    return int(used_gpus) <= int(gpu_budget)


def sla_kwargs(goal: OptimizationGoal) -> dict[str, float]:
    """The replay's SLA kwargs whenever the goal has an SLA (any target); {} otherwise.

    The runtime refuses e2e together with ttft/itl, so when all three are set the pair wins and
    e2e is dropped (the config allows either form; the pair is the planner's too).
    """
    sla = goal.sla
    if sla is None:
        return {}
    if sla.ttft_ms is not None or sla.itl_ms is not None:
        out = {}
        if sla.ttft_ms is not None:
            out["sla_ttft_ms"] = float(sla.ttft_ms)
        if sla.itl_ms is not None:
            out["sla_itl_ms"] = float(sla.itl_ms)
        return out
    return {"sla_e2e_ms": float(sla.e2e_ms)} if sla.e2e_ms is not None else {}


def candidate_metrics(report: Mapping[str, Any]) -> dict[str, float]:
    """The §4.3 metric subset of a report (present keys only)."""
    return {k: float(report[k]) for k in METRIC_KEYS if report.get(k) is not None}


# ---------------------------------------------------------------- ranking and the Pareto front


def _get(item: Any, name: str, default: Any = None) -> Any:
    if isinstance(item, Mapping):
        return item.get(name, default)
    return getattr(item, name, default)


def rank(candidates: Iterable[T]) -> list[T]:
    """Best score first, ties toward fewer GPUs; stable, so remaining ties keep evaluation order."""
    return sorted(candidates, key=lambda c: (-float(_get(c, "score")), int(_get(c, "used_gpus"))))


def dominates(a: Mapping[str, float], b: Mapping[str, float], objectives: Sequence[OptimizationTarget | str]) -> bool:
    """a is at least as good on every objective (in its direction) and strictly better on one."""
    strictly = False
    for obj in objectives:
        t = OptimizationTarget(obj)
        va, vb = signed(t, float(a[t.value])), signed(t, float(b[t.value]))
        if va < vb:
            return False
        if va > vb:
            strictly = True
    return strictly


def pareto_front(candidates: Iterable[T], objectives: Sequence[OptimizationTarget | str]) -> list[T]:
    """Non-dominated candidates (those with an objectives vector), sorted by the last objective ascending."""
    objs = [OptimizationTarget(o) for o in objectives]
    pool = [c for c in candidates if _get(c, "objectives")]
    pool = [c for c in pool if all(o.value in _get(c, "objectives") for o in objs)]
    front = [c for c in pool
             if not any(other is not c and dominates(_get(other, "objectives"), _get(c, "objectives"), objs)
                        for other in pool)]
    last = objs[-1].value
    return sorted(front, key=lambda c: float((_get(c, "objectives") or {}).get(last, 0.0)))


__all__ = ["avg_gpu", "metric_value", "signed", "objective_vector", "score_report", "is_feasible", "sla_kwargs",
           "check_goodput_contract", "candidate_metrics", "rank", "pareto_front", "dominates",
           "METRIC_KEYS"]

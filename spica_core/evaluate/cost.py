"""Dollars per million output tokens served within the SLA, from the replay's GPU time and the user's prices.

``cost_per_mtok = Σ_role gpu_hours_role × price[SKU of the role] ÷ (tokens × 1e-6)``, where a role's GPU-hours are
its worker-seconds times its GPUs per worker (the replay's ``prefill_worker_seconds``, ``decode_worker_seconds``;
an aggregated worker counts as decode; their sum is the replay's ``gpu_hours``, so under a planner they follow the
replica count over time), and tokens are the output tokens of requests that met the SLA
(``goodput_output_throughput_tok_s × duration``), or every output token without an SLA. None when no token met
it: a deployment that serves nothing within the SLA has no price per token. Spica ships no prices
(``goal.gpu_hour_usd``).
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from spica_core.config.goal import OptimizationGoal
from spica_core.deployment import Candidate

ROLES = ("prefill", "decode")


def role_skus(candidate: Candidate) -> dict[str, str]:
    """The GPU type each role of a candidate runs on (an aggregated worker is the decode role)."""
    if candidate.mode == "agg":
        return {role: candidate.sku("agg") for role in ROLES}
    return {role: candidate.sku(role) for role in ROLES}


def role_gpu_hours(report: Mapping[str, Any]) -> dict[str, float]:
    """GPU-hours per role: worker-seconds × GPUs per worker."""
    return {role: float(report.get(f"{role}_worker_seconds") or 0.0) * float(report.get(f"{role}_gpus_per_worker") or 0)
            / 3600.0 for role in ROLES}


def cost_per_mtok(report: Mapping[str, Any], prices: Mapping[str, float], skus: Mapping[str, str],
                  sla: bool) -> float | None:
    """USD per million output tokens served within the SLA (every output token without one); None when none was."""
    usd = sum(hours * float(prices[skus[role]]) for role, hours in role_gpu_hours(report).items() if hours)
    rate = report.get("goodput_output_throughput_tok_s" if sla else "output_throughput_tok_s")
    seconds = float(report.get("duration_ms") or 0.0) / 1000.0
    tokens = float(rate or 0.0) * seconds
    if tokens <= 0 or not math.isfinite(tokens):
        return None
    return usd / (tokens / 1e6)


def with_cost(report: Mapping[str, Any], goal: OptimizationGoal, candidate: Candidate) -> dict[str, Any]:
    """The report with ``cost_per_mtok`` (None when no token met the SLA) when the goal has prices."""
    out = dict(report)
    if goal.gpu_hour_usd:
        out["cost_per_mtok"] = cost_per_mtok(report, goal.gpu_hour_usd, role_skus(candidate), goal.sla is not None)
    return out


__all__ = ["ROLES", "cost_per_mtok", "role_gpu_hours", "role_skus", "with_cost"]

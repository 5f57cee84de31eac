"""Joules per output token: the GPU time each role spent, times the power its steps draw.

Each role's power per GPU comes from one representative step (``spica_core.space.step_power``): a prefill pass
at the mean prompt length, a decode step at the mean number of requests in flight per attention-DP rank and the
mean context, read from the power grid written with the shape's profile (``spica_core.space.power_grid``, so no
evaluation loads aiconfigurator-core's perf database for it). Where the perf database recorded the energy of an
op, that energy counts; every other op draws the SKU's board power (the ``power`` of AIC's system file) for its
time, an upper bound. In
aiconfigurator-core 0.12.0 the per-op energy is zero for the ops checked (Qwen3-32B vLLM decode and prefill on
H200 and B200), so figures are board-power bounds unless the database holds more.

``energy = Σ_role gpu_seconds_role × power_role``; ``energy_j_per_token`` is that over every output token,
``avg_power_w_per_gpu`` over every GPU-second, ``energy_coverage`` the GPU-time-weighted share of modelled step
time whose energy was measured, and ``energy_source`` ``measured`` (all of it), ``board_power`` (none) or
``mixed``. The role powers are kept in the metrics, so a calibration re-scores energy without aiconfigurator-core.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from spica_core.deployment import Candidate
from spica_core.evaluate.cost import role_gpu_hours
from spica_core.evaluate.engine_args import RoleArgs


def _mean(report: Mapping[str, Any], total: str) -> float:
    n = float(report.get("completed_requests") or report.get("num_requests") or 0)
    return float(report.get(total) or 0.0) / n if n > 0 else 0.0


def role_powers(candidate: Candidate, roles: Mapping[str, RoleArgs], report: Mapping[str, Any]) -> dict[str, float]:
    """``<role>_power_w_per_gpu`` and ``<role>_energy_coverage`` of each role the candidate runs (``roles``: its
    engine arguments, whose profiles carry the power grid), from one representative step of the role's shape."""
    from spica_core.space import step_power

    isl, osl = round(_mean(report, "total_input_tokens")), round(_mean(report, "total_output_tokens"))
    in_flight = float(report.get("request_throughput_rps") or 0.0) * float(report.get("mean_e2e_latency_ms") or 0.0)
    out: dict[str, float] = {}
    for role, args in roles.items():
        ranks = max(1, args.replicas * args.shape.attention_dp)
        batch = max(1, min(int(candidate.engines[role].max_num_seqs), round(in_flight / 1000.0 / ranks)))
        name = "prefill" if role == "prefill" else "decode"   # an aggregated worker is the decode role
        watts, coverage = step_power(args.profile, name, batch, isl, osl)
        out[f"{name}_power_w_per_gpu"], out[f"{name}_energy_coverage"] = watts, coverage
    return out


def with_energy(report: Mapping[str, Any]) -> dict[str, Any]:
    """The report with the energy metrics, from its role powers (``role_powers``), GPU time and output tokens."""
    out = dict(report)
    seconds = {r: hours * 3600.0 for r, hours in role_gpu_hours(report).items()}
    busy = {r: s for r, s in seconds.items() if s > 0 and report.get(f"{r}_power_w_per_gpu") is not None}
    if not busy:
        return out
    total = sum(busy.values())
    joules = sum(s * float(report[f"{r}_power_w_per_gpu"]) for r, s in busy.items())
    coverage = sum(s * float(report.get(f"{r}_energy_coverage") or 0.0) for r, s in busy.items()) / total
    tokens = float(report.get("output_throughput_tok_s") or 0.0) * float(report.get("duration_ms") or 0.0) / 1000.0
    out["energy_j_per_token"] = joules / tokens if tokens > 0 else None
    out["avg_power_w_per_gpu"] = joules / total
    out["energy_coverage"] = coverage
    out["energy_source"] = "measured" if coverage >= 0.999 else "board_power" if coverage <= 0.0 else "mixed"
    return out


__all__ = ["role_powers", "with_energy"]

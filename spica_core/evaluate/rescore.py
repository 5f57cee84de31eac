"""A replay's numbers under a calibration, from the replay's summary and its requests, without replaying.

Every request's TTFT is multiplied by the TTFT correction and its inter-token gaps by the ITL correction, so:

- every TTFT statistic scales with the TTFT correction; ITL and TPOT statistics with the ITL correction, and
  tokens per second per user inversely;
- each request's end-to-end latency becomes ``c_ttft · TTFT + c_itl · (E2E − TTFT)``, and the SLA is counted
  again request by request (goodput), each latency times its SLA factor (the correction, or the calibrated
  quantile at ``goal.sla_confidence``);
- a closed loop (a fixed number of requests in flight) serves as many requests per second as its mean E2E
  allows, so its duration, GPU time (GPU-hours and each role's worker-seconds, which cost and energy read) and
  throughputs stretch with the mean E2E; an open loop's arrivals do not
  move, so its duration is kept (a deployment that falls behind its arrivals would stretch it: the replay
  under the calibrated timings is the exact answer, and a new sweep gives it).
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from spica_core.evaluate.requests import RequestLatencies

_TTFT = "ttft_ms"
_ITL = "itl_ms"
_THROUGHPUTS = ("request_throughput_rps", "input_throughput_tok_s", "output_throughput_tok_s",
                "total_throughput_tok_s")
_STATS = ("mean_", "median_", "min_", "max_", "std_", "p75_", "p90_", "p95_", "p99_")
_GPU_TIME = ("duration_ms", "gpu_hours", "prefill_worker_seconds", "decode_worker_seconds")   # stretch together


def _stat(prefix: str, values: np.ndarray) -> float:
    if prefix == "mean_":
        return float(values.mean())
    if prefix == "median_":
        return float(np.median(values))
    if prefix == "min_":
        return float(values.min())
    if prefix == "max_":
        return float(values.max())
    if prefix == "std_":
        return float(values.std())
    return float(np.percentile(values, float(prefix[1:-1])))


def calibrated_report(report: Mapping[str, Any], requests: RequestLatencies, corrections: Mapping[str, float],
                      sla: Mapping[str, float] | None, sla_factors: Mapping[str, float],
                      closed_loop: bool) -> dict[str, Any]:
    """``report`` (a replay summary, or a candidate's metrics: whichever keys it holds) as the calibrated
    deployment would have served it. ``sla``: the goal's SLA in ms ({ttft_ms, itl_ms} or {e2e_ms}), None
    without one; ``sla_factors``: what each latency is multiplied by before it is held against it."""
    c_t, c_i = float(corrections.get(_TTFT, 1.0)), float(corrections.get(_ITL, 1.0))
    out = dict(report)
    for key, value in report.items():
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(float(value)):
            continue
        if key.endswith("_ttft_ms"):
            out[key] = float(value) * c_t
        elif key.endswith(("_itl_ms", "_tpot_ms")):
            out[key] = float(value) * c_i
        elif key.endswith("_output_token_throughput_per_user"):
            out[key] = float(value) / c_i
    ttft, e2e = requests.ttft_ms, requests.e2e_ms
    new_e2e = c_t * ttft + c_i * (e2e - ttft)
    if len(requests):
        for prefix in _STATS:
            if f"{prefix}e2e_latency_ms" in report:
                out[f"{prefix}e2e_latency_ms"] = _stat(prefix, new_e2e)
    stretch = float(new_e2e.mean() / e2e.mean()) if closed_loop and len(requests) and e2e.mean() > 0 else 1.0
    for key in _GPU_TIME:
        if report.get(key) is not None:
            out[key] = float(report[key]) * stretch
    for key in _THROUGHPUTS:
        if report.get(key) is not None:
            out[key] = float(report[key]) / stretch
    return with_goodput(out, requests, sla, sla_factors) if sla else out


def with_goodput(report: Mapping[str, Any], requests: RequestLatencies, sla: Mapping[str, float],
                 sla_factors: Mapping[str, float]) -> dict[str, Any]:
    """``report`` with its goodput counted again, request by request, from ``requests`` as they now stand (each
    latency times its SLA factor, held against ``sla``: {ttft_ms, itl_ms} or {e2e_ms}) over its duration."""
    out = dict(report)
    good = _good(requests, sla, sla_factors)
    seconds = float(out.get("duration_ms") or 0.0) / 1000.0
    tokens = float(requests.output_tokens[good].sum())
    out["goodput_completed_requests"] = int(good.sum())
    if "goodput_request_throughput_rps" in report or "goodput_output_throughput_tok_s" in report:
        out["goodput_request_throughput_rps"] = int(good.sum()) / seconds if seconds > 0 else 0.0
    out["goodput_output_throughput_tok_s"] = tokens / seconds if seconds > 0 else 0.0
    return out


def _good(requests: RequestLatencies, sla: Mapping[str, float], factors: Mapping[str, float]) -> np.ndarray:
    """Which requests meet the SLA, each latency times its factor (the replay's own test: TTFT and the request's
    mean ITL, combined with AND; or end-to-end alone)."""
    f_t, f_i = float(factors.get(_TTFT, 1.0)), float(factors.get(_ITL, 1.0))
    ttft, itl = requests.ttft_ms, requests.itl_ms
    good = np.ones(len(requests), dtype=bool)
    if sla.get("e2e_ms") is not None:
        good &= f_t * ttft + f_i * (requests.e2e_ms - ttft) <= float(sla["e2e_ms"])
    if sla.get(_TTFT) is not None:
        good &= f_t * ttft <= float(sla[_TTFT])
    if sla.get(_ITL) is not None:
        good &= f_i * itl <= float(sla[_ITL])
    return good


__all__ = ["calibrated_report", "with_goodput"]

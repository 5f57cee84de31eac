"""The planner fields a candidate runs with, the PlannerConfig JSON a manifest carries for them (its keys and its
rules), and what the planner knows about each role's engines."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from spica_core.errors import PlannerConfigError
from spica_core.deployment import Candidate

MAX_THROUGHPUT_SCALING_REPLICAS = 8
PLANNER_DEFAULT_LOAD_INTERVAL_S = 5
PLANNER_DEFAULT_THROUGHPUT_INTERVAL_S = 180
# Without a swept winner (no throughput scaling, or a load-only policy) the planner forecasts the last value.
CONSTANT_PREDICTOR: dict[str, Any] = {"load_predictor": "constant", "load_predictor_log1p": False}


# PlannerConfig (ai-dynamo 1.6.1) fields a --config may carry: what ``planner_config`` writes and the manifest
# check accepts. PlannerConfig silently drops unknown keys, so a typo would deploy the default instead.
PLANNER_CONFIG_KEYS = frozenset({
    "environment", "backend", "mode", "optimization_target", "pre_deployment_sweeping_mode",
    "enable_throughput_scaling", "enable_load_scaling",
    "throughput_adjustment_interval_seconds", "load_adjustment_interval_seconds",
    "max_num_fpm_samples", "fpm_sample_bucket_size", "load_scaling_down_sensitivity", "load_min_observations",
    "load_metric_samples", "load_predictor", "load_predictor_log1p", "prophet_window_size",
    "kalman_q_level", "kalman_q_trend", "kalman_r", "kalman_min_points",
    "max_gpu_budget", "min_gpu_budget", "min_endpoint", "prefill_min_endpoint", "decode_min_endpoint",
    "prefill_engine_num_gpu", "decode_engine_num_gpu", "model_name", "speculative_nextn",
    "ttft_ms", "itl_ms", "report_interval_hours", "live_dashboard_port",
    "metric_pulling_prometheus_extra_query_params",
})


def planner_config_problems(*, load_on: bool, throughput_on: bool, load_interval_s: float | None,
                            throughput_interval_s: float | None, bucket: int | None,
                            sensitivity: float | None) -> list[str]:
    """Dynamo PlannerConfig's own rules on these fields, for a candidate and for an emitted ``--config`` alike
    (None = the field is absent, nothing to check)."""
    out = []
    if (load_interval_s is not None and load_interval_s <= 0) or \
            (throughput_on and throughput_interval_s is not None and throughput_interval_s <= 0):
        out.append("adjustment intervals must be > 0")
    if load_on and throughput_on and load_interval_s is not None and throughput_interval_s is not None \
            and not load_interval_s < throughput_interval_s:
        out.append(f"load_adjustment_interval_seconds ({load_interval_s:g}) must be shorter than "
                   f"throughput_adjustment_interval_seconds ({throughput_interval_s:g}) when both scaling modes are on")
    if bucket is not None and (bucket < 0 or math.isqrt(bucket) ** 2 != bucket):
        out.append(f"fpm_sample_bucket_size {bucket} must be a perfect square")
    if sensitivity is not None and not 0 <= sensitivity <= 100:
        out.append(f"load_scaling_down_sensitivity {sensitivity:g} must be within 0..100")
    return out


@dataclass(frozen=True)
class PlannerSettings:
    """The planner fields a candidate runs with, after Dynamo's PlannerConfig normalisation."""

    mode: str                       # agg | disagg
    optimization_target: str        # throughput | latency | sla
    enable_load_scaling: bool
    enable_throughput_scaling: bool
    load_interval_s: float = 5.0
    throughput_interval_s: float = 180.0
    max_num_fpm_samples: int = 64
    fpm_sample_bucket_size: int = 16
    load_scaling_down_sensitivity: int = 80
    load_min_observations: int = 5
    ttft_ms: float = 500.0
    itl_ms: float = 50.0
    max_gpu_budget: int = 8
    min_gpu_budget: int = -1
    min_endpoint: int = 1
    max_throughput_scaling_replicas: int = MAX_THROUGHPUT_SCALING_REPLICAS
    predictor: dict[str, Any] = field(default_factory=lambda: dict(CONSTANT_PREDICTOR))

    @property
    def scale_interval_s(self) -> float:
        """gcd (ms resolution) of the load interval and, for sla throughput scaling, the throughput interval."""
        load_ms = int(round(self.load_interval_s * 1000))
        if self.enable_throughput_scaling and self.optimization_target == "sla":
            return math.gcd(load_ms, int(round(self.throughput_interval_s * 1000))) / 1000.0
        return load_ms / 1000.0

    @classmethod
    def from_candidate(cls, candidate: Candidate, optimization_target: str, *, ttft_ms: float | None = None,
                       itl_ms: float | None = None) -> PlannerSettings | None:
        """None for a static candidate (both scaling flags off); PlannerConfigError for invalid fields."""
        p = candidate.planner
        load_on, tp_on = p.enable_load_scaling, p.enable_throughput_scaling
        if not (load_on or tp_on):
            return None
        if optimization_target not in ("throughput", "latency", "sla"):
            raise PlannerConfigError(f"planner optimization_target {optimization_target!r} is not supported "
                                     "(throughput, latency, sla)")
        if optimization_target != "sla":  # PlannerConfig: easy mode forces load on, throughput off
            load_on, tp_on = True, False
        # A dict policy entry may leave an interval null: Dynamo's PlannerConfig then uses its defaults.
        load_iv = p.load_adjustment_interval_seconds or PLANNER_DEFAULT_LOAD_INTERVAL_S
        tp_iv = p.throughput_adjustment_interval_seconds or PLANNER_DEFAULT_THROUGHPUT_INTERVAL_S
        assert p.fpm_sample_bucket_size is not None and p.max_num_fpm_samples is not None  # set whenever it scales
        assert p.load_scaling_down_sensitivity is not None and p.load_min_observations is not None
        bucket, sens = int(p.fpm_sample_bucket_size), int(p.load_scaling_down_sensitivity)
        problems = planner_config_problems(load_on=load_on, throughput_on=tp_on, load_interval_s=load_iv,
                                           throughput_interval_s=tp_iv, bucket=bucket, sensitivity=sens)
        if int(p.max_num_fpm_samples) <= 0:
            problems.append("max_num_fpm_samples must be > 0")
        if optimization_target == "sla" and (ttft_ms is None or itl_ms is None):
            problems.append("the sla target needs both ttft_ms and itl_ms")
        if problems:
            raise PlannerConfigError("invalid planner configuration: " + "; ".join(problems))
        ctx = candidate.context
        predictor = p.load_predictor.fields() if p.load_predictor else dict(CONSTANT_PREDICTOR)
        return cls(
            mode=candidate.mode, optimization_target=optimization_target,
            enable_load_scaling=load_on, enable_throughput_scaling=tp_on,
            load_interval_s=float(load_iv), throughput_interval_s=float(tp_iv),
            max_num_fpm_samples=int(p.max_num_fpm_samples), fpm_sample_bucket_size=bucket,
            load_scaling_down_sensitivity=sens, load_min_observations=int(p.load_min_observations),
            ttft_ms=float(ttft_ms if ttft_ms is not None else 500.0),
            itl_ms=float(itl_ms if itl_ms is not None else 50.0),
            max_gpu_budget=int(ctx.gpu_budget), min_gpu_budget=int(ctx.min_gpu_budget or -1),
            min_endpoint=int(ctx.min_endpoint or 1), predictor=predictor,
        )


@dataclass(frozen=True)
class RoleCapability:
    """What the planner knows about one role's engines."""

    gpus_per_replica: int
    max_kv_tokens: int              # num_gpu_blocks × block_size × dp_size
    max_num_batched_tokens: int
    max_num_seqs: int
    context_length: int | None
    nextn: int = 0
    profile: str | None = None      # the role's AIC profile: the forward-pass-time model

    @classmethod
    def from_role_args(cls, ra: Any, context_length: int | None, nextn: int | None) -> RoleCapability:
        eng = ra.payload["engine"]
        return cls(gpus_per_replica=ra.gpus_per_replica, max_kv_tokens=ra.max_kv_tokens,
                   max_num_batched_tokens=int(eng["max_num_batched_tokens"]), max_num_seqs=int(eng["max_num_seqs"]),
                   context_length=context_length, nextn=int(nextn or 0), profile=ra.profile)



def planner_config(candidate: Candidate, settings: PlannerSettings) -> dict[str, Any]:
    """The PlannerConfig (1.6.1) JSON from the settings the replay ran the planner with."""
    ctx = candidate.context
    out: dict[str, Any] = {
        "environment": "kubernetes", "backend": candidate.backend, "mode": candidate.mode,
        "optimization_target": settings.optimization_target, "pre_deployment_sweeping_mode": "none",
        "enable_throughput_scaling": settings.enable_throughput_scaling,
        "enable_load_scaling": settings.enable_load_scaling,
        "throughput_adjustment_interval_seconds": _whole(settings.throughput_interval_s),
        "load_adjustment_interval_seconds": _whole(settings.load_interval_s),
        "max_num_fpm_samples": settings.max_num_fpm_samples, "fpm_sample_bucket_size": settings.fpm_sample_bucket_size,
        "load_scaling_down_sensitivity": settings.load_scaling_down_sensitivity,
        "load_min_observations": settings.load_min_observations,
    }
    if settings.enable_throughput_scaling:   # the predictor the replay forecast with (constant when none was swept)
        out.update(settings.predictor)
    out["max_gpu_budget"] = settings.max_gpu_budget
    if ctx.min_gpu_budget is not None:
        out["min_gpu_budget"] = settings.min_gpu_budget
    if ctx.min_endpoint is not None:
        out["min_endpoint"] = settings.min_endpoint
    roles = candidate.parallel.roles
    if candidate.mode == "disagg":
        out["prefill_engine_num_gpu"] = roles["prefill"].shape.gpus
    out["decode_engine_num_gpu"] = roles["decode" if candidate.mode == "disagg" else "agg"].shape.gpus
    out["model_name"] = ctx.model_name
    if ctx.aic_nextn:
        out["speculative_nextn"] = ctx.aic_nextn
    if settings.optimization_target == "sla":
        out["ttft_ms"], out["itl_ms"] = settings.ttft_ms, settings.itl_ms
    out["report_interval_hours"] = None
    out["live_dashboard_port"] = 0
    return out


def _whole(value: float) -> int | float:
    return int(value) if float(value).is_integer() else float(value)

__all__ = ["MAX_THROUGHPUT_SCALING_REPLICAS", "PLANNER_CONFIG_KEYS", "PlannerSettings", "RoleCapability",
           "planner_config", "planner_config_problems"]

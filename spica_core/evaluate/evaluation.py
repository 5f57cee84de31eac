"""Evaluating one candidate in this process.

``evaluate_one`` runs: backend version → KV-load resolution → budget gate → engine arguments
(AIC profile + KV blocks, validated by the runtime) → planner policy → replay → goodput contract →
score. Every way a candidate can go wrong comes back as an :class:`Outcome` with a reason; only
bugs in the caller's inputs raise.

Sweeps run this in isolated worker processes (``spica_core.evaluate.pool``).
"""
from __future__ import annotations

import os
import time
import traceback
from dataclasses import dataclass, field, replace
from enum import StrEnum
from pathlib import Path
from typing import Any

from spica_core.config.goal import OptimizationGoal
from spica_core.config.model import SmartSearchConfig
from spica_core.config.workload import Workload
from spica_core.errors import (
    GoodputContractError, InfeasibleKVCapacityError, OverBudgetError, PlannerConfigError, RejectedEngineArgsError,
    SpicaError,
)
from spica_core.evaluate.bands import Band, load_bands
from spica_core.evaluate.calibration import Applied, Calibration
from spica_core.evaluate.requests import RequestLatencies
from spica_core.evaluate.rescore import with_goodput
from spica_core.evaluate.serving import load_serving, polling_delay_ms, served_report, served_requests, served_sla
from spica_core.deployment import Candidate

os.environ.setdefault("DYN_LOG", "error")


class Status(StrEnum):
    """What became of a candidate. ``unsupported`` is the search loop's: it never reaches a replay."""

    feasible = "feasible"
    infeasible = "infeasible"
    failed = "failed"
    unsupported = "unsupported"


@dataclass(frozen=True)
class EvalRequest:
    """Everything one evaluation needs; picklable, so it can cross to a worker process."""

    candidate: Candidate
    workload: Workload
    goal: OptimizationGoal
    trace_file: str | None = None         # resolved trace path for trace workloads
    kv_load_ratio: float | None = None    # the trial's ratio (ranged workloads); default: workload's scalar
    profile_dir: str | None = None        # None: SPICA_CACHE_DIR / ~/.cache/spica/profiles
    capture_per_request: bool = False
    eval_id: str = ""
    with_bands: bool = True               # False only for bench/bench_accuracy.py, which makes the band file
    calibration: Calibration | None = None   # the user's measurements: corrects latencies, bands and the SLA count

    def scaled(self, scale: float) -> EvalRequest:
        """The same candidate under ``scale`` × today's traffic (headroom, robust ranking)."""
        from spica_core.evaluate.workload import scaled_workload

        ratio = self.kv_load_ratio
        if ratio is None and self.candidate.kv_load is not None:
            ratio = self.candidate.kv_load.ratio
        return replace(self, workload=scaled_workload(self.workload, scale),
                       kv_load_ratio=None if ratio is None else ratio * scale, eval_id=f"{self.eval_id}@{scale:.4g}")

    @classmethod
    def from_config(cls, config: SmartSearchConfig, candidate: Candidate, *, trace_file: str | None = None,
                    **kw: Any) -> EvalRequest:
        return cls(candidate=candidate, workload=config.workload, goal=config.goal, trace_file=trace_file, **kw)

    @property
    def closed_loop(self) -> bool:
        """A fixed number of requests in flight (its throughput follows its latency), not fixed arrivals."""
        from spica_core.evaluate.workload import effective_in_flight_cap

        return effective_in_flight_cap(self.workload, self.candidate.concurrency) is not None


@dataclass
class Outcome:
    """What became of one candidate: status, reason, metrics, score, objectives, the candidate, timings."""

    status: Status
    candidate: Candidate
    reason: str = ""
    metrics: dict[str, float] = field(default_factory=dict)
    score: float | None = None
    objectives: dict[str, float] | None = None
    timings: dict[str, float] = field(default_factory=dict)
    report: dict[str, Any] = field(default_factory=dict)   # the full replay summary
    planner: dict[str, Any] = field(default_factory=dict)  # planner ticks and decisions
    per_request: list[dict[str, Any]] | None = None
    eval_id: str = ""
    bands: dict[str, Band] = field(default_factory=dict)  # the error band on each predicted latency
    requests: RequestLatencies | None = None   # each request's latencies: scored again under a calibration
    calibration: Applied | None = None         # which calibration applied (None: none was asked for)
    uncalibrated: dict[str, float] = field(default_factory=dict)   # the replay's own metrics, when calibrated

    @property
    def feasible(self) -> bool:
        return self.status is Status.feasible


def _replayed_trace(req: EvalRequest, candidate: Candidate) -> tuple[str | None, int]:
    """The trace file the replay reads and how many requests over the context it leaves out."""
    from spica_core.evaluate.replay_traces import fitted_trace
    from spica_core.space.facts import cache_dir
    from spica_core.space.kv import max_seq_len

    path = req.trace_file or req.workload.trace_path
    if path is None or req.workload.over_context == "refuse":
        return path, 0
    ctx = candidate.context
    fitted = fitted_trace(path, max_seq_len(ctx.model_name, ctx.context_length),
                          Path(req.profile_dir).expanduser() if req.profile_dir else cache_dir())
    return str(fitted.path), fitted.left_out


def with_rejected(report: dict[str, Any], rejected: int) -> dict[str, Any]:
    """``over_context: fail``: requests the server rejects at once count in num_requests, complete nothing
    (so they are SLA misses in goodput) and use no GPU time."""
    if not rejected:
        return report
    return {**report, "num_requests": int(report.get("num_requests") or 0) + rejected, "rejected_requests": rejected}


def _sla_factors(goal: OptimizationGoal, candidate: Candidate) -> dict[str, float] | None:
    """What each latency is multiplied by before the SLA holds it: the band quantile at ``goal.sla_confidence``
    above 0.5, else None (the latency itself)."""
    if goal.sla is None or goal.sla_confidence <= 0.5:
        return None
    return load_bands().sla_factors(*candidate.group, goal.sla_confidence)


def _prepare(req: EvalRequest, timings: dict[str, float]) -> tuple[Candidate, Any, Any, int, float]:
    """The resolved candidate, the replay spec, the scaling policy, the requests the replay leaves out as
    rejected and the serving path's time per request; raises SpicaError subclasses."""
    from spica_core.config.policies import planner_target
    from spica_core.evaluate.engine_args import build_engine_args, router_kwargs
    from spica_core.evaluate.replay import ReplaySpec
    from spica_core.evaluate.scoring import is_feasible, sla_kwargs
    from spica_core.evaluate.workload import replay_workload, resolve_kv_load
    from spica_core.planner import make_policy
    from spica_core.space.facts import shared_backend_version

    t0 = time.perf_counter()
    candidate = req.candidate
    version = candidate.backend_version or shared_backend_version(candidate.hardware.values(), candidate.backend)
    kv_load = None
    concurrency = req.workload.concurrency
    if req.workload.kv_load_ratio is not None:
        ratio = req.kv_load_ratio if req.kv_load_ratio is not None else (
            candidate.kv_load.ratio if candidate.kv_load is not None else req.workload.kv_load_ratio)
        if isinstance(ratio, (list, tuple)):
            raise SpicaError("a ranged kv_load_ratio needs the trial's value (EvalRequest.kv_load_ratio)")
        concurrency, kv_load = resolve_kv_load(candidate, req.workload, float(ratio))
    candidate = candidate.resolved(backend_version=version, concurrency=concurrency, kv_load=kv_load)
    timings["resolve_s"] = time.perf_counter() - t0
    if not is_feasible(candidate.used_gpus, candidate.context.gpu_budget):
        raise OverBudgetError(f"over budget: {candidate.used_gpus} GPUs > gpu_budget {candidate.context.gpu_budget}")
    t1 = time.perf_counter()
    roles = build_engine_args(candidate, profile_dir=req.profile_dir)
    timings["engine_args_s"] = time.perf_counter() - t1
    sla = req.goal.sla
    factors = _sla_factors(req.goal, candidate)
    overhead = load_serving().overhead_ms(candidate.backend)
    planner_ttft = None if sla is None or sla.ttft_ms is None else max(1.0, sla.ttft_ms - overhead)
    policy = make_policy(candidate, roles, planner_target(req.goal), ttft_ms=planner_ttft,
                         itl_ms=sla.itl_ms if sla else None)
    trace_file, left_out = _replayed_trace(req, candidate)
    workload = replay_workload(req.workload, trace_file=trace_file,
                               concurrency=concurrency if kv_load is not None else None,
                               directory=Path(req.profile_dir).expanduser() if req.profile_dir else None)
    spec = ReplaySpec(roles=roles, workload=workload, router=router_kwargs(candidate.router),
                      sla=served_sla(sla_kwargs(req.goal, factors), overhead), scaling_policy=policy,
                      capture_per_request=True)
    return candidate, spec, policy, left_out if req.workload.over_context == "fail" else 0, overhead


def evaluate_one(req: EvalRequest) -> Outcome:
    """Evaluate one candidate in this process; never raises for a bad candidate.

    With ``goal.robust_scale`` S > 1 the candidate is also replayed at S × today's traffic, and its score
    (and each Pareto objective) is the worse of the two; the plain score stays in ``metrics``.
    """
    out = _evaluate(req)
    scale = req.goal.robust_scale
    if scale <= 1 or not out.feasible:
        return out
    plain = req.goal.model_copy(update={"robust_scale": 1.0})
    grown = _evaluate(replace(req.scaled(scale), goal=plain))
    if not grown.feasible:
        return replace(out, status=grown.status, score=None, objectives=None,
                       reason=f"at robust_scale {scale:g} × today's traffic: {grown.reason}")
    return robust(req.goal, out, grown)


def robust(goal: OptimizationGoal, today: Outcome, grown: Outcome) -> Outcome:
    """``today`` with the worse of its own and ``grown``'s score and objectives (minimised ones: the larger)."""
    from spica_core.config.goal import MINIMIZED_TARGETS, OptimizationTarget

    assert today.score is not None and grown.score is not None
    metrics = {**today.metrics, "plain_score": today.score, "robust_scale_score": grown.score}
    score = today.score if goal.is_pareto else min(today.score, grown.score)
    objectives = None
    if today.objectives is not None and grown.objectives is not None:
        objectives = {k: (max if OptimizationTarget(k) in MINIMIZED_TARGETS else min)(v, grown.objectives[k])
                      for k, v in today.objectives.items()}
        score = objectives[goal.objectives[0].value]
    timings = {**today.timings, "replay_s": today.timings.get("replay_s", 0.0) + grown.timings.get("replay_s", 0.0),
               "total_s": today.timings.get("total_s", 0.0) + grown.timings.get("total_s", 0.0)}
    return replace(today, score=score, objectives=objectives, metrics=metrics, timings=timings)


def _evaluate(req: EvalRequest) -> Outcome:
    from spica_core.evaluate.cost import with_cost
    from spica_core.evaluate.energy import role_powers, with_energy
    from spica_core.evaluate.replay import run_replay
    from spica_core.evaluate.scoring import candidate_metrics, objective_vector, score_report

    timings: dict[str, float] = {}
    start = time.perf_counter()
    candidate = req.candidate

    def outcome(status: Status, reason: str = "", **kw: Any) -> Outcome:
        timings["total_s"] = time.perf_counter() - start
        return Outcome(status, candidate, reason, timings=timings, eval_id=req.eval_id, **kw)

    try:
        candidate, spec, policy, rejected, overhead = _prepare(req, timings)
    except (OverBudgetError, InfeasibleKVCapacityError) as exc:
        return outcome(Status.infeasible, str(exc))
    except (RejectedEngineArgsError, PlannerConfigError, SpicaError) as exc:
        return outcome(Status.failed, str(exc))
    except Exception as exc:  # noqa: BLE001 - a candidate-build bug must not stop a sweep
        return outcome(Status.failed, f"candidate build error: {type(exc).__name__}: {exc}")
    timings["prepare_s"] = time.perf_counter() - start
    try:
        result = run_replay(spec)
    except Exception as exc:  # noqa: BLE001 - replay errors are candidate outcomes
        return outcome(Status.failed, f"replay error: {type(exc).__name__}: {exc}")
    timings["replay_s"] = float(result["replay_seconds"])
    t2 = time.perf_counter()
    summary = with_rejected(result["summary"], rejected)
    ctx = candidate.context
    polling = polling_delay_ms(candidate.backend, candidate.mode, ctx.scheduler_recv_interval,
                               summary.get("mean_itl_ms"))
    report = served_report(summary, overhead, polling)
    per_request = served_requests(result.get("per_request"), overhead + polling)
    if polling and req.goal.sla is not None and per_request is not None:   # the replay counted it without the wait
        report = with_goodput(report, RequestLatencies.of(per_request), req.goal.sla.model_dump(exclude_none=True),
                              _sla_factors(req.goal, candidate) or {})
    try:
        report = with_energy(with_cost({**report, **role_powers(candidate, spec.roles, report)}, req.goal, candidate))
    except Exception as exc:  # noqa: BLE001 - a metric that cannot be computed fails the candidate, with why
        return outcome(Status.failed, f"energy of the candidate's steps: {type(exc).__name__}: {exc}")
    planner = {}
    if policy is not None:
        planner = {"ticks": policy.ticks, "decisions": list(policy.decisions),
                   "lifecycle_operations": len(result["lifecycle_operations"])}
    try:
        score = score_report(req.goal, report)
    except GoodputContractError as exc:
        return outcome(Status.failed, str(exc), metrics=candidate_metrics(report), report=report, planner=planner)
    objectives = objective_vector(req.goal, report) if req.goal.is_pareto else None
    metrics = candidate_metrics(report)
    try:
        bands = load_bands().bands(*candidate.group, metrics) if req.with_bands else {}
    except SpicaError as exc:  # a number without its band is half an answer: never drop it silently
        return outcome(Status.failed, str(exc), metrics=metrics, report=report, planner=planner)
    done = outcome(Status.feasible, metrics=metrics, score=score, objectives=objectives, bands=bands,
                   report=report, planner=planner, requests=RequestLatencies.of(per_request or ()),
                   per_request=per_request if req.capture_per_request else None)
    if req.calibration is not None:
        done = calibrated(done, req.goal, req.calibration, req.closed_loop)
    timings["score_s"] = time.perf_counter() - t2
    return done


def calibrated(out: Outcome, goal: OptimizationGoal, calibration: Calibration, closed_loop: bool) -> Outcome:
    """``out`` (a feasible outcome as the replay scored it, with its requests) under ``calibration``: its
    latencies, SLA count, score, objectives and bands corrected for the candidate's group (unchanged for a group
    the calibration did not measure), the replay's own metrics kept in ``uncalibrated``."""
    from spica_core.evaluate.cost import with_cost
    from spica_core.evaluate.energy import with_energy
    from spica_core.evaluate.rescore import calibrated_report
    from spica_core.evaluate.scoring import candidate_metrics, objective_vector, score_report

    assert out.feasible and out.requests is not None
    raw = out.uncalibrated or out.metrics
    base = out.uncalibrated or out.report or out.metrics
    candidate = out.candidate
    group = candidate.group
    sla = goal.sla.model_dump(exclude_none=True) if goal.sla is not None else None
    shipped = _sla_factors(goal, candidate) or {}
    factors = {**shipped, **calibration.sla_factors(*group, goal.sla_confidence)}   # as the replay held it, else
    report = with_energy(with_cost(calibrated_report(base, out.requests, calibration.corrections(*group), sla,
                                                     factors, closed_loop), goal, candidate))
    return replace(out, report=report, metrics=candidate_metrics(report), score=score_report(goal, report),
                   objectives=objective_vector(goal, report) if goal.is_pareto else None,
                   bands=calibration.bands(*group, raw, out.bands), calibration=calibration.applied(*group),
                   uncalibrated=dict(raw))


def evaluate_in_worker(req: EvalRequest) -> Outcome:
    """:func:`evaluate_one` for a worker process or cluster task, which must answer every request: a bug
    in it becomes a failed outcome carrying a short traceback instead of killing the worker."""
    try:
        return evaluate_one(req)
    except Exception as exc:  # noqa: BLE001
        return Outcome(Status.failed, req.candidate,
                       f"worker error: {type(exc).__name__}: {exc}\n{traceback.format_exc(limit=3)}",
                       eval_id=req.eval_id)


__all__ = ["EvalRequest", "Outcome", "Status", "evaluate_in_worker", "evaluate_one"]

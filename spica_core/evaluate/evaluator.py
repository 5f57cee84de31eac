"""Evaluating one candidate, in-process or in an isolated worker process (reference §6.4, §7.1 step 7).

``evaluate_one`` runs: backend version → KV-load resolution → budget gate → engine arguments
(AIC profile + KV blocks, validated by the runtime) → planner policy → replay → goodput contract →
score. Every way a candidate can go wrong comes back as an :class:`Outcome` with a reason; only
bugs in the caller's inputs raise.

The replay is not fork-safe and runs native code that can crash or run long, so sweeps evaluate in
spawned worker processes (:class:`EvalPool`) with a hard per-wave deadline; a stuck or crashed
worker is terminated and replaced, and the caller carries on.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import time
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from typing import Any, Literal

from spica_core.config.model import OptimizationGoal, SmartSearchConfig, Workload
from spica_core.errors import (
    GoodputContractError, InfeasibleKVCapacityError, OverBudgetError, PlannerConfigError, RejectedEngineArgsError,
    SpicaError,
)

os.environ.setdefault("DYN_LOG", "error")

Status = Literal["feasible", "infeasible", "failed"]


@dataclass(frozen=True)
class EvalRequest:
    """Everything one evaluation needs; picklable, so it can cross to a worker process."""

    sample: dict[str, Any]                # the flat unrolled sample (§9.1), backend_version optional
    workload: Workload
    goal: OptimizationGoal
    trace_file: str | None = None         # resolved trace path for trace workloads
    kv_load_ratio: float | None = None    # the trial's ratio (ranged workloads); default: workload's scalar
    profile_dir: str | None = None        # None: SPICA_CACHE_DIR / ~/.cache/spica/profiles
    capture_per_request: bool = False
    eval_id: str = ""

    @classmethod
    def from_config(cls, config: SmartSearchConfig, sample: dict[str, Any], *, trace_file: str | None = None,
                    **kw: Any) -> EvalRequest:
        return cls(sample=sample, workload=config.workload, goal=config.goal, trace_file=trace_file, **kw)


@dataclass
class Outcome:
    """What became of one candidate: status, reason, metrics, score, objectives, sample, timings."""

    status: Status
    reason: str = ""
    metrics: dict[str, float] = field(default_factory=dict)
    score: float | None = None
    objectives: dict[str, float] | None = None
    sample: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    report: dict[str, Any] = field(default_factory=dict)   # the full replay summary
    planner: dict[str, Any] = field(default_factory=dict)  # planner ticks and decisions
    per_request: list[dict[str, Any]] | None = None
    eval_id: str = ""

    @property
    def used_gpus(self) -> int:
        return int(self.sample.get("used_gpus", 0))

    @property
    def feasible(self) -> bool:
        return self.status == "feasible"


# ---------------------------------------------------------------- one evaluation


def _prepare(req: EvalRequest, timings: dict[str, float]) -> tuple[dict[str, Any], Any, Any]:
    """Sample completion, engine args and the replay spec; raises SpicaError subclasses on bad candidates."""
    from spica_core.evaluate.engine_args import build_engine_args, router_kwargs
    from spica_core.evaluate.scoring import is_feasible, sla_kwargs
    from spica_core.space.facts import backend_version
    from spica_core.planner.policy import make_policy
    from spica_core.config.policies import planner_target
    from spica_core.evaluate.replay import ReplaySpec
    from spica_core.evaluate.candidate import add_run_fields
    from spica_core.evaluate.workload import replay_workload, resolve_kv_load

    t0 = time.perf_counter()
    sample = dict(req.sample)
    version = sample.get("backend_version") or backend_version(sample["hardware_sku"], sample["backend"])
    kv_load = None
    concurrency = req.workload.concurrency
    if req.workload.kv_load_ratio is not None:
        ratio = req.kv_load_ratio if req.kv_load_ratio is not None else sample.get("kv_load_ratio")
        if ratio is None:
            ratio = req.workload.kv_load_ratio
        if isinstance(ratio, (list, tuple)):
            raise SpicaError("a ranged kv_load_ratio needs the trial's value (EvalRequest.kv_load_ratio)")
        kv_load = resolve_kv_load({**sample, "backend_version": version}, req.workload, float(ratio))
        concurrency = kv_load["concurrency"]
    sample = add_run_fields(sample, backend_version=version, concurrency=concurrency, kv_load=kv_load)
    timings["resolve_s"] = time.perf_counter() - t0
    if not is_feasible(int(sample["used_gpus"]), int(sample["gpu_budget"])):
        raise OverBudgetError(f"over budget: {sample['used_gpus']} GPUs > gpu_budget {sample['gpu_budget']}")
    t1 = time.perf_counter()
    roles = build_engine_args(sample, profile_dir=req.profile_dir)
    timings["engine_args_s"] = time.perf_counter() - t1
    sla = req.goal.sla
    policy = make_policy(sample, roles, planner_target(req.goal),
                         ttft_ms=sla.ttft_ms if sla else None, itl_ms=sla.itl_ms if sla else None)
    workload = replay_workload(req.workload, trace_file=req.trace_file,
                               concurrency=kv_load["concurrency"] if kv_load else None)
    spec = ReplaySpec(roles=roles, workload=workload, router=router_kwargs(sample), sla=sla_kwargs(req.goal),
                      scaling_policy=policy, capture_per_request=req.capture_per_request)
    return sample, spec, policy



def evaluate_one(req: EvalRequest) -> Outcome:
    """Evaluate one candidate in this process; never raises for a bad candidate."""
    from spica_core.evaluate.scoring import candidate_metrics, objective_vector, score_report
    from spica_core.evaluate.replay import run_replay

    timings: dict[str, float] = {}
    start = time.perf_counter()
    sample = dict(req.sample)
    try:
        sample, spec, policy = _prepare(req, timings)
    except (OverBudgetError, InfeasibleKVCapacityError) as exc:
        timings["total_s"] = time.perf_counter() - start
        return Outcome("infeasible", str(exc), sample=sample, timings=timings, eval_id=req.eval_id)
    except (RejectedEngineArgsError, PlannerConfigError, SpicaError) as exc:
        timings["total_s"] = time.perf_counter() - start
        return Outcome("failed", str(exc), sample=sample, timings=timings, eval_id=req.eval_id)
    except Exception as exc:  # noqa: BLE001 - a candidate-build bug must not stop a sweep
        timings["total_s"] = time.perf_counter() - start
        return Outcome("failed", f"candidate build error: {type(exc).__name__}: {exc}", sample=sample,
                       timings=timings, eval_id=req.eval_id)
    timings["prepare_s"] = time.perf_counter() - start
    try:
        result = run_replay(spec)
    except Exception as exc:  # noqa: BLE001 - replay errors are candidate outcomes
        timings["total_s"] = time.perf_counter() - start
        return Outcome("failed", f"replay error: {type(exc).__name__}: {exc}", sample=sample, timings=timings,
                       eval_id=req.eval_id)
    timings["replay_s"] = float(result["replay_seconds"])
    t2 = time.perf_counter()
    report = result["summary"]
    planner = {}
    if policy is not None:
        planner = {"ticks": policy.ticks, "decisions": list(policy.decisions),
                   "lifecycle_operations": len(result["lifecycle_operations"])}
    try:
        score = score_report(req.goal, report)
    except GoodputContractError as exc:
        timings["total_s"] = time.perf_counter() - start
        return Outcome("failed", str(exc), metrics=candidate_metrics(report), sample=sample, timings=timings,
                       report=report, planner=planner, eval_id=req.eval_id)
    objectives = objective_vector(req.goal, report) if req.goal.is_pareto else None
    timings["score_s"] = time.perf_counter() - t2
    timings["total_s"] = time.perf_counter() - start
    return Outcome("feasible", "", metrics=candidate_metrics(report), score=score, objectives=objectives,
                   sample=sample, timings=timings, report=report, planner=planner,
                   per_request=result.get("per_request"), eval_id=req.eval_id)


# ---------------------------------------------------------------- worker processes


def _worker_main(conn: Connection) -> None:
    """Worker loop: import the engines once, then evaluate requests until told to stop."""
    os.environ.setdefault("DYN_LOG", "error")
    import dynamo._core  # noqa: F401 - warm the runtime before the first deadline starts

    from spica_core.evaluate import engine_args, replay  # noqa: F401
    from spica_core.planner import policy  # noqa: F401

    conn.send(("ready", os.getpid()))
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return
        if msg is None:
            return
        _sent_at, req = msg
        try:
            out = evaluate_one(req)
        except Exception as exc:  # noqa: BLE001
            out = Outcome("failed", f"worker error: {type(exc).__name__}: {exc}\n{traceback.format_exc(limit=3)}",
                          sample=dict(req.sample), eval_id=req.eval_id)
        conn.send(out)


class _Worker:
    def __init__(self, ctx: Any):
        parent, child = ctx.Pipe(duplex=True)
        self.conn: Connection = parent
        self.proc = ctx.Process(target=_worker_main, args=(child,), daemon=True)
        self.proc.start()
        child.close()
        self.ready = False

    def wait_ready(self, timeout: float) -> bool:
        if self.ready:
            return True
        if self.conn.poll(timeout):
            try:
                tag, _pid = self.conn.recv()
                self.ready = tag == "ready"
            except (EOFError, OSError):
                self.ready = False
        return self.ready

    def kill(self) -> None:
        try:
            self.conn.close()
        except OSError:
            pass
        if self.proc.is_alive():
            self.proc.terminate()
            self.proc.join(2.0)
            if self.proc.is_alive():
                self.proc.kill()
        self.proc.join(1.0)


class EvalPool:
    """Spawned worker processes evaluating batches in waves with a hard per-wave deadline.

    A wave submits at most ``workers`` requests, so queued work never eats a candidate's time. At
    the deadline (wave start + ``max_eval_seconds``) an unfinished candidate is infeasible ("exceed
    runtime"), and its worker is terminated and replaced; a worker that dies (a native crash) makes
    its candidate failed. Use as a context manager, under ``if __name__ == "__main__":`` in scripts.
    """

    START_TIMEOUT_S = 120.0

    def __init__(self, workers: int, max_eval_seconds: float | None = 600.0):
        if workers < 1:
            raise ValueError("workers must be >= 1")
        self.workers = workers
        self.max_eval_seconds = max_eval_seconds
        self._ctx = mp.get_context("spawn")
        self._pool: list[_Worker] = []
        self.restarts = 0

    def __enter__(self) -> EvalPool:
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def start(self) -> None:
        while len(self._pool) < self.workers:
            self._pool.append(_Worker(self._ctx))
        for w in self._pool:
            if not w.wait_ready(self.START_TIMEOUT_S):
                raise SpicaError("an evaluation worker process failed to start; scripts that evaluate in parallel "
                                 "must guard their entry point with `if __name__ == \"__main__\":`, or set "
                                 "sweep.parallel_evals: 1")

    def close(self) -> None:
        for w in self._pool:
            try:
                w.conn.send(None)
            except (OSError, BrokenPipeError):
                pass
        for w in self._pool:
            w.proc.join(2.0)
            w.kill()
        self._pool = []

    def _replace(self, i: int) -> None:
        self._pool[i].kill()
        self._pool[i] = _Worker(self._ctx)
        self.restarts += 1

    def evaluate_batch(self, requests: Sequence[EvalRequest]) -> list[Outcome]:
        """Outcomes in request order."""
        if not self._pool:
            self.start()
        out: list[Outcome] = []
        for i in range(0, len(requests), self.workers):
            out.extend(self._wave(requests[i:i + self.workers]))
        return out

    def _wave(self, wave: Sequence[EvalRequest]) -> list[Outcome]:
        for w in self._pool:
            if not w.wait_ready(self.START_TIMEOUT_S):
                raise SpicaError("an evaluation worker process failed to start")
        results: dict[int, Outcome] = {}
        start = time.perf_counter()
        pending: dict[Connection, int] = {}
        for i, req in enumerate(wave):
            w = self._pool[i]
            try:
                w.conn.send((time.perf_counter(), req))
                pending[w.conn] = i
            except (OSError, BrokenPipeError) as exc:
                results[i] = Outcome("failed", f"worker unavailable: {exc}", sample=dict(req.sample),
                                     eval_id=req.eval_id)
        deadline = None if self.max_eval_seconds is None else start + float(self.max_eval_seconds)
        while pending:
            timeout = None if deadline is None else max(0.0, deadline - time.perf_counter())
            ready = wait(list(pending), timeout=timeout)
            if not ready:
                break
            for conn in ready:
                i = pending.pop(conn)  # type: ignore[arg-type]
                try:
                    outcome = conn.recv()  # type: ignore[union-attr]
                    outcome.timings["wall_s"] = time.perf_counter() - start
                    results[i] = outcome
                except (EOFError, OSError):
                    code = self._pool[i].proc.exitcode
                    self._pool[i].proc.join(1.0)
                    code = self._pool[i].proc.exitcode if code is None else code
                    results[i] = Outcome("failed", f"worker crashed (exit code {code}) while evaluating",
                                         sample=dict(wave[i].sample), eval_id=wave[i].eval_id)
                    self._replace(i)
        for conn, i in pending.items():
            results[i] = Outcome("infeasible", f"exceed runtime: replay > {self.max_eval_seconds:g}s",
                                 sample=dict(wave[i].sample), timings={"wall_s": time.perf_counter() - start},
                                 eval_id=wave[i].eval_id)
            self._replace(i)
        return [results[i] for i in range(len(wave))]


class SequentialEvaluator:
    """parallel_evals == 1: evaluate in this process, one after another (no hard deadline, §6.4)."""

    workers = 1

    def __enter__(self) -> SequentialEvaluator:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None

    def evaluate_batch(self, requests: Sequence[EvalRequest]) -> list[Outcome]:
        return [evaluate_one(r) for r in requests]


def make_evaluator(parallel_evals: int, max_eval_seconds: float | None) -> EvalPool | SequentialEvaluator:
    """The pool for parallel_evals > 1, else the in-process sequential path."""
    if parallel_evals <= 1:
        return SequentialEvaluator()
    return EvalPool(parallel_evals, max_eval_seconds)


def headline(outcome: Outcome) -> dict[str, Any]:
    """The numbers a person reads first: throughput, per GPU/user, latencies, goodput, hit rate, cost."""
    from spica_core.evaluate.scoring import avg_gpu

    r: Mapping[str, Any] = outcome.report
    out: dict[str, Any] = {}
    g = avg_gpu(r)
    keys = ("output_throughput_tok_s", "request_throughput_rps", "mean_output_token_throughput_per_user",
            "mean_ttft_ms", "p99_ttft_ms", "mean_itl_ms", "p99_itl_ms", "mean_e2e_latency_ms",
            "p99_e2e_latency_ms", "goodput_output_throughput_tok_s", "goodput_request_throughput_rps",
            "prefix_cache_reused_ratio", "gpu_hours", "duration_ms", "completed_requests", "num_requests",
            "planner_total_ticks")
    for k in keys:
        if r.get(k) is not None:
            out[k] = r[k]
    out["avg_gpus"] = g
    if g > 0 and r.get("output_throughput_tok_s") is not None:
        out["output_throughput_tok_s_per_gpu"] = float(r["output_throughput_tok_s"]) / g
    return out


__all__ = ["EvalRequest", "Outcome", "evaluate_one", "EvalPool", "SequentialEvaluator", "make_evaluator",
           "headline"]

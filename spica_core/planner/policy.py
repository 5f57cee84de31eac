"""The planner in the loop: a replay ``scaling_policy`` that decides replica counts like Dynamo's planner.

Dynamo's own planner cannot run here (it needs packages that are not installable), so this is a
re-implementation of its documented policy, driven through the
runtime's ``scaling_policy`` hook: ``initial_tick_ms()`` and
``on_tick(snapshot) -> {target_prefill, target_decode, next_tick_ms}``.

This module keeps the tick bookkeeping (FPM cache, pending traffic, in-flight targets, due loops)
and composes the loops: the load loop with its easy or sla rule (``load_rules``), the throughput
loop (``throughput``), both built on the sla estimates (``estimates``) and the GPU budget
(``budget``). docs/planner.md lists where this differs from Dynamo's planner.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from spica_core.deployment import Candidate
from spica_core.planner.budget import Budget, Pools
from spica_core.planner.estimates import Estimator, WorkerKey
from spica_core.planner.load_rules import EasyLoadRule, LoadLoop, SlaLoadRule
from spica_core.planner.settings import PlannerSettings, RoleCapability
from spica_core.planner.throughput import PredictorFactory, ThroughputLoop, default_predictor_factory

_TRAFFIC_SUMS = ("duration_s", "num_req")
_TRAFFIC_WEIGHTED = (("avg_isl", "shape_count"), ("avg_osl", "shape_count"), ("avg_ttft_ms", "ttft_count"),
                     ("avg_itl_ms", "itl_count"), ("avg_kv_hit_rate", "hit_rate_count"),
                     ("avg_accept_length", "accept_length_forward_count"))


def merge_traffic(a: Mapping[str, Any] | None, b: Mapping[str, Any]) -> dict[str, Any]:
    """Sum durations and arrivals; average the rest weighted by their counts."""
    if not a:
        return dict(b)
    out = dict(a)
    for key in _TRAFFIC_SUMS:
        out[key] = float(a.get(key) or 0) + float(b.get(key) or 0)
    for key, count in _TRAFFIC_WEIGHTED:
        ca, cb = float(a.get(count) or 0), float(b.get(count) or 0)
        va, vb = a.get(key), b.get(key)
        if ca + cb > 0 and (va is not None or vb is not None):
            out[key] = ((va or 0.0) * ca + (vb or 0.0) * cb) / (ca + cb)
        out[count] = ca + cb
    return out


class PlannerPolicy:
    """Replay scaling policy reproducing Dynamo's planner decisions (see the module docstring)."""

    def __init__(self, settings: PlannerSettings, roles: Mapping[str, RoleCapability],
                 predictor_factory: PredictorFactory | None = None):
        self.settings = settings
        # agg's single pool is the replay's "decode" role
        caps: dict[str, RoleCapability] = ({"decode": roles["agg"]} if settings.mode == "agg"
                                           else {"prefill": roles["prefill"], "decode": roles["decode"]})
        self.roles = tuple(caps)
        self.pools = Pools(Budget(settings.max_gpu_budget, settings.min_gpu_budget),
                           {r: cap.gpus_per_replica for r, cap in caps.items()}, settings.min_endpoint)
        self.estimator = Estimator(settings, caps)
        rule = (SlaLoadRule(settings, caps, self.estimator) if settings.optimization_target == "sla"
                else EasyLoadRule(settings, caps))
        self.load_loop = LoadLoop(rule, self.pools)
        self.throughput = (ThroughputLoop(settings, caps, self.estimator, self.pools,
                                          predictor_factory or default_predictor_factory)
                           if settings.enable_throughput_scaling else None)
        self.workers: dict[str, dict[WorkerKey, dict[str, Any]]] = {r: {} for r in self.roles}
        self.stored: dict[str, int | None] = {r: None for r in self.roles}  # targets asked for, not yet seen
        self.floor: dict[str, int] = {r: 1 for r in self.roles}  # hybrid: the throughput loop's lower bound
        self.last_load_t = 0.0
        self.last_tp_t = 0.0
        self.pending: dict[str, Any] | None = None  # traffic since a loop last consumed it
        self.ticks = 0
        self.decisions: list[dict[str, Any]] = []

    # ------------------------------------------------------------ hook protocol

    def initial_tick_ms(self) -> float:
        return 1000.0 * self.settings.scale_interval_s

    def on_tick(self, snap: Mapping[str, Any]) -> dict[str, Any]:
        s = self.settings
        self.ticks += 1
        now_ms = float(snap["now_ms"])
        now = now_ms / 1000.0
        next_tick = now_ms + 1000.0 * s.scale_interval_s
        ready, nd, busy = self._observe(snap)

        load_due = now - self.last_load_t >= s.load_interval_s - 1e-9
        if load_due:
            self.last_load_t = now
        tp_due = self.throughput is not None and now - self.last_tp_t >= s.throughput_interval_s - 1e-9
        if tp_due:
            self.last_tp_t = now
        if s.optimization_target == "sla" and load_due:
            self.estimator.observe_workers(self.workers)
            if self.throughput is None:
                if self.pending and float(self.pending.get("duration_s") or 0) > 0:
                    self.estimator.observe_traffic(self.pending)
                self.pending = None

        decision: dict[str, int] | None = None
        reason = ""
        if tp_due and self.throughput is not None:
            window, self.pending = self.pending, None
            targets = self.throughput.targets(window, ready)
            if targets is not None:
                if s.enable_load_scaling:
                    self.floor.update(targets)
                else:
                    decision, reason = self.pools.guard(ready, targets), "throughput"
        if s.enable_load_scaling and load_due:
            desired = self.load_loop.decide(ready, busy, self.workers,
                                            self.floor if self.throughput is not None else None)
            if desired is not None:
                decision, reason = desired, "load"

        final = dict(decision) if decision else dict(ready)
        if not any(busy.values()):
            for r in self.roles:
                if ready[r] < s.min_endpoint:
                    final[r] = s.min_endpoint
                    reason = reason or "min_endpoint"
            if not self.pools.in_band(ready):
                final = self.pools.clamp(ready)
                reason = reason or "gpu_budget"
        final = self.pools.clamp(final)
        if all(final[r] == ready[r] for r in self.roles) or all(final[r] == nd[r] for r in self.roles):
            return {"target_prefill": None, "target_decode": None, "next_tick_ms": next_tick}
        for r in self.roles:
            if final[r] != nd[r]:
                self.stored[r] = final[r]
        self.decisions.append({"t_s": now, "from": dict(ready), "to": dict(final), "reason": reason})
        return {"target_prefill": final.get("prefill") if s.mode == "disagg" else None,
                "target_decode": final["decode"], "next_tick_ms": next_tick}

    def _observe(self, snap: Mapping[str, Any]) -> tuple[dict[str, int], dict[str, int], dict[str, bool]]:
        """Ready and non-draining counts, whether a role is still moving to a target, and the FPM cache.

        A role is busy while its last target has not been reached; the FPM cache keeps each active
        (worker, rank)'s latest metrics and drops workers that left.
        """
        ready: dict[str, int] = {}
        nd: dict[str, int] = {}
        busy: dict[str, bool] = {}
        for r in self.roles:
            ready[r] = int(snap[f"active_{r}_count"])
            nd[r] = int(snap[f"non_draining_{r}_count"])
            st = self.stored[r]
            expected = st if st is not None else nd[r]
            busy[r] = expected != ready[r] or (st is not None and st != nd[r])
            if st is not None and st == nd[r]:
                self.stored[r] = None
            cache = self.workers[r]
            for f in snap.get(f"{r}_fpm_snapshots") or ():
                cache[(str(f["worker_id"]), int(f.get("dp_rank", 0)))] = dict(f)
            active = {str(i) for i in snap.get(f"active_{r}_ids") or ()}
            for key in [k for k in cache if k[0] not in active]:
                del cache[key]
        if snap.get("traffic"):
            self.pending = merge_traffic(self.pending, snap["traffic"])
        return ready, nd, busy


def make_policy(candidate: Candidate, roles: Mapping[str, Any], optimization_target: str, *,
                ttft_ms: float | None = None, itl_ms: float | None = None,
                predictor_factory: PredictorFactory | None = None) -> PlannerPolicy | None:
    """The candidate's scaling policy, or None for a static candidate."""
    settings = PlannerSettings.from_candidate(candidate, optimization_target, ttft_ms=ttft_ms, itl_ms=itl_ms)
    if settings is None:
        return None
    context = candidate.context.context_length
    if context is None:
        from spica_core.space.facts import model_facts
        context = model_facts(candidate.context.model_name).max_context
    caps = {role: RoleCapability.from_role_args(ra, context, candidate.context.aic_nextn) for role, ra in roles.items()}
    return PlannerPolicy(settings, caps, predictor_factory)


__all__ = ["PlannerPolicy", "make_policy", "merge_traffic"]

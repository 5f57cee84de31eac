"""What the sla planner estimates: forward-pass times and the "next request" TTFT/ITL.

The forward-pass-time model is the candidate's own aiconfigurator-core profile (the table the
simulator uses), so planner and simulator agree on step times.
"""
from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from typing import Any

from spica_core.space.profiles import StepTimes
from spica_core.planner.settings import PlannerSettings, RoleCapability

MAX_KV_HIT_RATE = 0.95

Fpm = Mapping[str, Any]              # one forward-pass-metrics snapshot of an engine rank
WorkerKey = tuple[str, int]          # (worker_id, dp_rank)
Workers = Mapping[WorkerKey, Fpm]    # the latest FPM of each engine rank of one role


class _MovingAverage:
    """Mean of the last n values, ignoring leading zeros until the first non-zero value."""

    def __init__(self, n: int):
        self.values: deque[float] = deque(maxlen=max(1, n))

    def add(self, v: float) -> None:
        if not self.values and v == 0:
            return
        self.values.append(float(v))

    @property
    def mean(self) -> float:
        return sum(self.values) / len(self.values) if self.values else 0.0


class PassModel:
    """f(scheduled batch) → ms from the AIC profile, 'ready' after load_min_observations busy FPMs.

    Dynamo's planner learns f online from live forward-pass metrics; ours already knows the curve
    (it is the simulator's own table) but keeps the planner's readiness rule so the cold start
    behaves the same.
    """

    def __init__(self, profile: str | None, min_observations: int, max_samples: int):
        self.steps = StepTimes(profile) if profile else None
        self.min_observations = max(0, int(min_observations))
        self.max_samples = int(max_samples)
        self.observations = 0

    def observe(self, fpm: Fpm) -> None:
        if float(fpm.get("wall_time") or 0.0) > 0:
            self.observations = min(self.observations + 1, self.max_samples)

    @property
    def ready(self) -> bool:
        return self.steps is not None and self.observations >= self.min_observations

    def __call__(self, prefill_tokens: float, decode_requests: float, decode_kv: float) -> float | None:
        if not self.ready:
            return None
        assert self.steps is not None
        return self.steps.pass_ms(prefill_tokens, decode_requests, decode_kv)


def metric(f: Fpm, key: str) -> float:
    """One FPM field as a float; the runtime leaves idle fields unset or None."""
    return float(f.get(key) or 0)


class Estimator:
    """Per-role pass models plus what the planner has seen of recent requests, KV hits and acceptance.

    Only an sla candidate's pass models get a profile; in easy mode they never become ready.
    """

    def __init__(self, settings: PlannerSettings, caps: Mapping[str, RoleCapability]):
        self.mode = settings.mode
        self.caps = dict(caps)
        profiled = settings.optimization_target == "sla"
        self.models = {r: PassModel(cap.profile if profiled else None, settings.load_min_observations,
                                    settings.max_num_fpm_samples) for r, cap in self.caps.items()}
        n = settings.max_num_fpm_samples
        self.avg_isl = _MovingAverage(n)
        self.avg_decode_len = _MovingAverage(n)
        self.avg_ptok = _MovingAverage(n)
        self.last_kv_hit = 0.0
        self.last_accept = 1.0
        self.nextn = max(c.nextn for c in self.caps.values())

    def ready(self, role: str) -> bool:
        return self.models[role].ready

    def observe_workers(self, workers: Mapping[str, Workers]) -> None:
        """Feed the cached FPMs of every role to the pass models and the 'next request' moving averages."""
        for r, fpms in workers.items():
            for f in fpms.values():
                self.models[r].observe(f)
        for r, fpms in workers.items():
            for f in fpms.values():
                npf = metric(f, "num_prefill_requests")
                if r == "prefill" or self.mode == "agg":
                    self.avg_isl.add(metric(f, "sum_prefill_tokens") / npf if npf > 0 else 0.0)
                nd = metric(f, "num_decode_requests")
                if nd > 0:
                    self.avg_decode_len.add(metric(f, "sum_decode_kv_tokens") / nd)
            if self.mode == "agg":
                # one typical-mix observation per worker iteration: its heaviest attention-DP rank
                heaviest: dict[str, Fpm] = {}
                for (wid, _dp), f in sorted(fpms.items()):
                    cur = heaviest.get(wid)
                    if cur is None or metric(f, "sum_prefill_tokens") > metric(cur, "sum_prefill_tokens"):
                        heaviest[wid] = f
                for f in heaviest.values():
                    self.avg_ptok.add(metric(f, "sum_prefill_tokens"))

    def observe_traffic(self, window: Mapping[str, Any]) -> None:
        """Take the KV hit rate and speculative accept length of a traffic window with a duration."""
        self.last_kv_hit = float(window.get("avg_kv_hit_rate") or 0.0)
        acc = window.get("avg_accept_length")
        self.last_accept = float(acc) if acc else 1.0

    def kv_hit(self) -> float:
        return min(max(self.last_kv_hit or 0.0, 0.0), MAX_KV_HIT_RATE)

    def accept(self) -> float:
        """Tokens per decode pass: the accept length, capped by the speculative depth (1 without MTP)."""
        return min(max(self.last_accept, 1.0), self.nextn + 1.0) if self.nextn > 0 else 1.0

    def ttft(self, role: str, f: Fpm, queue_scale: float, decode_scale: float,
             with_queued_decode: bool) -> float | None:
        """TTFT of one more request on this engine, its queue and (agg) decode load scaled; None: model not ready."""
        model = self.models[role]
        M = self.caps[role].max_num_batched_tokens
        isl = self.avg_isl.mean
        extra_tok = isl if isl > 0 else 0.0
        Q = math.ceil((metric(f, "sum_queued_prefill_tokens") * queue_scale + extra_tok) * (1 - self.kv_hit()))
        if self.mode == "agg":
            D = math.ceil((metric(f, "sum_decode_kv_tokens")
                           + (metric(f, "sum_queued_decode_kv_tokens") if with_queued_decode else 0)) * decode_scale)
            Nd = math.ceil((metric(f, "num_decode_requests")
                            + (metric(f, "num_queued_decode") if with_queued_decode else 0)) * decode_scale)
        else:
            D = Nd = 0
        if Q <= 0:
            return 0.0
        chunks = [M] * (Q // M) + ([Q % M] if Q % M else [])
        total = 0.0
        for c in chunks:
            t = model(c, Nd, D)
            if t is None:
                return None
            total += t
        return total

    def itl(self, role: str, f: Fpm, decode_scale: float, with_queued_prefill: bool) -> float | None:
        """ITL of one more request on this engine with its decode load scaled; None: model not ready."""
        dl = self.avg_decode_len.mean
        extra_req, extra_kv = (1, dl) if dl > 0 else (0, 0.0)
        reqs = metric(f, "num_decode_requests") + metric(f, "num_queued_decode")
        kv = metric(f, "sum_decode_kv_tokens") + metric(f, "sum_queued_decode_kv_tokens")
        if with_queued_prefill:
            reqs += metric(f, "num_queued_prefill")
            kv += metric(f, "sum_queued_prefill_tokens")
        n_req = math.ceil(reqs * decode_scale + extra_req)
        n_kv = math.ceil(kv * decode_scale + extra_kv)
        ptok = 0
        if self.mode == "agg":
            ptok = math.ceil(self.avg_ptok.mean)
        t = self.models[role](ptok, n_req, n_kv)
        return None if t is None else t / self.accept()


__all__ = ["PassModel", "Estimator", "Fpm", "Workers", "WorkerKey", "metric", "MAX_KV_HIT_RATE"]

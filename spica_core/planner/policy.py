"""The planner in the loop: a replay ``scaling_policy`` that decides replica counts like Dynamo's planner.

Dynamo's own planner cannot run here (it needs packages that are not installable), so this is a
re-implementation of its documented policy (spec/planner.md, reference §9.5), driven through the
runtime's ``scaling_policy`` hook (replay-engine §8.1): ``initial_tick_ms()`` and
``on_tick(snapshot) -> {target_prefill, target_decode, next_tick_ms}``.

Two families, chosen by the goal's planner ``optimization_target`` (§4.6):

* easy mode (``throughput`` / ``latency``): reactive ±1 per load tick from the latest per-worker
  forward-pass metrics (queued prefill tokens, KV utilisation) against fixed thresholds;
* ``sla`` mode: a load loop that predicts TTFT/ITL of "the next request" on every engine with a
  forward-pass-time model and compares with the SLA (scale-down gated by the candidate's
  ``load_scaling_down_sensitivity``, readiness by ``load_min_observations``), and a throughput loop
  that forecasts the next interval with the candidate's load predictor and sizes the pools from
  per-engine capacity at the SLA.

The forward-pass-time model is the candidate's own aiconfigurator-core profile (the table the
simulator uses), so planner and simulator agree on step times. docs/planner.md lists where this
differs from Dynamo's planner.
"""
from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from spica_core.errors import PlannerConfigError
from spica_core.evaluate.profiles import StepTimes

MAX_THROUGHPUT_SCALING_REPLICAS = 8
MAX_KV_HIT_RATE = 0.95
_NOT_READY = object()  # an sla role whose pass model has not seen load_min_observations busy passes



class Predictor(Protocol):
    def add_data_point(self, value: float) -> None: ...
    def predict_next(self) -> float: ...


PredictorFactory = Callable[[Mapping[str, Any], float], Predictor]


# ---------------------------------------------------------------- settings


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
    predictor: dict[str, Any] = field(default_factory=lambda: {"load_predictor": "constant",
                                                               "load_predictor_log1p": False})

    @property
    def scale_interval_s(self) -> float:
        """gcd (ms resolution) of the load interval and, for sla throughput scaling, the throughput interval."""
        load_ms = int(round(self.load_interval_s * 1000))
        if self.enable_throughput_scaling and self.optimization_target == "sla":
            return math.gcd(load_ms, int(round(self.throughput_interval_s * 1000))) / 1000.0
        return load_ms / 1000.0

    @classmethod
    def from_sample(cls, sample: Mapping[str, Any], optimization_target: str, *, ttft_ms: float | None = None,
                    itl_ms: float | None = None) -> PlannerSettings | None:
        """None for a static candidate (both scaling flags off); PlannerConfigError for invalid fields."""
        load_on = bool(sample.get("enable_load_scaling"))
        tp_on = bool(sample.get("enable_throughput_scaling"))
        if not (load_on or tp_on):
            return None
        if optimization_target not in ("throughput", "latency", "sla"):
            raise PlannerConfigError(f"planner optimization_target {optimization_target!r} is not supported "
                                     "(throughput, latency, sla)")
        if optimization_target != "sla":  # PlannerConfig: easy mode forces load on, throughput off
            load_on, tp_on = True, False
        load_iv = sample.get("load_adjustment_interval_seconds") or 5
        tp_iv = sample.get("throughput_adjustment_interval_seconds") or 180
        bucket = int(sample.get("fpm_sample_bucket_size") or 16)
        sens = int(sample.get("load_scaling_down_sensitivity", 80))
        problems = []
        if load_iv <= 0 or (tp_on and tp_iv <= 0):
            problems.append("adjustment intervals must be > 0")
        if load_on and tp_on and not load_iv < tp_iv:
            problems.append("load_adjustment_interval_seconds must be shorter than the throughput interval")
        if math.isqrt(bucket) ** 2 != bucket:
            problems.append(f"fpm_sample_bucket_size {bucket} must be a perfect square")
        if not 0 <= sens <= 100:
            problems.append("load_scaling_down_sensitivity must be within 0..100")
        if int(sample.get("max_num_fpm_samples") or 64) <= 0:
            problems.append("max_num_fpm_samples must be > 0")
        if optimization_target == "sla" and (ttft_ms is None or itl_ms is None):
            problems.append("the sla target needs both ttft_ms and itl_ms")
        if problems:
            raise PlannerConfigError("invalid planner configuration: " + "; ".join(problems))
        pred = {k: sample[k] for k in ("load_predictor", "load_predictor_log1p", "prophet_window_size",
                                        "kalman_q_level", "kalman_q_trend", "kalman_r", "kalman_min_points")
                if k in sample}
        if "load_predictor" not in pred:
            pred = {"load_predictor": "constant", "load_predictor_log1p": False}
        return cls(
            mode=sample["deployment_mode"], optimization_target=optimization_target,
            enable_load_scaling=load_on, enable_throughput_scaling=tp_on,
            load_interval_s=float(load_iv), throughput_interval_s=float(tp_iv),
            max_num_fpm_samples=int(sample.get("max_num_fpm_samples") or 64), fpm_sample_bucket_size=bucket,
            load_scaling_down_sensitivity=sens, load_min_observations=int(sample.get("load_min_observations", 5)),
            ttft_ms=float(ttft_ms if ttft_ms is not None else 500.0),
            itl_ms=float(itl_ms if itl_ms is not None else 50.0),
            max_gpu_budget=int(sample.get("gpu_budget") or -1),
            min_gpu_budget=int(sample["min_gpu_budget"]) if sample.get("min_gpu_budget") else -1,
            min_endpoint=int(sample["min_endpoint"]) if sample.get("min_endpoint") else 1,
            predictor=pred,
        )


@dataclass(frozen=True)
class RoleCapability:
    """What the planner knows about one role's engines (replay planner §1.2)."""

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


# ---------------------------------------------------------------- forward-pass-time model (sla mode)


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

    def observe(self, fpm: Mapping[str, Any]) -> None:
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


# ---------------------------------------------------------------- budgets (planner §2.5)


@dataclass(frozen=True)
class Budget:
    hi: int   # max_gpu_budget; < 0 disables
    lo: int   # min_gpu_budget; < 0 disables

    def in_band(self, total: int, tol: int) -> bool:
        if self.hi >= 0 and total > self.hi:
            return False
        if self.lo >= 0 and total < self.lo - (tol if self.hi >= 0 else 0):
            return False
        return True

    def clamp1(self, x: int, g: int, min_ep: int) -> int:
        if self.in_band(x * g, g):
            return x
        if self.hi >= 0 and x * g > self.hi:
            return 0 if min_ep * g > self.hi else max(min_ep, self.hi // g)
        return max(min_ep, -(-self.lo // g))

    def guard1(self, cur: int, proposal: int, g: int, min_ep: int) -> int:
        """Single-pool guard: reconcile out-of-band, hold at the edges, never reverse a direction."""
        if not self.in_band(cur * g, g):
            return self.clamp1(cur, g, min_ep)
        if self.lo >= 0 and cur * g <= self.lo and proposal < cur:
            return cur
        if self.hi >= 0 and cur * g >= self.hi and proposal > cur:
            return cur
        c = self.clamp1(proposal, g, min_ep)
        return c if min(cur, proposal) <= c <= max(cur, proposal) else cur

    def clamp2(self, p: int, d: int, gp: int, gd: int, pmin: int, dmin: int) -> tuple[int, int]:
        total = p * gp + d * gd
        tol = max(gp, gd)
        if self.in_band(total, tol):
            return p, d
        if self.hi >= 0 and total > self.hi:
            p2 = max(pmin, min((self.hi - dmin * gd) // gp, (p * self.hi) // max(total, 1)))
            d2 = max(dmin, (self.hi - p2 * gp) // gd)
            return p2, d2
        factor = self.lo / max(total, 1)
        p2, d2 = max(p, math.ceil(p * factor)), max(d, math.ceil(d * factor))
        while p2 * gp + d2 * gd < self.lo - tol:
            d2 += 1
        return p2, d2

    def guard2(self, cur: tuple[int, int], prop: tuple[int, int], g: tuple[int, int],
               mins: tuple[int, int]) -> tuple[int, int]:
        """Pair guard (disagg): reconcile, hold at the edges, fit an opposing rebalance, never reverse."""
        gp, gd = g
        tot = cur[0] * gp + cur[1] * gd
        tol = max(gp, gd)
        if not self.in_band(tot, tol):
            return self.clamp2(cur[0], cur[1], gp, gd, *mins)
        ups = [prop[i] > cur[i] for i in range(2)]
        downs = [prop[i] < cur[i] for i in range(2)]
        if self.lo >= 0 and tot <= self.lo and any(downs) and not any(ups):
            return cur
        if self.hi >= 0 and tot >= self.hi and any(ups):
            if not any(downs):
                return cur
            # opposing rebalance at the ceiling: shrink the growing role until it fits
            p, d = prop
            while p * gp + d * gd > self.hi and (p > cur[0] or d > cur[1]):
                if p > cur[0]:
                    p -= 1
                else:
                    d -= 1
            return (p, d) if p * gp + d * gd <= self.hi else cur
        c = self.clamp2(prop[0], prop[1], gp, gd, *mins)
        for i in range(2):
            if not min(cur[i], prop[i]) <= c[i] <= max(cur[i], prop[i]):
                return cur
        return c if self.in_band(c[0] * gp + c[1] * gd, tol) else cur

    def fit_ceiling1(self, cur: int, x: int, g: int) -> int:
        """Throughput proposals: only the ceiling applies, direction-preserving."""
        if self.hi < 0 or x * g <= self.hi or x <= cur:
            return x
        return max(cur, self.hi // g)

    def fit_ceiling2(self, cur: tuple[int, int], prop: tuple[int, int], g: tuple[int, int]) -> tuple[int, int]:
        if self.hi < 0:
            return prop
        p, d = prop
        while p * g[0] + d * g[1] > self.hi and (p > cur[0] or d > cur[1]):
            if p > cur[0] and (p - cur[0]) * g[0] >= (d - cur[1]) * g[1]:
                p -= 1
            elif d > cur[1]:
                d -= 1
            else:
                p -= 1
        return p, d


# ---------------------------------------------------------------- the policy


def _default_predictor_factory(fields: Mapping[str, Any], interval_s: float) -> Predictor:
    from spica_core.predictors.subsweep import make_predictor

    return make_predictor(dict(fields), interval_s)


_TRAFFIC_SUMS = ("duration_s", "num_req")
_TRAFFIC_WEIGHTED = (("avg_isl", "shape_count"), ("avg_osl", "shape_count"), ("avg_ttft_ms", "ttft_count"),
                     ("avg_itl_ms", "itl_count"), ("avg_kv_hit_rate", "hit_rate_count"),
                     ("avg_accept_length", "accept_length_forward_count"))


def merge_traffic(a: Mapping[str, Any] | None, b: Mapping[str, Any]) -> dict[str, Any]:
    """Sum durations and arrivals; average the rest weighted by their counts (planner §3.1)."""
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
        self.s = settings
        # agg's single pool is the replay's "decode" role
        self.caps: dict[str, RoleCapability] = ({"decode": roles["agg"]} if settings.mode == "agg"
                                                else {"prefill": roles["prefill"], "decode": roles["decode"]})
        self.roles = tuple(self.caps)
        self.cache: dict[str, dict[tuple[str, int], dict[str, Any]]] = {r: {} for r in self.roles}
        self.stored: dict[str, int | None] = {r: None for r in self.roles}
        self.floor: dict[str, int] = {r: 1 for r in self.roles}
        self.last_load_t = 0.0
        self.last_tp_t = 0.0
        self.pending: dict[str, Any] | None = None
        self.last_kv_hit = 0.0
        self.last_accept = 1.0
        self.last_isl = 0.0
        self.last_osl = 0.0
        self.seen_traffic = False
        self.ticks = 0
        self.decisions: list[dict[str, Any]] = []
        sla = settings.optimization_target == "sla"
        self.models = {r: PassModel(self.caps[r].profile if sla else None, settings.load_min_observations,
                                    settings.max_num_fpm_samples) for r in self.roles}
        n = settings.max_num_fpm_samples
        self.avg_isl = _MovingAverage(n)
        self.avg_decode_len = _MovingAverage(n)
        self.avg_npf = _MovingAverage(n)
        self.avg_ptok = _MovingAverage(n)
        factory = predictor_factory or _default_predictor_factory
        self.predictors = None
        if settings.enable_throughput_scaling:
            self.predictors = {k: factory(settings.predictor, settings.throughput_interval_s)
                               for k in ("num_req", "isl", "osl")}

    # ------------------------------------------------------------ hook protocol

    def initial_tick_ms(self) -> float:
        return 1000.0 * self.s.scale_interval_s

    def on_tick(self, snap: Mapping[str, Any]) -> dict[str, Any]:
        self.ticks += 1
        now_ms = float(snap["now_ms"])
        now = now_ms / 1000.0
        next_tick = now_ms + 1000.0 * self.s.scale_interval_s
        ready, nd, busy = {}, {}, {}
        for r in self.roles:
            ready[r] = int(snap[f"active_{r}_count"])
            nd[r] = int(snap[f"non_draining_{r}_count"])
            st = self.stored[r]
            expected = st if st is not None else nd[r]
            busy[r] = expected != ready[r] or (st is not None and st != nd[r])
            if st is not None and st == nd[r]:
                self.stored[r] = None
            cache = self.cache[r]
            for f in snap.get(f"{r}_fpm_snapshots") or ():
                cache[(str(f["worker_id"]), int(f.get("dp_rank", 0)))] = dict(f)
            active = {str(i) for i in snap.get(f"active_{r}_ids") or ()}
            for key in [k for k in cache if k[0] not in active]:
                del cache[key]
        if snap.get("traffic"):
            self.pending = merge_traffic(self.pending, snap["traffic"])

        load_due = now - self.last_load_t >= self.s.load_interval_s - 1e-9
        if load_due:
            self.last_load_t = now
        tp_due = self.s.enable_throughput_scaling and now - self.last_tp_t >= self.s.throughput_interval_s - 1e-9
        if tp_due:
            self.last_tp_t = now
        sla = self.s.optimization_target == "sla"
        if sla and load_due:
            self._feed_models()
            if not self.s.enable_throughput_scaling:
                self._consume_traffic_for_hits()

        decision: dict[str, int] | None = None
        reason = ""
        if tp_due:
            targets = self._throughput_targets(ready)
            if targets is not None:
                if self.s.enable_load_scaling:
                    self.floor.update(targets)
                else:
                    decision, reason = self._guard(ready, targets), "throughput"
        if self.s.enable_load_scaling and load_due:
            desired = self._load_decision(ready, busy)
            if desired is not None:
                decision, reason = desired, "load"

        final = dict(decision) if decision else dict(ready)
        if not any(busy.values()):
            for r in self.roles:
                if ready[r] < self._min_ep(r):
                    final[r] = self._min_ep(r)
                    reason = reason or "min_endpoint"
            if not self._in_band(ready):
                final = self._clamp(ready)
                reason = reason or "gpu_budget"
        final = self._clamp(final)
        if all(final[r] == ready[r] for r in self.roles) or all(final[r] == nd[r] for r in self.roles):
            return {"target_prefill": None, "target_decode": None, "next_tick_ms": next_tick}
        for r in self.roles:
            if final[r] != nd[r]:
                self.stored[r] = final[r]
        self.decisions.append({"t_s": now, "from": dict(ready), "to": dict(final), "reason": reason})
        return {"target_prefill": final.get("prefill") if self.s.mode == "disagg" else None,
                "target_decode": final["decode"], "next_tick_ms": next_tick}

    # ------------------------------------------------------------ helpers

    def _min_ep(self, role: str) -> int:
        return self.s.min_endpoint

    @property
    def _budget(self) -> Budget:
        return Budget(self.s.max_gpu_budget, self.s.min_gpu_budget)

    def _in_band(self, counts: Mapping[str, int]) -> bool:
        total = sum(counts[r] * self.caps[r].gpus_per_replica for r in self.roles)
        tol = max(self.caps[r].gpus_per_replica for r in self.roles)
        return self._budget.in_band(total, tol)

    def _clamp(self, counts: Mapping[str, int]) -> dict[str, int]:
        b = self._budget
        if self.s.mode == "agg":
            return {"decode": b.clamp1(counts["decode"], self.caps["decode"].gpus_per_replica, self._min_ep("decode"))}
        p, d = b.clamp2(counts["prefill"], counts["decode"], self.caps["prefill"].gpus_per_replica,
                        self.caps["decode"].gpus_per_replica, self._min_ep("prefill"), self._min_ep("decode"))
        return {"prefill": p, "decode": d}

    def _guard(self, ready: Mapping[str, int], proposal: Mapping[str, int]) -> dict[str, int]:
        b = self._budget
        if self.s.mode == "agg":
            return {"decode": b.guard1(ready["decode"], proposal["decode"], self.caps["decode"].gpus_per_replica,
                                       self._min_ep("decode"))}
        p, d = b.guard2((ready["prefill"], ready["decode"]), (proposal["prefill"], proposal["decode"]),
                        (self.caps["prefill"].gpus_per_replica, self.caps["decode"].gpus_per_replica),
                        (self._min_ep("prefill"), self._min_ep("decode")))
        return {"prefill": p, "decode": d}

    def _feed_models(self) -> None:
        """sla: feed cached FPMs to the pass models and the 'next request' moving averages."""
        for r in self.roles:
            for f in self.cache[r].values():
                self.models[r].observe(f)
        for r in self.roles:
            entries = list(self.cache[r].values())
            for f in entries:
                npf = float(f.get("num_prefill_requests") or 0)
                if r == "prefill" or self.s.mode == "agg":
                    self.avg_isl.add(float(f.get("sum_prefill_tokens") or 0) / npf if npf > 0 else 0.0)
                nd = float(f.get("num_decode_requests") or 0)
                if nd > 0:
                    self.avg_decode_len.add(float(f.get("sum_decode_kv_tokens") or 0) / nd)
            if self.s.mode == "agg":
                # one typical-mix observation per worker iteration: its heaviest attention-DP rank
                heaviest: dict[str, Mapping[str, Any]] = {}
                for (wid, _dp), f in sorted(self.cache[r].items()):
                    cur = heaviest.get(wid)
                    if cur is None or float(f.get("sum_prefill_tokens") or 0) > float(cur.get("sum_prefill_tokens") or 0):
                        heaviest[wid] = f
                for f in heaviest.values():
                    self.avg_npf.add(float(f.get("num_prefill_requests") or 0))
                    self.avg_ptok.add(float(f.get("sum_prefill_tokens") or 0))

    def _consume_traffic_for_hits(self) -> None:
        if self.pending and float(self.pending.get("duration_s") or 0) > 0:
            self.last_kv_hit = float(self.pending.get("avg_kv_hit_rate") or 0.0)
            acc = self.pending.get("avg_accept_length")
            self.last_accept = float(acc) if acc else 1.0
        self.pending = None

    def _acc(self) -> float:
        nextn = max(c.nextn for c in self.caps.values())
        return min(max(self.last_accept, 1.0), nextn + 1.0) if nextn > 0 else 1.0

    # ------------------------------------------------------------ load loop (planner §2)

    def _load_decision(self, ready: Mapping[str, int], busy: Mapping[str, bool]) -> dict[str, int] | None:
        if any(busy.values()):
            return None  # agg: its pool is starting; disagg: either role blocks both
        if all(not self.cache[r] for r in self.roles):
            return None
        opinions: dict[str, int | None] = {}
        for r in self.roles:
            if not self.cache[r]:
                opinions[r] = None
                continue
            if not self._coverage_ok(r, ready[r]):
                if self.s.mode == "agg":
                    return None
                opinions[r] = None
                continue
            if self.s.optimization_target == "sla":
                op = self._sla_opinion(r, ready[r])
                if op is _NOT_READY:
                    if self.s.mode == "agg":
                        return None
                    op = None
                opinions[r] = op
            else:
                opinions[r] = self._easy_opinion(r, ready[r])
        tp = self.s.enable_throughput_scaling
        if self.s.mode == "agg":
            want = opinions["decode"]
            if want is None:
                return None
            want = max(want, self._min_ep("decode"))
            if tp:
                want = max(want, self.floor["decode"])
            return self._guard(ready, {"decode": want})
        want2 = {}
        for r in self.roles:
            v = opinions[r] if opinions[r] is not None else ready[r]
            if tp:
                v = max(v, self.floor[r])
            want2[r] = max(v, self._min_ep(r))
        if all(want2[r] == ready[r] for r in self.roles):
            return None
        if tp:
            p, d = self._budget.fit_ceiling2((ready["prefill"], ready["decode"]), (want2["prefill"], want2["decode"]),
                                             (self.caps["prefill"].gpus_per_replica,
                                              self.caps["decode"].gpus_per_replica))
            want2 = {"prefill": p, "decode": d}
        return self._guard(ready, want2)

    def _coverage_ok(self, role: str, n_ready: int) -> bool:
        keys = list(self.cache[role])
        workers: dict[str, int] = {}
        for w, _dp in keys:
            workers[w] = workers.get(w, 0) + 1
        if len(workers) != n_ready:
            return False
        counts = set(workers.values())
        return len(counts) == 1 and len(keys) == n_ready * next(iter(counts))

    def _easy_opinion(self, role: str, n: int) -> int | None:
        """Easy mode (throughput / latency): ±1 on static thresholds, every (worker, rank) separately."""
        cap = self.caps[role]
        target = self.s.optimization_target
        entries = list(self.cache[role].values())
        if n == 0:
            return None
        if role == "prefill":
            if not cap.context_length:
                return None
            vals = [float(f.get("sum_queued_prefill_tokens") or 0) / cap.context_length for f in entries]
            up_t, down_t = (1.0, 0.1) if target == "throughput" else (0.1, 0.0)
            up = any(v >= up_t for v in vals)
            down = all(v < down_t for v in vals) if target == "throughput" else all(v <= down_t for v in vals)
        else:
            if cap.max_kv_tokens <= 0:
                return None
            agg = self.s.mode == "agg"
            vals = [(float(f.get("sum_decode_kv_tokens") or 0) + float(f.get("sum_queued_decode_kv_tokens") or 0)
                     + (float(f.get("sum_queued_prefill_tokens") or 0) if agg else 0.0)) / cap.max_kv_tokens
                    for f in entries]
            up_t, down_t = (1.0, 0.6) if target == "throughput" else (0.4, 0.1)
            up = any(v > up_t for v in vals)
            down = all(v < down_t for v in vals)
        if up:
            return n + 1
        if n > 1 and down:
            d = max(n - 1, self._min_ep(role))
            if 0 < d < n and max(vals) * n / d >= up_t:
                return n
            return d
        return None

    # sla-mode estimates (planner §2.3)

    def _hit(self) -> float:
        return min(max(self.last_kv_hit or 0.0, 0.0), MAX_KV_HIT_RATE)

    def _ttft(self, role: str, f: Mapping[str, Any], qs: float, ds: float, incl: bool) -> float | None:
        model = self.models[role]
        M = self.caps[role].max_num_batched_tokens
        isl = self.avg_isl.mean
        extra_tok, extra_req = (isl, 1) if isl > 0 else (0.0, 0)
        Q = math.ceil((float(f.get("sum_queued_prefill_tokens") or 0) * qs + extra_tok) * (1 - self._hit()))
        R = math.ceil(float(f.get("num_queued_prefill") or 0) * qs + extra_req)
        if self.s.mode == "agg":
            D = math.ceil((float(f.get("sum_decode_kv_tokens") or 0)
                           + (float(f.get("sum_queued_decode_kv_tokens") or 0) if incl else 0)) * ds)
            Nd = math.ceil((float(f.get("num_decode_requests") or 0)
                            + (float(f.get("num_queued_decode") or 0) if incl else 0)) * ds)
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
        del R  # requests per chunk do not change a whole-pass table lookup
        return total

    def _itl(self, role: str, f: Mapping[str, Any], ds: float, qp: bool) -> float | None:
        dl = self.avg_decode_len.mean
        extra_req, extra_kv = (1, dl) if dl > 0 else (0, 0.0)
        reqs = float(f.get("num_decode_requests") or 0) + float(f.get("num_queued_decode") or 0)
        kv = float(f.get("sum_decode_kv_tokens") or 0) + float(f.get("sum_queued_decode_kv_tokens") or 0)
        if qp:
            reqs += float(f.get("num_queued_prefill") or 0)
            kv += float(f.get("sum_queued_prefill_tokens") or 0)
        n_req = math.ceil(reqs * ds + extra_req)
        n_kv = math.ceil(kv * ds + extra_kv)
        ptok = 0
        if self.s.mode == "agg":
            ptok = math.ceil(self.avg_ptok.mean)
        t = self.models[role](ptok, n_req, n_kv)
        return None if t is None else t / self._acc()

    def _sla_opinion(self, role: str, n: int) -> Any:
        """sla load rule: up if every engine misses the SLA, down if every engine passes consolidation."""
        if not self.models[role].ready:
            return _NOT_READY
        entries = [self.cache[role][k] for k in sorted(self.cache[role])]
        c = n / (n - 1) if n > 1 else 1.0
        s = self.s.load_scaling_down_sensitivity / 100.0
        ttft_sla, itl_sla = self.s.ttft_ms, self.s.itl_ms
        max_kv = self.caps[role].max_kv_tokens
        if self.s.mode == "agg":
            p_est = [self._ttft(role, f, 1, 1, False) for f in entries]
            d_est = [self._itl(role, f, 1, False) for f in entries]
            p_op = self._side_opinion(n, p_est, ttft_sla, lambda f: self._agg_prefill_ok(role, f, c, s, ttft_sla),
                                      entries)
            d_op = self._side_opinion(n, d_est, itl_sla, lambda f: self._agg_decode_ok(role, f, c, s, itl_sla,
                                                                                        max_kv), entries)
            if p_op is not None and p_op > n:
                return p_op
            if d_op is not None and d_op > n:
                return d_op
            if p_op is None and d_op is not None and d_op < n:
                return d_op
            if p_op is not None and d_op is not None and p_op < n and d_op < n:
                return max(p_op, d_op)
            return n
        if role == "prefill":
            est = [self._ttft(role, f, 1, 1, False) for f in entries]
            return self._side_opinion(n, est, ttft_sla, lambda f: self._prefill_ok(role, f, c, s, ttft_sla), entries,
                                      refusal_is_none=True)
        est = [self._itl(role, f, 1, False) for f in entries]
        return self._side_opinion(n, est, itl_sla, lambda f: self._decode_ok(role, f, c, s, itl_sla, max_kv), entries,
                                  refusal_is_none=True)

    def _side_opinion(self, n: int, est: list[float | None], sla: float, ok: Callable[[Mapping[str, Any]], bool],
                      entries: list[Mapping[str, Any]], refusal_is_none: bool = False) -> int | None:
        vals = [e for e in est if e is not None]
        if not vals:
            return None
        if len(vals) == len(est) and all(e > sla for e in vals):
            return n + 1
        if n > 1 and all(ok(f) for f in entries):
            return max(n - 1, self.s.min_endpoint)
        return None if refusal_is_none else n

    def _prefill_ok(self, role: str, f: Mapping[str, Any], c: float, s: float, sla: float) -> bool:
        own, post = self._ttft(role, f, 0, 1, False), self._ttft(role, f, c, 1, False)
        if own is None or post is None:
            return False
        budget = (sla - own) * s
        return budget > 0 and post - own < budget

    def _agg_prefill_ok(self, role: str, f: Mapping[str, Any], c: float, s: float, sla: float) -> bool:
        own, post = self._ttft(role, f, 0, c, True), self._ttft(role, f, c, c, True)
        if own is None or post is None:
            return False
        budget = (sla - own) * s
        return budget > 0 and post - own < budget

    def _decode_ok(self, role: str, f: Mapping[str, Any], c: float, s: float, sla: float, max_kv: int) -> bool:
        kv = float(f.get("sum_decode_kv_tokens") or 0) + float(f.get("sum_queued_decode_kv_tokens") or 0)
        if int(kv * c) >= max_kv:
            return False
        itl = self._itl(role, f, c, False)
        return itl is not None and itl < sla * s

    def _agg_decode_ok(self, role: str, f: Mapping[str, Any], c: float, s: float, sla: float, max_kv: int) -> bool:
        kv = (float(f.get("sum_decode_kv_tokens") or 0) + float(f.get("sum_queued_decode_kv_tokens") or 0)
              + float(f.get("sum_queued_prefill_tokens") or 0))
        if int(kv * c) >= max_kv:
            return False
        itl = self._itl(role, f, c, True)
        return itl is not None and itl < sla * s

    # ------------------------------------------------------------ throughput loop (planner §3)

    def _throughput_targets(self, ready: Mapping[str, int]) -> dict[str, int] | None:
        window, self.pending = self.pending, None
        if not window or float(window.get("duration_s") or 0) <= 0 or self.predictors is None:
            return None
        num_req = float(window.get("num_req") or 0)
        isl, osl = float(window.get("avg_isl") or 0), float(window.get("avg_osl") or 0)
        self.last_kv_hit = float(window.get("avg_kv_hit_rate") or 0.0)
        acc = window.get("avg_accept_length")
        self.last_accept = float(acc) if acc else 1.0
        self.predictors["num_req"].add_data_point(num_req)
        if num_req > 0:
            self.last_isl, self.last_osl, self.seen_traffic = isl, osl, True
        elif self.seen_traffic:
            isl, osl = self.last_isl, self.last_osl
        for key, v in (("isl", isl), ("osl", osl)):
            if math.isfinite(v):
                self.predictors[key].add_data_point(v)
        pred_n = max(0.0, float(self.predictors["num_req"].predict_next()))
        pred_isl = float(self.predictors["isl"].predict_next())
        pred_osl = float(self.predictors["osl"].predict_next())
        demand = pred_n / float(window["duration_s"])
        out: dict[str, int] = {}
        not_ready = False
        for r in self.roles:
            rps = self.engine_rps(r, pred_isl, pred_osl)
            if rps is None or rps <= 0:
                not_ready = True
                out[r] = ready[r]
            else:
                out[r] = max(math.ceil(demand / rps), self._min_ep(r))
        if not_ready and self.s.mode == "disagg":
            out = dict(ready)
        if not_ready and self.s.enable_load_scaling:
            return dict(ready)  # hybrid: an unready model pins the floor at the current count
        k = self.s.max_throughput_scaling_replicas
        for r in self.roles:
            out[r] = max(min(max(out[r], max(0, ready[r] - k)), ready[r] + k), self._min_ep(r))
        if self.s.mode == "agg":
            out["decode"] = self._budget.fit_ceiling1(ready["decode"], out["decode"],
                                                      self.caps["decode"].gpus_per_replica)
        else:
            p, d = self._budget.fit_ceiling2((ready["prefill"], ready["decode"]), (out["prefill"], out["decode"]),
                                             (self.caps["prefill"].gpus_per_replica,
                                              self.caps["decode"].gpus_per_replica))
            out = {"prefill": p, "decode": d}
        return out

    def engine_rps(self, role: str, pred_isl: float, pred_osl: float) -> float | None:
        """Requests/s one engine sustains at the SLA (highest-rps point if no batch meets it; planner §3.3)."""
        f = self.models[role]
        if not f.ready:
            return None
        cap = self.caps[role]
        M, acc = cap.max_num_batched_tokens, self._acc()
        isl = math.ceil(pred_isl)
        osl = max(1, math.ceil(pred_osl))
        if isl <= 0:
            return None
        pisl = max(1, math.ceil(isl * (1 - self._hit())))
        ctx = max(1, isl + osl // 2)
        kind = "agg" if self.s.mode == "agg" else role
        if kind == "prefill":
            B = 1 if pisl > M else min(cap.max_num_seqs, M // pisl)
        else:
            B = min(cap.max_num_seqs, cap.max_kv_tokens // ctx)
            if kind == "agg":
                B = min(B, max(1, M - 1))
        if B < 1:
            return None
        sizes = list(range(1, B + 1)) if B <= 128 else sorted({max(1, round(1 + i * (B - 1) / 127))
                                                                for i in range(128)})
        best: tuple[bool, float] | None = None
        for b in sizes:
            if kind == "prefill":
                tokens = b * pisl
                ttft = sum(f(min(M, tokens - i), 0, 0) or 0.0 for i in range(0, tokens, M))
                if ttft <= 0:
                    continue
                rps, ok = b / (ttft / 1000.0), ttft <= self.s.ttft_ms
            elif kind == "decode":
                t = f(0, b, b * ctx)
                if t is None or t <= 0:
                    continue
                itl = t / acc
                rps, ok = b / (osl * itl / 1000.0), itl <= self.s.itl_ms
            else:
                pp = math.ceil(b * acc * pisl / osl)
                if pp > M - b:
                    continue
                t = f(min(M, pp), b, b * ctx)
                if t is None or t <= 0:
                    continue
                itl = t / acc
                need = pp + pisl
                ttft = sum(f(min(M, need - i), b, b * ctx) or 0.0 for i in range(0, need, M))
                rps, ok = b / (osl * itl / 1000.0), ttft <= self.s.ttft_ms and itl <= self.s.itl_ms
            key = (ok, rps)
            if best is None or key > best:
                best = key
        return best[1] if best else None


def make_policy(sample: Mapping[str, Any], roles: Mapping[str, Any], optimization_target: str, *,
                ttft_ms: float | None = None, itl_ms: float | None = None,
                predictor_factory: PredictorFactory | None = None) -> PlannerPolicy | None:
    """The candidate's scaling policy, or None for a static candidate."""
    settings = PlannerSettings.from_sample(sample, optimization_target, ttft_ms=ttft_ms, itl_ms=itl_ms)
    if settings is None:
        return None
    context = sample.get("context_length")
    if context is None:
        from spica_core.space.facts import model_facts
        context = model_facts(sample["model_name"]).max_context
    caps = {role: RoleCapability.from_role_args(ra, context, sample.get("aic_nextn")) for role, ra in roles.items()}
    return PlannerPolicy(settings, caps, predictor_factory)


__all__ = ["PlannerSettings", "RoleCapability", "PlannerPolicy", "PassModel", "Budget", "make_policy",
           "merge_traffic"]

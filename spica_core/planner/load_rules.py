"""The load loop: each role's opinion of its replica count from the latest FPMs, then one decision.

Two rules, chosen by the goal's planner ``optimization_target``: easy mode (``throughput`` /
``latency``) moves ±1 on fixed thresholds; ``sla`` mode predicts the next request's TTFT/ITL on
every engine and compares with the SLA (scale-down gated by ``load_scaling_down_sensitivity``,
readiness by ``load_min_observations``). ``LoadLoop`` turns the opinions into one decision.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol

from spica_core.planner.budget import Pools
from spica_core.planner.estimates import Estimator, Fpm, Workers, metric
from spica_core.planner.settings import PlannerSettings, RoleCapability


class LoadRule(Protocol):
    """What LoadLoop asks each role; the rule sees only that role's FPMs and ready count."""

    def ready(self, role: str) -> bool:
        """Whether the rule can judge this role yet (sla: its pass model has seen enough busy FPMs)."""
        ...

    def opinion(self, role: str, n: int, workers: Workers) -> int | None:
        """The role's wanted replica count, or None for no opinion."""
        ...


class EasyLoadRule:
    """Easy mode (throughput / latency): ±1 on static thresholds, every (worker, rank) separately."""

    def __init__(self, settings: PlannerSettings, caps: Mapping[str, RoleCapability]):
        self.throughput = settings.optimization_target == "throughput"
        self.agg = settings.mode == "agg"
        self.min_endpoint = settings.min_endpoint
        self.caps = dict(caps)

    def ready(self, role: str) -> bool:
        return True

    def opinion(self, role: str, n: int, workers: Workers) -> int | None:
        cap = self.caps[role]
        entries = list(workers.values())
        if n == 0:
            return None
        if role == "prefill":
            if not cap.context_length:
                return None
            vals = [metric(f, "sum_queued_prefill_tokens") / cap.context_length for f in entries]
            up_t, down_t = (1.0, 0.1) if self.throughput else (0.1, 0.0)
            up = any(v >= up_t for v in vals)
            down = all(v < down_t for v in vals) if self.throughput else all(v <= down_t for v in vals)
        else:
            if cap.max_kv_tokens <= 0:
                return None
            vals = [(metric(f, "sum_decode_kv_tokens") + metric(f, "sum_queued_decode_kv_tokens")
                     + (metric(f, "sum_queued_prefill_tokens") if self.agg else 0.0)) / cap.max_kv_tokens
                    for f in entries]
            up_t, down_t = (1.0, 0.6) if self.throughput else (0.4, 0.1)
            up = any(v > up_t for v in vals)
            down = all(v < down_t for v in vals)
        if up:
            return n + 1
        if n > 1 and down:
            d = max(n - 1, self.min_endpoint)
            if 0 < d < n and max(vals) * n / d >= up_t:
                return n  # the survivors would cross the scale-up threshold at once
            return d
        return None


class SlaLoadRule:
    """sla mode: up if every engine misses the SLA, down if every engine passes consolidation.

    Consolidation moves an engine's share of n engines onto n-1 (load × n/(n-1)) and must stay
    within the sensitivity's share of the SLA headroom. In disagg each pool judges its own SLA.
    """

    def __init__(self, settings: PlannerSettings, caps: Mapping[str, RoleCapability], estimator: Estimator):
        self.agg = settings.mode == "agg"
        self.min_endpoint = settings.min_endpoint
        self.sensitivity = settings.load_scaling_down_sensitivity / 100.0
        self.ttft_ms, self.itl_ms = settings.ttft_ms, settings.itl_ms
        self.max_kv = {r: cap.max_kv_tokens for r, cap in caps.items()}
        self.est = estimator

    def ready(self, role: str) -> bool:
        return self.est.ready(role)

    def opinion(self, role: str, n: int, workers: Workers) -> int | None:
        entries = [workers[k] for k in sorted(workers)]
        c = n / (n - 1) if n > 1 else 1.0
        if not self.agg:
            return self._prefill_side(role, n, c, entries) if role == "prefill" else \
                self._decode_side(role, n, c, entries)
        p_op = self._prefill_side(role, n, c, entries)
        d_op = self._decode_side(role, n, c, entries)
        if p_op is not None and p_op > n:
            return p_op
        if d_op is not None and d_op > n:
            return d_op
        if p_op is None and d_op is not None and d_op < n:
            return d_op
        if p_op is not None and d_op is not None and p_op < n and d_op < n:
            return max(p_op, d_op)
        return n

    def _prefill_side(self, role: str, n: int, c: float, entries: list[Fpm]) -> int | None:
        est = [self.est.ttft(role, f, 1, 1, False) for f in entries]
        return self._side(n, est, self.ttft_ms, lambda f: self._prefill_ok(role, f, c), entries)

    def _decode_side(self, role: str, n: int, c: float, entries: list[Fpm]) -> int | None:
        est = [self.est.itl(role, f, 1, False) for f in entries]
        return self._side(n, est, self.itl_ms, lambda f: self._decode_ok(role, f, c), entries)

    def _side(self, n: int, est: list[float | None], sla: float, ok: Callable[[Fpm], bool],
              entries: list[Fpm]) -> int | None:
        """Up if every estimate misses; down if all may consolidate; else hold (agg) or no opinion (disagg)."""
        vals = [e for e in est if e is not None]
        if not vals:
            return None
        if len(vals) == len(est) and all(e > sla for e in vals):
            return n + 1
        if n > 1 and all(ok(f) for f in entries):
            return max(n - 1, self.min_endpoint)
        return n if self.agg else None

    def _prefill_ok(self, role: str, f: Fpm, c: float) -> bool:
        """TTFT after consolidation stays within the sensitivity's share of this engine's own headroom."""
        ds = c if self.agg else 1
        own, post = self.est.ttft(role, f, 0, ds, self.agg), self.est.ttft(role, f, c, ds, self.agg)
        if own is None or post is None:
            return False
        budget = (self.ttft_ms - own) * self.sensitivity
        return budget > 0 and post - own < budget

    def _decode_ok(self, role: str, f: Fpm, c: float) -> bool:
        """The consolidated KV still fits and its ITL stays within the sensitivity's share of the SLA."""
        kv = (metric(f, "sum_decode_kv_tokens") + metric(f, "sum_queued_decode_kv_tokens")
              + (metric(f, "sum_queued_prefill_tokens") if self.agg else 0.0))
        if int(kv * c) >= self.max_kv[role]:
            return False
        itl = self.est.itl(role, f, c, self.agg)
        return itl is not None and itl < self.itl_ms * self.sensitivity


class LoadLoop:
    """Per-role opinions → one decision: only with full FPM coverage, above the floors, inside the budget."""

    def __init__(self, rule: LoadRule, pools: Pools):
        self.rule = rule
        self.pools = pools

    def decide(self, ready: Mapping[str, int], busy: Mapping[str, bool], workers: Mapping[str, Workers],
               floor: Mapping[str, int] | None) -> dict[str, int] | None:
        """The new counts, or None; ``floor`` is the throughput loop's lower bound (hybrid mode only)."""
        if any(busy.values()):
            return None  # agg: its pool is starting; disagg: either role blocks both
        if all(not workers[r] for r in ready):
            return None
        agg = not self.pools.paired
        min_ep = self.pools.min_endpoint
        opinions: dict[str, int | None] = {}
        for r in ready:
            if not workers[r]:
                opinions[r] = None
                continue
            if not _covers(workers[r], ready[r]) or not self.rule.ready(r):
                if agg:
                    return None
                opinions[r] = None
                continue
            opinions[r] = self.rule.opinion(r, ready[r], workers[r])
        if agg:
            want = opinions["decode"]
            if want is None:
                return None
            want = max(want, min_ep)
            if floor is not None:
                want = max(want, floor["decode"])
            return self.pools.guard(ready, {"decode": want})
        want2: dict[str, int] = {}
        for r in ready:
            op = opinions[r]
            v = op if op is not None else ready[r]
            if floor is not None:
                v = max(v, floor[r])
            want2[r] = max(v, min_ep)
        if all(want2[r] == ready[r] for r in ready):
            return None
        if floor is not None:
            want2 = self.pools.fit_ceiling(ready, want2)
        return self.pools.guard(ready, want2)


def _covers(workers: Workers, n_ready: int) -> bool:
    """One FPM per rank of every ready worker, each with the same rank count: a fresh, whole picture."""
    per_worker: dict[str, int] = {}
    for w, _dp in workers:
        per_worker[w] = per_worker.get(w, 0) + 1
    if len(per_worker) != n_ready:
        return False
    counts = set(per_worker.values())
    return len(counts) == 1 and len(workers) == n_ready * next(iter(counts))


__all__ = ["LoadRule", "EasyLoadRule", "SlaLoadRule", "LoadLoop"]

"""GPU budgets: the band every decision must respect, and its per-role view."""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Budget:
    """The planner's GPU band: proposals are reconciled, held or trimmed into it, never reversed."""

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


class Pools:
    """The replica pools under one Budget: agg's single pool is the replay's "decode" role.

    Decisions are role → count dicts; this maps them onto the Budget's single-pool or pair rules.
    """

    def __init__(self, budget: Budget, gpus_per_replica: Mapping[str, int], min_endpoint: int):
        self.budget = budget
        self.gpus = dict(gpus_per_replica)
        self.min_endpoint = min_endpoint
        self.paired = "prefill" in self.gpus

    def in_band(self, counts: Mapping[str, int]) -> bool:
        total = sum(counts[r] * g for r, g in self.gpus.items())
        return self.budget.in_band(total, max(self.gpus.values()))

    def clamp(self, counts: Mapping[str, int]) -> dict[str, int]:
        if not self.paired:
            return {"decode": self.budget.clamp1(counts["decode"], self.gpus["decode"], self.min_endpoint)}
        p, d = self.budget.clamp2(counts["prefill"], counts["decode"], self.gpus["prefill"], self.gpus["decode"],
                                  self.min_endpoint, self.min_endpoint)
        return {"prefill": p, "decode": d}

    def guard(self, ready: Mapping[str, int], proposal: Mapping[str, int]) -> dict[str, int]:
        if not self.paired:
            return {"decode": self.budget.guard1(ready["decode"], proposal["decode"], self.gpus["decode"],
                                                 self.min_endpoint)}
        p, d = self.budget.guard2(_pair(ready), _pair(proposal), _pair(self.gpus),
                                  (self.min_endpoint, self.min_endpoint))
        return {"prefill": p, "decode": d}

    def fit_ceiling(self, ready: Mapping[str, int], proposal: Mapping[str, int]) -> dict[str, int]:
        if not self.paired:
            return {"decode": self.budget.fit_ceiling1(ready["decode"], proposal["decode"], self.gpus["decode"])}
        p, d = self.budget.fit_ceiling2(_pair(ready), _pair(proposal), _pair(self.gpus))
        return {"prefill": p, "decode": d}


def _pair(counts: Mapping[str, int]) -> tuple[int, int]:
    return counts["prefill"], counts["decode"]


__all__ = ["Budget", "Pools"]

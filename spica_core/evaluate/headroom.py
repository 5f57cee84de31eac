"""Headroom: how much more traffic a candidate takes before its SLA breaks.

The headroom of a candidate is the largest traffic scale s ≤ ``goal.headroom_max`` at which at least
``goal.headroom_share`` of the requests meet the SLA (attainment = requests that met it ÷ all
requests, rejected ones included): by default the SLA requirement ``goal.sla_attainment``, so a
candidate that meets it has a headroom of at least 1. The scale multiplies the arrival rate on top of the workload's
own ``arrival_speedup_ratio`` (an open-loop trace), the request rate (open-loop synthetic), or the
number in flight (closed loop: ``concurrency``, ``replay_concurrency``, a ``kv_load_ratio``).

It is found by bisection in log scale to 5 %, reusing the replay at today's traffic: the cap (or
the floor, when today's traffic already misses) first, then halving the bracket. A candidate that
misses at today's traffic has a headroom below 1 (0.6 holds only 60 % of today's traffic), searched
down to ``FLOOR``. The bracket's known-good end is reported, so at 0.95 × the scale the attainment
holds and at 1.1 × it does not (unless the scale is the cap), as far as attainment falls with load.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Generator, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from spica_core.evaluate.evaluation import EvalRequest, Outcome, evaluate_one
from spica_core.evaluate.jobs import Job, run_job
from spica_core.evaluate.scoring import attainment

TOLERANCE = 1.05   # the bracket's ratio when the search stops
FLOOR = 1 / 16     # the smallest scale searched for a candidate that misses at today's traffic


@dataclass(frozen=True)
class Headroom:
    """The largest traffic scale that holds, its attainment, and the extra replays it took."""

    scale: float
    attainment: float
    evaluations: int
    capped: bool = False          # it holds at goal.headroom_max: the headroom is at least that
    below_floor: bool = False     # it misses even at FLOOR × today's traffic
    points: tuple[tuple[float, float], ...] = ()   # (scale, attainment) of every replay, 1 included

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["points"] = [list(p) for p in self.points]
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Headroom:
        return cls(float(data["scale"]), float(data["attainment"]), int(data["evaluations"]),
                   bool(data.get("capped")), bool(data.get("below_floor")),
                   tuple((float(s), float(a)) for s, a in data.get("points", ())))

    def text(self) -> str:
        """``1.8× today's traffic (attainment 0.91)``, ``≥ 4× …`` at the cap, ``< 0.0625× …`` below the floor."""
        mark = "≥ " if self.capped else ("< " if self.below_floor else "")
        return f"{mark}{self.scale:.3g}× today's traffic (attainment {self.attainment:.2f})"


def outcome_attainment(outcome: Outcome) -> float:
    """Requests that met the SLA ÷ all requests (0 for a candidate that failed at this traffic)."""
    return (attainment(outcome.report) or 0.0) if outcome.feasible else 0.0


def find_headroom(req: EvalRequest, today: float | None = None, *,
                  evaluate: Callable[[EvalRequest], Outcome] = evaluate_one) -> Headroom | None:
    """The candidate's headroom under ``req.goal``, one replay after another through ``evaluate``; None without
    an SLA (there is nothing to break). ``today``: as in :func:`headroom_job`."""
    return run_job(headroom_job(req, today), evaluate)


def headroom_job(req: EvalRequest, today: float | None = None) -> Job[Headroom | None]:
    """The headroom search as a job (``spica_core.evaluate.jobs``): it yields one scaled request at a time.

    ``today`` is the attainment at today's traffic when the caller has it (it is not replayed again).
    """
    goal = req.goal
    if goal.sla is None:
        return None
    req = replace(req, goal=goal.model_copy(update={"robust_scale": 1.0}))  # one replay per scale
    target, cap = goal.headroom_share, float(goal.headroom_max)
    points: dict[float, float] = {}

    def holds(scale: float) -> Generator[list[EvalRequest], Sequence[Outcome], bool]:
        if scale not in points:
            if scale == 1.0 and today is not None:
                points[scale] = today
            else:
                (outcome,) = yield [req.scaled(scale)]
                points[scale] = outcome_attainment(outcome)
        return points[scale] >= target

    def result(scale: float, **flags: bool) -> Headroom:
        replays = len(points) - (today is not None and 1.0 in points)
        return Headroom(scale, points[scale], replays, points=tuple(sorted(points.items())), **flags)

    if (yield from holds(1.0)):
        if cap == 1.0 or (yield from holds(cap)):
            return result(cap, capped=True)
        lo, hi = 1.0, cap
    else:
        if not (yield from holds(FLOOR)):
            return result(FLOOR, below_floor=True)
        lo, hi = FLOOR, 1.0
    while hi / lo > TOLERANCE:
        mid = math.sqrt(lo * hi)
        if (yield from holds(mid)):
            lo = mid
        else:
            hi = mid
    return result(lo)


__all__ = ["Headroom", "find_headroom", "headroom_job", "outcome_attainment", "TOLERANCE", "FLOOR"]

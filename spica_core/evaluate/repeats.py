"""How much one candidate's score moves from one replay to the next (docs/search.md, "Reproducibility").

Round-robin replays are bit-identical. KV-router replays are not, and no setting makes them so: at
``router_temperature`` 0, Dynamo's KV router (``ai-dynamo-runtime`` 1.6.1) breaks a tie between
equal-cost workers with ``fastrand``'s thread-local generator, which seeds itself from the clock and the
thread id; at a positive temperature it samples from the same generator. The runtime's seeded selector
(``ReplayDeterminism::CanonicalV1``) exists only in builds with the ``replay-bench`` feature, which the
wheel lacks ("canonical KV Router replay requires the replay-bench feature"), and neither
``KvRouterConfig`` nor the replay entry points take a seed. ``router_event_threads`` does not matter
offline (the replay's indexer is a single-threaded radix tree), nor does ``PYTHONHASHSEED``. So two
replays of the same KV-router candidate, in one process or in two, differ by a few tenths of a percent.

:func:`replay_spread` evaluates a candidate ``n`` times through the sweep's own path
(:func:`~spica_core.evaluate.evaluation.evaluate_one`: the same engine arguments, planner policy,
replay and score) and returns the min / median / max of the score and of mean TTFT and mean ITL, so
the spread can go into the candidate's error band (``BandTable.bands(..., spread=s.band_spread())``).
A round-robin candidate is replayed once: its spread is exactly zero.
"""
from __future__ import annotations

import math
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass

from spica_core.errors import SpicaError
from spica_core.deployment import Candidate
from spica_core.evaluate.evaluation import EvalRequest
from spica_core.evaluate.jobs import Job, run_job

DEFAULT_REPEATS = 3


@dataclass(frozen=True)
class Range:
    """The min, median and max of one quantity over a candidate's replays."""

    min: float
    median: float
    max: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Range:
        if not values:
            raise ValueError("a range needs at least one value")
        return cls(float(min(values)), float(statistics.median(values)), float(max(values)))

    @property
    def width(self) -> float:
        return self.max - self.min

    @property
    def relative(self) -> float:
        """The larger distance from the median to either end, as a fraction of the median (0: exact)."""
        if self.width == 0:
            return 0.0
        if self.median == 0 or not math.isfinite(self.median):
            return math.inf
        return max(self.median - self.min, self.max - self.median) / abs(self.median)

    def contains(self, value: float, margin: float = 0.0) -> bool:
        """Whether ``value`` lies in [min, max] widened on each side by ``margin`` × the median's magnitude."""
        pad = margin * abs(self.median)
        return self.min - pad <= value <= self.max + pad


@dataclass(frozen=True)
class ReplaySpread:
    """One candidate's replays: how many ran, whether the replay is exact, and the range of each quantity."""

    n: int                      # replays run (1 for an exact, round-robin candidate)
    exact: bool                 # round robin: every replay gives the same numbers, bit for bit
    score: Range
    mean_ttft_ms: Range
    mean_itl_ms: Range
    scores: tuple[float, ...]
    replay_seconds: float       # the replays' own time, summed (what the spread cost)

    def band_spread(self) -> dict[str, float]:
        """The ``spread`` argument of :meth:`~spica_core.evaluate.bands.BandTable.bands`."""
        return {"ttft_ms": self.mean_ttft_ms.relative, "itl_ms": self.mean_itl_ms.relative}


def replay_is_exact(candidate: Candidate) -> bool:
    """Round-robin replays are bit-identical; the KV router's tie-breaks are random (see the module doc)."""
    return not candidate.router.is_kv


def replay_spread(request: EvalRequest, n: int = DEFAULT_REPEATS) -> ReplaySpread:
    """Evaluate ``request``'s candidate ``n`` times in this process and return the spread of its numbers.

    Each replay draws its own tie-breaks (the router's generator moves on between calls), so replays in one
    process spread like replays in separate processes. Raises :class:`SpicaError` with the outcome's reason
    when a replay is not feasible: a spread is only defined for a scored candidate.
    """
    return run_job(spread_job(request, n))


def spread_job(request: EvalRequest, n: int = DEFAULT_REPEATS) -> Job[ReplaySpread]:
    """:func:`replay_spread` as a job (``spica_core.evaluate.jobs``): its ``n`` replays are asked for at once,
    so they run in parallel on the workers that are free."""
    if n < 1:
        raise ValueError("n must be >= 1")
    exact = replay_is_exact(request.candidate)
    start = time.perf_counter()
    outcomes = list((yield [request] * (1 if exact else n)))
    for i, out in enumerate(outcomes):
        if not out.feasible or out.score is None:
            raise SpicaError(f"replay {i + 1} of {n} of the candidate was {out.status.value}: {out.reason}")
    replay_s = sum(float(o.timings.get("replay_s", 0.0)) for o in outcomes) or time.perf_counter() - start
    scores = tuple(float(o.score) for o in outcomes if o.score is not None)

    def metric(name: str) -> Range:
        return Range.of([float(o.metrics.get(name, math.nan)) for o in outcomes])

    return ReplaySpread(n=len(outcomes), exact=exact, score=Range.of(scores), mean_ttft_ms=metric("mean_ttft_ms"),
                        mean_itl_ms=metric("mean_itl_ms"), scores=scores, replay_seconds=replay_s)


__all__ = ["DEFAULT_REPEATS", "Range", "ReplaySpread", "replay_is_exact", "replay_spread", "spread_job"]

"""What an ask and an evaluation cost, measured as the sweep runs, and what the search does about it.

The optimizer should never cost more than the replays it saves. The search loop reads both costs
from the trials it knows (``eval_seconds`` of their evaluations, ``suggest_seconds`` of their asks),
so every decision below is a function of recorded trials and a resumed sweep makes the same ones:

* **batch size**: one model ask proposes ``batch_size`` candidates, enough that the next ask takes at most
  ``BATCH_SHARE`` of the time the workers spend replaying them;
* **model or space-filling**: when even the largest batch would not pay for a fit, the ask space-fills;
* **cover the first model ask**: a branch's first model ask also waits for the GP code to be traced, so the
  space-filling start lasts until the workers have enough picked candidates to replay while it runs;
* **enumerate**: when replaying every untried candidate of a branch costs less wall time than asking
  for the rest of its budget, the rest of the branch is enumerated.
"""
from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from spica_core.search.trials import Trial

# Before the first model ask of a branch: a warm GP-UCB-PE fit plus a few picks on two cores.
MODEL_ASK_PRIOR_S = 1.0
# From a branch's first model ask's start to its picks: the process's GP tracing (which it waits for, or does
# itself) and a fit. Measured in `spica sweep` on 2 cores, 2.9 / 3.3 s (dense's two branches; the second also
# waits for the first's turn), and 2.4 s in a MoE run, when this was set.
FIRST_MODEL_ASK_S = 3.0
# A model ask pays when it costs at most this share of the replay time of the candidates it proposes.
OPTIMIZER_SHARE = 1.0
# A batch is sized so that the next ask takes at most this share of its replay time. At 1.0 the ask would end
# as the workers run out of candidates, but an ask's time varies (tracing, cleared caches, the CPU it shares
# with the workers) and each ask refits the GP: on the one-hour case's shape (bench/bench_search.py's real
# trace, 96 evaluations) 1.0 gave a wall of 99 s and 0.25 gave 77 s (0.1: 68 s, with a lower best;
# measured when this was set).
BATCH_SHARE = 0.25
# The space-filling start of a branch (its blind batches and the cover of its first model ask) takes at most this
# share of its budget: uncapped, a cover of cheap replays could fill most of a branch's budget, and at 32
# evaluations of the dense space the median best fell from 1.000 to 0.837 of the optimum
# (bench/results/search_quality_cover_*.log).
START_SHARE = 0.25
BATCH_ROUNDS = 4  # a batch holds at most this many rounds' worth of candidates (more asks would learn too little)
MODEL_METHODS = frozenset({"gp"})


@dataclass(frozen=True)
class Costs:
    """Median seconds of one evaluation and of one model ask, over the trials a decision may use."""

    workers: int
    eval_s: float | None           # None: nothing evaluated yet
    ask_s: float = MODEL_ASK_PRIOR_S
    # The pick that first knows outcomes (the branch's first batch's), with no model ask yet: it decides once
    # whether the space-filling start must go on to cover the first model ask.
    first_outcomes: bool = False
    pending: int = 0               # candidates picked whose outcomes the ask does not know: replayed while it runs
    start_room: int = 0            # space-filling picks the branch's start may still take (START_SHARE)

    @classmethod
    def of(cls, known: Sequence[Trial], workers: int, model: bool = True, pending: Sequence[str] = (),
           budget: int = 0) -> Costs:
        """From the trials a decision may use, how the pending candidates were picked (``suggested_by``) and
        the branch's ``budget`` of evaluations. ``model``: the suggester fits one; else its asks cost next to
        nothing. A process's first model ask also pays imports and compiles, so it is left out of the median."""
        evals = [t.eval_seconds for t in known if t.eval_seconds is not None and not t.cache_hit]
        eval_s = statistics.median(evals) if evals else None
        if not model:
            return cls(max(1, workers), eval_s, 0.0, pending=len(pending))
        asks = {t.ask: t.suggest_seconds for t in known if t.suggested_by in MODEL_METHODS
                and t.suggest_seconds is not None}
        warm = [seconds for _, seconds in sorted(asks.items())[1:]]
        first = len({t.ask for t in known}) == 1 and not any(t.suggested_by in MODEL_METHODS for t in known) \
            and not MODEL_METHODS.intersection(pending)
        return cls(max(1, workers), eval_s, statistics.median(warm) if warm else MODEL_ASK_PRIOR_S,
                   first_outcomes=first, pending=len(pending),
                   start_room=max(0, int(START_SHARE * budget) - len(known) - len(pending)) if first else 0)

    def wall_per_eval(self) -> float | None:
        """Wall seconds per evaluation with every worker busy."""
        return None if self.eval_s is None else self.eval_s / self.workers

    def starves(self) -> bool:
        """Whether the branch's first model ask, asked now, would leave the workers without candidates: the
        pending ones replay in less wall time than ``FIRST_MODEL_ASK_S``. Decided once (``first_outcomes``): the
        batch that covers it is sized from the first outcomes, and the next ask is the model's."""
        wall = self.wall_per_eval()
        return self.first_outcomes and self.start_room >= self.workers and wall is not None \
            and self.pending * wall < FIRST_MODEL_ASK_S

    def batch_size(self, largest: int) -> int:
        """A multiple of the workers, the smallest whose replays take ``ask_s / BATCH_SHARE``: the next ask is
        then done well before the workers run out of candidates (at most ``largest``). Before the first model
        ask (:meth:`starves`), the smallest whose replays last ``FIRST_MODEL_ASK_S``, within ``start_room``: they
        are what the workers replay while it runs."""
        largest = max(largest, self.workers)
        wall = self.wall_per_eval()
        if not wall:
            return self.workers
        if self.starves():
            largest = min(largest, self.start_room // self.workers * self.workers)
            seconds = FIRST_MODEL_ASK_S
        else:
            seconds = self.ask_s / BATCH_SHARE
        rounds = math.ceil(seconds / (wall * self.workers))
        return max(self.workers, min(largest, rounds * self.workers))

    def model_pays(self, count: int) -> bool:
        """Whether a model ask for ``count`` candidates costs at most their replays' share, and the workers
        have enough to replay while it runs."""
        wall = self.wall_per_eval()
        return wall is None or (self.ask_s <= OPTIMIZER_SHARE * count * wall and not self.starves())

    def enumeration_pays(self, untried: int, remaining: int, batch: int) -> bool:
        """Whether replaying all ``untried`` candidates is cheaper than ``remaining`` more asked for ones."""
        wall = self.wall_per_eval()
        if wall is None or remaining <= 0:
            return False
        asking = remaining * wall + math.ceil(remaining / max(1, batch)) * self.ask_s
        return untried * wall <= asking


__all__ = ["Costs", "BATCH_ROUNDS", "BATCH_SHARE", "FIRST_MODEL_ASK_S", "MODEL_ASK_PRIOR_S", "OPTIMIZER_SHARE",
           "START_SHARE"]

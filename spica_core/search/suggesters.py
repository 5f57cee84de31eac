"""Suggesters: what proposes the next candidates of a branch, behind one small interface.

The round loop (``rounds.py``) asks a suggester how many proposals a round still wants and for
that many proposals; it never knows which policy it drives. Both suggesters pick from the
branch's numbered legal space (:class:`CandidateSpace`) and never propose a candidate the branch
already tried, so every proposal is a new evaluation and an empty answer means the space is
exhausted. The Vizier suggester keeps one study per branch alive; the thorough suggester walks
the space in canonical order, the way Optuna's brute-force sampler is just another sampler.
"""
from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import Any, Protocol

import numpy as np

from spica_core.evaluate.evaluator import Status
from spica_core.search.candidates import CandidateSpace, Proposal
from spica_core.search.study import Study, TrialRecord, derive_seed
from spica_core.search.trials import Trial
from spica_core.search.warm_start import WarmStart
from spica_core.space.branches import Branch

ATTEMPT_CAP_FACTOR = 11  # "requested batch + at most 10× replacements" (§6.2)
SCALAR_METRIC = "objective"
MAX_POOL = 4096  # larger spaces are scored on a fresh seeded sample of this many unseen candidates per ask
# A warm GP ask costs about 1 s on two cores; a batch whose evaluations take less than a quarter of
# that is space-filled instead, so the optimizer never costs several times the evaluations it picks.
MIN_BATCH_SECONDS_FOR_MODEL = 0.25


class Suggester(Protocol):
    """``wanted`` says how many proposals a round still needs (0: the round is over); ``suggest``
    returns at most ``count`` proposals the branch has not tried ([] once its space is exhausted)."""

    space: CandidateSpace
    stalls: bool  # a round short of its target ends the branch (§6.5)

    def wanted(self, this_round: Sequence[Trial], per_round: int) -> int: ...

    def suggest(self, count: int, trials: Sequence[Trial], step: int) -> list[Proposal]: ...


def round_counts(this_round: Sequence[Trial]) -> tuple[int, int]:
    """(unique successes, attempts) of a round's trials so far."""
    return sum(1 for t in this_round if t.is_evaluated_success), len(this_round)


class VizierSuggester:
    """Rapid policy: one seeded Vizier study per branch, picking among the candidates not yet tried.

    When the untried candidates fit in what is left of the branch's evaluation budget, they are
    enumerated in canonical order instead: every one of them will be evaluated anyway. A GP study
    also space-fills a batch whose evaluations, as recorded so far, would take less than
    ``MIN_BATCH_SECONDS_FOR_MODEL``: then fitting the model would cost more than evaluating.
    """

    stalls = True

    def __init__(self, branch: Branch, objectives: Sequence[tuple[str, str]], *, pareto: bool, algorithm: str,
                 seed: int, budget: int, workers: int = 1, warm_start: WarmStart | None = None):
        self.space = CandidateSpace(branch)
        # An earlier run's top candidates, asked for first, and its trials as the study's prior; those
        # outside this space are skipped.
        top, earlier = (warm_start.top, warm_start.trials) if warm_start else ((), ())
        self.warm = list(dict.fromkeys(i for i in map(self.space.index_of, top) if i is not None))
        self.pareto = pareto
        self.budget = budget
        self.workers = workers
        prior = [study_record(replace(t, params=self.space.raw(i)), pareto)
                 for t in earlier if t.status is Status.feasible and (i := self.space.index_of(t)) is not None]
        self.study = Study(self.space.params, objectives=objectives, algorithm=algorithm, seed=seed, prior=prior)

    def wanted(self, this_round: Sequence[Trial], per_round: int) -> int:
        """Up to the round's unique-success target, within the attempt cap (§6.2)."""
        unique, attempts = round_counts(this_round)
        cap = ATTEMPT_CAP_FACTOR * per_round
        return max(0, min(per_round - unique, cap - attempts))

    def suggest(self, count: int, trials: Sequence[Trial], step: int) -> list[Proposal]:
        mine = [t for t in trials if t.mode == self.space.mode]
        seen = self.space.seen(mine)
        first = [i for i in self.warm if i not in seen][:count]
        if first:
            return [self.space.proposal(i, "warm-start") for i in first]
        untried = self.space.size - len(seen)
        if untried <= max(0, self.budget - len(seen)):
            return [self.space.proposal(i) for i in itertools.islice(self.space.unseen(seen), count)]
        self.study.sync([study_record(t, self.pareto) for t in mine])
        indices, pool = self.pool(seen, step)
        allowed = [i not in seen for i in indices]
        method = self.method(mine, count)
        picks = self.study.suggest(count, step, pool, allowed, model=method == "gp")
        return [self.space.proposal(indices[p], method) for p in picks]

    def method(self, trials: Sequence[Trial], count: int) -> str:
        """How this ask picks: the GP, or (no data yet, or evaluations too cheap) space-filling."""
        algorithm = self.study.algorithm
        if algorithm == "RANDOM_SEARCH":
            return "random"
        if algorithm == "QUASI_RANDOM_SEARCH" or not trials:
            return "space-filling"
        timed = [t.eval_seconds for t in trials if t.eval_seconds is not None and not t.cache_hit]
        if timed and statistics.median(timed) * math.ceil(count / self.workers) < MIN_BATCH_SECONDS_FOR_MODEL:
            return "space-filling"
        return "gp"

    def pool(self, seen: set[int], step: int) -> tuple[Sequence[int], Sequence[dict[str, Any]]]:
        """What the study scores: the whole space (the same object every ask, so its features are
        converted once), or for a large space a seeded sample of ``MAX_POOL`` untried candidates."""
        if self.space.size <= MAX_POOL:
            return range(self.space.size), self.space.raws
        if self.space.size - len(seen) <= MAX_POOL:
            indices = list(self.space.unseen(seen))
            return indices, [self.space.raw(i) for i in indices]
        rng = np.random.default_rng(derive_seed(self.study.seed, step))
        picked: dict[int, None] = {}
        while len(picked) < MAX_POOL:
            for i in rng.integers(0, self.space.size, size=2 * MAX_POOL):
                if int(i) not in seen:
                    picked.setdefault(int(i), None)
        indices = list(picked)[:MAX_POOL]
        return indices, [self.space.raw(i) for i in indices]


def study_record(trial: Trial, pareto: bool) -> TrialRecord:
    """The study's view of a trial: its raw parameters and the signed score or objective vector."""
    if trial.status is Status.feasible:
        metrics = dict(trial.objectives or {}) if pareto else {SCALAR_METRIC: float(trial.score)}  # type: ignore[arg-type]
        return TrialRecord(params=trial.params, metrics=metrics)
    return TrialRecord(params=trial.params, infeasible_reason=trial.reason or trial.status.value)


class ThoroughSuggester:
    """Thorough policy: every candidate of the branch, in canonical order."""

    stalls = False

    def __init__(self, branch: Branch):
        self.space = CandidateSpace(branch)

    def wanted(self, this_round: Sequence[Trial], per_round: int) -> int:
        return max(0, per_round - len(this_round))

    def suggest(self, count: int, trials: Sequence[Trial], step: int) -> list[Proposal]:
        seen = self.space.seen(trials)
        return [self.space.proposal(i) for i in itertools.islice(self.space.unseen(seen), count)]


def thorough_proposals(branch: Branch) -> Iterator[Proposal]:
    space = CandidateSpace(branch)
    return (space.proposal(i) for i in range(space.size))


def thorough_size(branch: Branch) -> int:
    """How many proposals the thorough policy makes for a branch (the size of its legal space)."""
    return CandidateSpace(branch).size


__all__ = ["Proposal", "Suggester", "VizierSuggester", "ThoroughSuggester", "thorough_proposals", "thorough_size",
           "study_record", "round_counts", "ATTEMPT_CAP_FACTOR", "SCALAR_METRIC", "MAX_POOL",
           "MIN_BATCH_SECONDS_FOR_MODEL"]

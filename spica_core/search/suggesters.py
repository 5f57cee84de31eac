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
from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import Any, Protocol

import numpy as np

from spica_core.evaluate.evaluation import Status
from spica_core.search.candidates import CandidateSpace, Proposal
from spica_core.search.costs import Costs
from spica_core.search.optimizer import OptimizerProcess, RemoteStudy
from spica_core.search.study import GP_ALGORITHMS, Study, TrialRecord, derive_seed
from spica_core.search.trials import Trial
from spica_core.search.warm_start import WarmStart
from spica_core.space.branches import Branch

ATTEMPT_CAP_FACTOR = 11  # "requested batch + at most 10× replacements"
SCALAR_METRIC = "objective"
MAX_POOL = 4096  # larger spaces are scored on a fresh seeded sample of this many unseen candidates per ask


class Suggester(Protocol):
    """``suggest`` returns at most ``count`` proposals the branch has not tried and that are not being
    evaluated (``pending``); [] once its space is exhausted. ``known`` are the branch's trials the
    proposals may depend on, ``costs`` what asking and evaluating cost so far."""

    space: CandidateSpace
    stalls: bool      # rounds count unique successes, and a round short of its target ends the branch
    fits_model: bool  # its asks fit a model, so they cost what Costs measures
    warm: list[int]   # candidates proposed before any other (an earlier run's top ones)
    waited: float     # seconds its last suggest waited for another model ask to end (not what it cost)

    def suggest(self, count: int, known: Sequence[Trial], pending: Sequence[Proposal], step: int,
                costs: Costs, exploit: bool = True) -> list[Proposal]: ...


class VizierSuggester:
    """Rapid policy: one seeded Vizier study per branch, picking among the candidates not yet tried.

    When the untried candidates fit in what is left of the branch's evaluation budget, they are
    enumerated in canonical order instead: every one of them will be evaluated anyway. A GP study
    space-fills an ask that would cost more than the share of the replays it pays for (``Costs``).
    """

    stalls = True

    def __init__(self, branch: Branch, objectives: Sequence[tuple[str, str]], *, pareto: bool, algorithm: str,
                 seed: int, budget: int, warm_start: WarmStart | None = None,
                 optimizer: OptimizerProcess | None = None):
        self.space = CandidateSpace(branch)
        # An earlier run's top candidates, asked for first, and its trials as the study's prior; those
        # outside this space are skipped.
        top, earlier = (warm_start.top, warm_start.trials) if warm_start else ((), ())
        self.warm = list(dict.fromkeys(i for i in map(self.space.index_of, top) if i is not None))
        self.pareto = pareto
        self.budget = budget
        prior = [study_record(replace(t, params=self.space.raw(i)), pareto)
                 for t in earlier if t.status is Status.feasible and (i := self.space.index_of(t)) is not None]
        # In the optimizer process when there is one (the sweep's), else in this process: the same picks.
        open_study = optimizer.study if optimizer is not None else Study
        self.study: Study | RemoteStudy = open_study(self.space.params, objectives=objectives, algorithm=algorithm,
                                                     seed=seed, prior=prior)
        self.fits_model = self.study.algorithm in GP_ALGORITHMS
        self.waited = 0.0

    def suggest(self, count: int, known: Sequence[Trial], pending: Sequence[Proposal], step: int,
                costs: Costs, exploit: bool = True) -> list[Proposal]:
        self.waited = 0.0
        mine = [t for t in known if t.mode == self.space.mode]
        seen = self.space.seen(mine) | {p.index for p in pending if p.index is not None}
        first = [i for i in self.warm if i not in seen][:count]
        if first:
            return [self.space.proposal(i, "warm-start") for i in first]
        untried = self.space.size - len(seen)
        if untried <= max(0, self.budget - len(seen)):
            return [self.space.proposal(i) for i in itertools.islice(self.space.unseen(seen), count)]
        self.study.sync([study_record(t, self.pareto) for t in mine])
        indices, pool = self.pool(seen, step)
        allowed = [i not in seen for i in indices]
        method = self.method(mine, count, costs)
        picks = self.study.suggest(count, step, pool, allowed, model=method == "gp", pending=[p.raw for p in pending],
                                   exploit=exploit)
        self.waited = self.study.waited
        return [self.space.proposal(indices[p], method) for p in picks]

    def method(self, trials: Sequence[Trial], count: int, costs: Costs) -> str:
        """How this ask picks: the GP, or (no data yet, or evaluations too cheap) space-filling."""
        algorithm = self.study.algorithm
        if algorithm == "RANDOM_SEARCH":
            return "random"
        if algorithm == "QUASI_RANDOM_SEARCH" or not trials or not costs.model_pays(count):
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
    fits_model = False
    waited = 0.0

    def __init__(self, branch: Branch):
        self.space = CandidateSpace(branch)
        self.warm: list[int] = []

    def suggest(self, count: int, known: Sequence[Trial], pending: Sequence[Proposal], step: int,
                costs: Costs, exploit: bool = True) -> list[Proposal]:
        seen = self.space.seen(known) | {p.index for p in pending if p.index is not None}
        return [self.space.proposal(i) for i in itertools.islice(self.space.unseen(seen), count)]


def thorough_proposals(branch: Branch) -> Iterator[Proposal]:
    space = CandidateSpace(branch)
    return (space.proposal(i) for i in range(space.size))


def thorough_size(branch: Branch) -> int:
    """How many proposals the thorough policy makes for a branch (the size of its legal space)."""
    return CandidateSpace(branch).size


__all__ = ["Proposal", "Suggester", "VizierSuggester", "ThoroughSuggester", "thorough_proposals", "thorough_size",
           "study_record", "ATTEMPT_CAP_FACTOR", "SCALAR_METRIC", "MAX_POOL"]

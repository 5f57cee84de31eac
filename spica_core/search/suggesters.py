"""Suggesters: what proposes the next candidates of a branch, behind one small interface.

The round loop (``rounds.py``) asks a suggester how many proposals a round still wants and for
that many proposals; it never knows which policy it drives. The Vizier suggester asks a seeded
study rebuilt from the branch's trials (rapid); the thorough suggester walks the branch's finite
space in a canonical order, the way Optuna's brute-force sampler is just another sampler.
"""
from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from spica_core.evaluate.evaluator import Status
from spica_core.search.study import Study, TrialRecord
from spica_core.search.trials import Trial
from spica_core.space.branches import Branch
from spica_core.space.parallel import ParallelConfig
from spica_core.space.projection import ProjectionRecord, latent_params, project, study_params

ATTEMPT_CAP_FACTOR = 11  # "requested batch + at most 10× replacements" (§6.2)
SCALAR_METRIC = "objective"


@dataclass(frozen=True)
class Proposal:
    """A decoded suggestion: the raw parameters, the knob selection, the projection and the parallel config."""

    raw: dict[str, Any]
    selection: dict[str, Any]
    projection: ProjectionRecord | None
    parallel: ParallelConfig


class Suggester(Protocol):
    """``wanted`` says how many proposals a round still needs (0: the round is over)."""

    stalls: bool  # a round short of its target ends the branch (§6.5)

    def wanted(self, this_round: Sequence[Trial], per_round: int) -> int: ...

    def suggest(self, count: int, trials: Sequence[Trial], step: int) -> list[Proposal]: ...


def round_counts(this_round: Sequence[Trial]) -> tuple[int, int]:
    """(unique successes, attempts) of a round's trials so far."""
    return sum(1 for t in this_round if t.is_evaluated_success), len(this_round)


class VizierSuggester:
    """Rapid policy: a seeded Vizier study over the branch, fed every trial of the branch so far."""

    stalls = True

    def __init__(self, branch: Branch, objectives: Sequence[tuple[str, str]], *, pareto: bool, algorithm: str,
                 seed: int):
        self.branch = branch
        self.objectives = tuple(objectives)
        self.pareto = pareto
        self.algorithm = algorithm
        self.seed = seed
        self.latent_names = {p.name for p in latent_params(branch)}

    def wanted(self, this_round: Sequence[Trial], per_round: int) -> int:
        """Up to the round's unique-success target, within the attempt cap (§6.2)."""
        unique, attempts = round_counts(this_round)
        cap = ATTEMPT_CAP_FACTOR * per_round
        return max(0, min(per_round - unique, cap - attempts))

    def study(self, trials: Sequence[Trial]) -> Study:
        study = Study(study_params(self.branch), objectives=self.objectives, algorithm=self.algorithm,
                      seed=self.seed, constants=self.branch.constants())
        for trial in trials:
            record = study_record(trial, self.pareto)
            study.complete(record.params, record.metrics, record.infeasible_reason)
        return study

    def suggest(self, count: int, trials: Sequence[Trial], step: int) -> list[Proposal]:
        study = self.study(trials)
        return [self.proposal(raw, study.decode(raw)) for raw in study.suggest(count, step=step)]

    def proposal(self, raw: Mapping[str, Any], decoded: Mapping[str, Any]) -> Proposal:
        """Split a decoded suggestion into knobs and latent features, and project the latter (§7.4)."""
        selection = {k: v for k, v in decoded.items() if k not in self.latent_names}
        selection["deployment_mode"] = self.branch.mode
        if self.branch.is_strict_pin:
            return Proposal(dict(raw), selection, None, self.branch.pool[0])
        requested = {k: v for k, v in decoded.items() if k in self.latent_names}
        record = project(self.branch, str(selection["backend"]), requested)
        return Proposal(dict(raw), selection, record, record.config)


def study_record(trial: Trial, pareto: bool) -> TrialRecord:
    """The study's view of a trial: its raw parameters and the signed score or objective vector."""
    if trial.status is Status.feasible:
        metrics = dict(trial.objectives or {}) if pareto else {SCALAR_METRIC: float(trial.score)}  # type: ignore[arg-type]
        return TrialRecord(params=trial.params, metrics=metrics)
    return TrialRecord(params=trial.params, infeasible_reason=trial.reason or trial.status.value)


class ThoroughSuggester:
    """Thorough policy: every (backend, legal parallel config, knob combination), in canonical order."""

    stalls = False

    def __init__(self, branch: Branch):
        self.branch = branch

    def wanted(self, this_round: Sequence[Trial], per_round: int) -> int:
        return max(0, per_round - len(this_round))

    def suggest(self, count: int, trials: Sequence[Trial], step: int) -> list[Proposal]:
        """The next ``count`` proposals after the ``len(trials)`` already tried."""
        return list(itertools.islice(thorough_proposals(self.branch), len(trials), len(trials) + count))


def thorough_proposals(branch: Branch) -> Iterator[Proposal]:
    knobs = {k: v for k, v in branch.knob_choices.items() if k != "backend"}
    names = list(knobs)
    for backend in branch.backends:
        for config in branch.configs_for(backend):
            for combo in itertools.product(*(knobs[n] for n in names)):
                selection = {"deployment_mode": branch.mode, "backend": backend, **dict(zip(names, combo))}
                raw = {k: v for k, v in selection.items() if k != "deployment_mode"}
                yield Proposal(raw, selection, None, config)


def thorough_size(branch: Branch) -> int:
    """How many proposals the thorough policy makes for a branch."""
    combos = 1
    for name, values in branch.knob_choices.items():
        if name != "backend":
            combos *= len(values)
    return combos * sum(len(branch.configs_for(b)) for b in branch.backends)


__all__ = ["Proposal", "Suggester", "VizierSuggester", "ThoroughSuggester", "thorough_proposals", "thorough_size",
           "study_record", "round_counts", "ATTEMPT_CAP_FACTOR", "SCALAR_METRIC"]

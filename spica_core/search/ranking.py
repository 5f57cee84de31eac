"""Rank / Pareto (reference §4.3, §4.5): one ranking across branches and backends, or the front.

Higher score is always better, ties go to fewer GPUs; a Pareto goal keeps the non-dominated set
of raw objective vectors. A :class:`RankedCandidate` is what the ranking artifact holds.
"""
from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from spica_core.config.model import OptimizationTarget, SmartSearchConfig
from spica_core.evaluate.bands import Band, bands_from_dict, bands_to_dict
from spica_core.deployment import Candidate
from spica_core.evaluate.scoring import signed
from spica_core.store import canonical_json
from spica_core.search.trials import Trial


class Scored(Protocol):
    """What ranking reads of a candidate."""

    @property
    def score(self) -> float | None: ...
    @property
    def used_gpus(self) -> int: ...
    @property
    def objectives(self) -> Mapping[str, float] | None: ...


S = TypeVar("S", bound=Scored)


def rank(candidates: Iterable[S]) -> list[S]:
    """Best score first, ties toward fewer GPUs; stable, so remaining ties keep the given order."""
    return sorted(candidates, key=lambda c: (-float(c.score), int(c.used_gpus)))  # type: ignore[arg-type]


def dominates(a: Mapping[str, float], b: Mapping[str, float], objectives: Sequence[OptimizationTarget | str]) -> bool:
    """a is at least as good on every objective (in its direction) and strictly better on one."""
    strictly = False
    for obj in objectives:
        t = OptimizationTarget(obj)
        va, vb = signed(t, float(a[t.value])), signed(t, float(b[t.value]))
        if va < vb:
            return False
        if va > vb:
            strictly = True
    return strictly


def pareto_front(candidates: Iterable[S], objectives: Sequence[OptimizationTarget | str]) -> list[S]:
    """Non-dominated candidates (those with an objectives vector), sorted by the last objective ascending."""
    objs = [OptimizationTarget(o) for o in objectives]
    pool = [c for c in candidates if c.objectives and all(o.value in c.objectives for o in objs)]
    front = [c for c in pool
             if not any(other is not c and dominates(other.objectives, c.objectives, objs)  # type: ignore[arg-type]
                        for other in pool)]
    last = objs[-1].value
    return sorted(front, key=lambda c: float(c.objectives[last]))  # type: ignore[index]


@dataclass(frozen=True)
class RankedCandidate:
    """One place in the ranking (or one point of the front): a row of ``ranking.parquet``."""

    rank: int
    mode: str
    backend: str
    parallel: str                      # the parallel config's label, e.g. ``4×TP2``
    used_gpus: int
    score: float
    candidate: Candidate
    round: int
    trial: int
    metrics: dict[str, float] = field(default_factory=dict)
    objectives: dict[str, float] | None = None
    bands: dict[str, Band] = field(default_factory=dict)

    @classmethod
    def of(cls, rank_: int, trial: Trial) -> RankedCandidate:
        assert trial.candidate is not None and trial.score is not None  # evaluated successes only
        return cls(rank_, trial.mode, str(trial.backend), trial.parallel.label(), trial.used_gpus, trial.score,
                   trial.candidate, trial.round, trial.trial, dict(trial.metrics),
                   dict(trial.objectives) if trial.objectives else None, dict(trial.bands))

    def to_row(self) -> dict[str, Any]:
        return {"rank": self.rank, "mode": self.mode, "backend": self.backend, "parallel": self.parallel,
                "used_gpus": self.used_gpus, "score": self.score,
                "objectives_json": canonical_json(self.objectives) if self.objectives else None,
                "metrics_json": canonical_json(self.metrics),
                "sample_json": canonical_json(self.candidate.to_sample()), "round": self.round, "trial": self.trial,
                "bands_json": canonical_json(bands_to_dict(self.bands))}

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> RankedCandidate:
        return cls(int(row["rank"]), row["mode"], row["backend"], row["parallel"], int(row["used_gpus"]),
                   float(row["score"]), Candidate.from_sample(json.loads(row["sample_json"])), int(row["round"]),
                   int(row["trial"]), json.loads(row["metrics_json"]),
                   json.loads(row["objectives_json"]) if row["objectives_json"] else None,
                   bands_from_dict(json.loads(row["bands_json"] or "{}")))


def rank_trials(trials: Sequence[Trial], config: SmartSearchConfig) -> list[RankedCandidate]:
    """The ranking (scalar goal) or the front (Pareto goal) of the run's evaluated successes."""
    # in proposal order (rows are written as evaluations finish), so ties rank the same wherever they ran
    branch = {mode: i for i, mode in enumerate(dict.fromkeys(t.mode for t in trials))}
    evaluated = sorted((t for t in trials if t.is_evaluated_success), key=lambda t: (branch[t.mode], t.trial))
    ordered = pareto_front(evaluated, config.goal.objectives) if config.goal.is_pareto else rank(evaluated)
    return [RankedCandidate.of(i + 1, t) for i, t in enumerate(ordered)]


__all__ = ["RankedCandidate", "rank", "rank_trials", "pareto_front", "dominates", "Scored"]

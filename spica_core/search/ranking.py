"""Rank / Pareto: one ranking across branches and backends, or the front.

With an SLA, ``goal.sla_attainment`` is a requirement: candidates that meet it rank first, best score
first; those that miss it follow, highest attainment first. Equal scores go to higher goodput per GPU
(target ``min_gpus``), then to fewer GPUs. A Pareto goal keeps the non-dominated set of raw objective
vectors among the candidates that meet the requirement (all of them when none does). Neighbours whose
scores differ by less than their replays' run-to-run spread are near-ties (:func:`near_ties`), not an
order. A :class:`RankedCandidate` is what the ranking artifact holds.
"""
from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from spica_core.config.goal import OptimizationGoal, OptimizationTarget
from spica_core.config.model import SmartSearchConfig
from spica_core.evaluate.bands import Band, bands_from_dict, bands_to_dict
from spica_core.evaluate.calibration import Applied
from spica_core.deployment import Candidate
from spica_core.evaluate.scoring import attainment, meets_requirement, meets_sla, metric_value, reaches, signed
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
    @property
    def metrics(self) -> Mapping[str, float]: ...


S = TypeVar("S", bound=Scored)


def rank(candidates: Iterable[S], goal: OptimizationGoal | None = None) -> list[S]:
    """Those that meet the goal's SLA requirement first, best score first; those that miss it after them,
    highest attainment first. Equal scores: higher goodput per GPU for ``min_gpus``, then fewer GPUs; stable,
    so remaining ties keep the given order. Without a goal (or a requirement), by score alone."""
    required = goal.required_attainment if goal is not None else 0.0
    by_goodput = goal is not None and goal.target is OptimizationTarget.min_gpus

    def key(c: S) -> tuple[bool, float, float, float, int]:
        tie = metric_value(OptimizationTarget.goodput_per_gpu, c.metrics) if by_goodput else 0.0
        return order_key(float(c.score), attainment(c.metrics), required, tie,  # type: ignore[arg-type]
                         int(c.used_gpus))

    return sorted(candidates, key=key)


def order_key(score: float, share: float | None, required: float, tie: float = 0.0,
              gpus: int = 0) -> tuple[bool, float, float, float, int]:
    """The ranking's sort key (ascending): meeting the requirement first, then, for those that miss, higher
    attainment; then higher score, higher ``tie`` (goodput per GPU for min_gpus) and fewer ``gpus``."""
    misses = not reaches(share, required)
    return misses, -(share or 0.0) if misses else 0.0, -score, -tie, gpus


class Tieable(Protocol):
    """What :func:`near_ties` reads of a ranked candidate."""

    @property
    def rank(self) -> int: ...
    @property
    def score(self) -> float: ...
    @property
    def meets_sla(self) -> bool | None: ...
    @property
    def score_spread(self) -> float | None: ...


def near_ties(ranked: Sequence[Tieable]) -> dict[int, tuple[int, ...]]:
    """rank → the other ranks of its near-tie: neighbours in the ranking, none of them missing the SLA
    requirement (those are ordered by attainment), whose scores differ by no more than the larger of the two
    run-to-run spreads (``score_spread``; None or 0 for an exact replay). A chain of such neighbours is one tie."""
    groups: list[list[Tieable]] = []
    for r in ranked:
        if groups:
            prev = groups[-1][-1]
            width = max(prev.score_spread or 0.0, r.score_spread or 0.0)
            if (prev.meets_sla is not False and r.meets_sla is not False and width > 0
                    and abs(float(prev.score) - float(r.score)) <= width):
                groups[-1].append(r)
                continue
        groups.append([r])
    return {r.rank: tuple(o.rank for o in g if o is not r) for g in groups if len(g) > 1 for r in g}


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


def pareto_front(candidates: Iterable[S], objectives: Sequence[OptimizationTarget | str],
                 required_attainment: float = 0.0) -> list[S]:
    """Non-dominated candidates (those with an objectives vector), sorted by the last objective ascending.
    With a ``required_attainment``, only candidates that reach it are on the front, unless none does."""
    objs = [OptimizationTarget(o) for o in objectives]
    pool = [c for c in candidates if c.objectives and all(o.value in c.objectives for o in objs)]
    meeting = [c for c in pool if meets_requirement(required_attainment, c.metrics)]
    pool = meeting or pool
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
    attainment: float | None = None    # requests that met the SLA ÷ all requests; None without an SLA
    meets_sla: bool | None = None      # attainment ≥ goal.sla_attainment; None without an SLA
    calibration: Applied | None = None          # which calibration its numbers are under, if any
    uncalibrated: dict[str, float] = field(default_factory=dict)   # the replay's own metrics, when calibrated

    @classmethod
    def of(cls, rank_: int, trial: Trial, goal: OptimizationGoal) -> RankedCandidate:
        assert trial.candidate is not None and trial.score is not None  # evaluated successes only
        return cls(rank_, trial.mode, str(trial.backend), trial.parallel.label(), trial.used_gpus, trial.score,
                   trial.candidate, trial.round, trial.trial, dict(trial.metrics),
                   dict(trial.objectives) if trial.objectives else None, dict(trial.bands),
                   attainment(trial.metrics) if goal.sla is not None else None, meets_sla(goal, trial.metrics),
                   trial.calibration, dict(trial.uncalibrated))

    def to_row(self) -> dict[str, Any]:
        return {"rank": self.rank, "mode": self.mode, "backend": self.backend, "parallel": self.parallel,
                "used_gpus": self.used_gpus, "score": self.score, "attainment": self.attainment,
                "meets_sla": self.meets_sla,
                "objectives_json": canonical_json(self.objectives) if self.objectives else None,
                "metrics_json": canonical_json(self.metrics),
                "sample_json": canonical_json(self.candidate.to_sample()), "round": self.round, "trial": self.trial,
                "bands_json": canonical_json(bands_to_dict(self.bands)),
                "calibration_json": canonical_json(self.calibration.to_dict()) if self.calibration else None,
                "uncalibrated_json": canonical_json(self.uncalibrated) if self.uncalibrated else None}

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> RankedCandidate:
        return cls(int(row["rank"]), row["mode"], row["backend"], row["parallel"], int(row["used_gpus"]),
                   float(row["score"]), Candidate.from_sample(json.loads(row["sample_json"])), int(row["round"]),
                   int(row["trial"]), json.loads(row["metrics_json"]),
                   json.loads(row["objectives_json"]) if row["objectives_json"] else None,
                   bands_from_dict(json.loads(row["bands_json"] or "{}")),
                   None if row["attainment"] is None else float(row["attainment"]),
                   None if row["meets_sla"] is None else bool(row["meets_sla"]),
                   Applied.from_dict(json.loads(row["calibration_json"]) if row["calibration_json"] else None),
                   json.loads(row["uncalibrated_json"]) if row["uncalibrated_json"] else {})


def rank_trials(trials: Sequence[Trial], config: SmartSearchConfig) -> list[RankedCandidate]:
    """The ranking (scalar goal) or the front (Pareto goal) of the run's evaluated successes."""
    # in proposal order (rows are written as evaluations finish), so ties rank the same wherever they ran
    branch = {mode: i for i, mode in enumerate(dict.fromkeys(t.mode for t in trials))}
    evaluated = sorted((t for t in trials if t.is_evaluated_success), key=lambda t: (branch[t.mode], t.trial))
    goal = config.goal
    ordered = (pareto_front(evaluated, goal.objectives, goal.required_attainment) if goal.is_pareto
               else rank(evaluated, goal))
    return [RankedCandidate.of(i + 1, t, goal) for i, t in enumerate(ordered)]


__all__ = ["RankedCandidate", "rank", "order_key", "rank_trials", "pareto_front", "dominates", "near_ties", "Scored",
           "Tieable"]

"""Trials: one record per attempt of the search, the in-run cache of successes, and the outcome tally.

The trials table is the source of truth of a sweep (a study is rebuilt from it on resume), so a
:class:`Trial` owns its row format: JSON columns are written and decoded here and nowhere else.
"""
from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from spica_core.evaluate.bands import Band, bands_from_dict, bands_to_dict
from spica_core.deployment import Candidate
from spica_core.evaluate.calibration import Applied
from spica_core.evaluate.evaluation import Status
from spica_core.evaluate.requests import RequestLatencies
from spica_core.store import canonical_json
from spica_core.space.parallel import ParallelConfig
from spica_core.space.projection import ProjectionRecord


@dataclass(frozen=True)
class Trial:
    """One attempt: what the study asked, what ran, what came back (a row of ``trials.parquet``)."""

    mode: str
    round: int
    trial: int
    status: Status
    parallel: ParallelConfig
    params: dict[str, Any]                 # the raw suggestion, as the study saw it
    selection: dict[str, Any]              # decoded knob values (+ deployment_mode)
    ask: int = 0                           # the branch's ask (batch of proposals) that proposed it
    reason: str = ""
    cache_hit: bool = False                # answered from the cache (a repeat or an in-batch duplicate)
    duplicate_of: int | None = None
    cache_key: str = ""
    projection: ProjectionRecord | None = None
    candidate: Candidate | None = None     # None only when nothing was built (unsupported)
    score: float | None = None
    objectives: dict[str, float] | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    eval_seconds: float | None = None
    replay_seconds: float | None = None
    suggest_seconds: float | None = None   # the optimizer's time for the ask that proposed this trial
    suggested_by: str = ""                 # how it was picked: gp, space-filling, random or enumerated
    bands: dict[str, Band] = field(default_factory=dict)  # the error band on each predicted latency
    requests: RequestLatencies | None = None   # each request's latencies (scored again under a calibration)
    calibration: Applied | None = None         # the calibration its metrics and score are under, if any
    uncalibrated: dict[str, float] = field(default_factory=dict)   # the replay's own metrics, when calibrated

    @property
    def replay_metrics(self) -> dict[str, float]:
        """The metrics as the replay scored them, before any calibration."""
        return dict(self.uncalibrated or self.metrics)

    @property
    def backend(self) -> str | None:
        return self.selection.get("backend")

    @property
    def used_gpus(self) -> int:
        return self.parallel.used_gpus

    @property
    def is_evaluated_success(self) -> bool:
        """Feasible with a replay of its own: neither a cache hit nor a duplicate (which are hits)."""
        return self.status is Status.feasible and not self.cache_hit

    def to_row(self) -> dict[str, Any]:
        return {
            "mode": self.mode, "round": self.round, "ask": self.ask, "trial": self.trial,
            "status": self.status.value, "reason": self.reason, "cache_hit": self.cache_hit,
            "duplicate_of": self.duplicate_of, "cache_key": self.cache_key, "backend": self.backend,
            "used_gpus": self.used_gpus, "parallel": self.parallel.label(),
            "score": None if self.score is None else float(self.score),
            "objectives_json": None if self.objectives is None else canonical_json(self.objectives),
            "metrics_json": canonical_json(self.metrics),
            "params_json": canonical_json(self.params),
            "selection_json": canonical_json(self.selection),
            "projection_json": self.projection.to_json() if self.projection else None,
            "parallel_json": canonical_json({"mode": self.parallel.mode, **self.parallel.to_dict()}),
            "sample_json": canonical_json(self.candidate.to_sample() if self.candidate else {}),
            "eval_seconds": self.eval_seconds,
            "replay_seconds": self.replay_seconds,
            "suggest_seconds": self.suggest_seconds,
            "suggested_by": self.suggested_by,
            "bands_json": canonical_json(bands_to_dict(self.bands)),
            "requests": self.requests.to_bytes() if self.requests is not None else None,
            "calibration_json": canonical_json(self.calibration.to_dict()) if self.calibration else None,
            "uncalibrated_json": canonical_json(self.uncalibrated) if self.uncalibrated else None,
        }

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Trial:
        parallel_d = json.loads(row["parallel_json"])
        mode = parallel_d.pop("mode")
        sample = json.loads(row["sample_json"])
        return cls(
            mode=row["mode"], round=int(row["round"]), trial=int(row["trial"]), status=Status(row["status"]),
            parallel=ParallelConfig.from_dict(mode, parallel_d), params=json.loads(row["params_json"]),
            selection=json.loads(row["selection_json"]), ask=int(row["ask"]), reason=row["reason"] or "",
            cache_hit=bool(row["cache_hit"]), duplicate_of=row["duplicate_of"], cache_key=row["cache_key"] or "",
            projection=ProjectionRecord.from_json(row["projection_json"], mode) if row["projection_json"] else None,
            candidate=Candidate.from_sample(sample) if sample else None, score=row["score"],
            objectives=json.loads(row["objectives_json"]) if row["objectives_json"] else None,
            metrics=json.loads(row["metrics_json"]), eval_seconds=row["eval_seconds"],
            replay_seconds=row["replay_seconds"], suggest_seconds=row["suggest_seconds"],
            suggested_by=row["suggested_by"] or "", bands=bands_from_dict(json.loads(row["bands_json"] or "{}")),
            requests=RequestLatencies.from_bytes(row["requests"]) if row["requests"] is not None else None,
            calibration=Applied.from_dict(json.loads(row["calibration_json"]) if row["calibration_json"] else None),
            uncalibrated=json.loads(row["uncalibrated_json"]) if row["uncalibrated_json"] else {})


@dataclass
class EvalCache:
    """Successful evaluations of this run by cache key (only successes are cached)."""

    entries: dict[str, Trial] = field(default_factory=dict)

    def add(self, trial: Trial) -> None:
        self.entries[trial.cache_key] = trial

    def get(self, key: str) -> Trial | None:
        return self.entries.get(key)

    @classmethod
    def of(cls, trials: Sequence[Trial]) -> EvalCache:
        return cls({t.cache_key: t for t in trials if t.is_evaluated_success})


@dataclass
class Tally:
    """The outcome counts the summary prints."""

    attempts: int = 0
    feasible: int = 0
    infeasible: int = 0
    failed: int = 0
    unsupported: int = 0
    cache_hits: int = 0
    reasons: dict[str, int] = field(default_factory=dict)
    replay_seconds: float = 0.0       # summed over the replays (they run in parallel workers)
    optimizer_seconds: float = 0.0    # summed over the asks

    @classmethod
    def of(cls, trials: Sequence[Trial]) -> Tally:
        t = cls(attempts=len(trials))
        asks = {(trial.mode, trial.ask): trial.suggest_seconds or 0.0 for trial in trials}
        t.optimizer_seconds = sum(asks.values())
        t.replay_seconds = sum(trial.replay_seconds or 0.0 for trial in trials if not trial.cache_hit)
        for trial in trials:
            if trial.cache_hit:
                t.cache_hits += 1
                continue
            status = trial.status.value
            setattr(t, status, getattr(t, status) + 1)
            if trial.status is not Status.feasible:
                reason = reason_class(trial.reason or status)
                t.reasons[reason] = t.reasons.get(reason, 0) + 1
        return t

    def top_reasons(self, n: int = 3) -> list[tuple[str, int]]:
        return sorted(self.reasons.items(), key=lambda kv: -kv[1])[:n]


def reason_class(reason: str) -> str:
    """Group reasons that differ only in numbers (e.g. 'over budget: 40 GPUs > 32')."""
    return reason.split(":")[0].strip()[:160] if ":" in reason else reason[:160]


__all__ = ["Trial", "EvalCache", "Tally"]

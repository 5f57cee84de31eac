"""The emit stage's extra replays: the emitted candidates' headroom, and the confidence check.

* Headroom (``spica_core.evaluate.headroom``): how much more traffic each emitted candidate takes
  before its SLA breaks; at most 8 replays each.
* Replay spread (``spica_core.evaluate.repeats``): a KV-router candidate's replays differ slightly from
  run to run (the runtime breaks routing ties with an unseeded generator), so each emitted one is
  replayed ``SPREAD_REPEATS`` times and twice the half-width of its TTFT and ITL spread is added to
  its band (three replays alone under-cover a fourth); round-robin replays are exact.
* The confidence check: the report says which ``goal.sla_confidence`` ranked the candidates and how
  the top five would rank at 0.9, each replayed once more with the SLA held at that band quantile
  (``spica_core.evaluate.bands``). Only SLA-based objectives (goodput) can move; for the others the
  SLA does not enter the score.

``spica emit`` replays nothing, so it keeps what the sweep's emit stage found.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from spica_core.config.model import GOODPUT_TARGETS, SmartSearchConfig
from spica_core.emit.records import CandidateRecord
from spica_core.errors import SpicaError
from spica_core.evaluate.evaluator import EvalRequest, evaluate_one
from spica_core.evaluate.bands import load_bands
from spica_core.evaluate.headroom import find_headroom, metrics_attainment
from spica_core.evaluate.repeats import replay_is_exact, replay_spread

CHECK_CONFIDENCE = 0.9
CHECK_TOP = 5
SPREAD_REPEATS = 3
SPREAD_WIDENING = 2.0   # three replays' half-width misses a fourth replay about 80 % of the time


@dataclass(frozen=True)
class ConfidenceCheck:
    """The top candidates' scores with the SLA held at ``confidence``; None where the replay failed."""

    confidence: float
    scores: dict[int, float | None]   # rank -> score at that confidence

    def reranked(self) -> list[int]:
        """The ranks in the order they would have at ``confidence`` (failed ones last)."""
        return sorted(self.scores, key=lambda r: (self.scores[r] is None, -(self.scores[r] or 0.0), r))


def request_of(record: CandidateRecord, config: SmartSearchConfig, trace_file: Path | None,
               goal: Any = None) -> EvalRequest:
    """The evaluation request that replays a ranked candidate again."""
    c = record.candidate
    return EvalRequest(candidate=replace(c), workload=config.workload, goal=goal or config.goal,
                       trace_file=str(trace_file) if trace_file else None,
                       kv_load_ratio=c.kv_load.ratio if c.kv_load else None, eval_id=f"rank-{record.rank}")


def with_headroom(records: Sequence[CandidateRecord], ranks: Sequence[int], config: SmartSearchConfig,
                  trace_file: Path | None) -> list[CandidateRecord]:
    """The records with the headroom of those in ``ranks`` (None for every record without an SLA)."""
    if config.goal.sla is None:
        return list(records)
    out = []
    for r in records:
        if r.rank in ranks:
            r = replace(r, headroom=find_headroom(request_of(r, config, trace_file), metrics_attainment(r.metrics)))
        out.append(r)
    return out


def with_spread(records: Sequence[CandidateRecord], ranks: Sequence[int], config: SmartSearchConfig,
                trace_file: Path | None) -> list[CandidateRecord]:
    """The records whose replay is not exact (KV router) among ``ranks``, with their run-to-run spread in
    their bands; a candidate whose extra replay fails keeps its band and gets the reason as its spread note."""
    out = []
    for r in records:
        c = r.candidate
        if r.rank in ranks and not replay_is_exact(c):
            try:
                spread = replay_spread(request_of(r, config, trace_file), SPREAD_REPEATS).band_spread()
            except SpicaError:
                spread = {}
            widened = {k: SPREAD_WIDENING * v for k, v in spread.items()}
            bands = load_bands().bands(c.context.model_name, c.context.hardware_sku, c.backend, r.metrics, widened)
            r = replace(r, bands=bands)
        out.append(r)
    return out


def sla_moves_score(config: SmartSearchConfig) -> bool:
    goal = config.goal
    return goal.sla is not None and bool(GOODPUT_TARGETS & set(goal.objectives)) and not goal.is_pareto


def confidence_check(records: Sequence[CandidateRecord], config: SmartSearchConfig, trace_file: Path | None,
                     confidence: float = CHECK_CONFIDENCE, top: int = CHECK_TOP) -> ConfidenceCheck | None:
    """Replay the top ``top`` records with the SLA at ``confidence``; None when the SLA cannot move a score
    or the goal already asks for that confidence."""
    if not sla_moves_score(config) or config.goal.sla_confidence == confidence or not records:
        return None
    goal = config.goal.model_copy(update={"sla_confidence": confidence})
    scores: dict[int, float | None] = {}
    for r in records[:top]:
        outcome = evaluate_one(request_of(r, config, trace_file, goal))
        scores[r.rank] = outcome.score if outcome.feasible else None
    return ConfidenceCheck(confidence, scores)


__all__ = ["ConfidenceCheck", "confidence_check", "sla_moves_score", "with_headroom", "with_spread", "request_of",
           "CHECK_CONFIDENCE", "CHECK_TOP"]

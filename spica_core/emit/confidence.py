"""How the top candidates would rank if the SLA had to hold at another confidence (goal.sla_confidence).

The report says which confidence ranked the candidates and how the top five would rank at 0.9: each
is replayed once more with the SLA held at that band quantile (``spica_core.evaluate.bands``). Only
SLA-based objectives (goodput) can move; for the others the SLA does not enter the score.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from spica_core.config.model import GOODPUT_TARGETS, SmartSearchConfig
from spica_core.emit.records import CandidateRecord
from spica_core.evaluate.evaluator import EvalRequest, evaluate_one

CHECK_CONFIDENCE = 0.9
CHECK_TOP = 5


@dataclass(frozen=True)
class ConfidenceCheck:
    """The top candidates' scores with the SLA held at ``confidence``; None where the replay failed."""

    confidence: float
    scores: dict[int, float | None]   # rank -> score at that confidence

    def reranked(self) -> list[int]:
        """The ranks in the order they would have at ``confidence`` (failed ones last)."""
        return sorted(self.scores, key=lambda r: (self.scores[r] is None, -(self.scores[r] or 0.0), r))


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
        request = EvalRequest(candidate=replace(r.candidate), workload=config.workload, goal=goal,
                              trace_file=str(trace_file) if trace_file else None,
                              kv_load_ratio=r.candidate.kv_load.ratio if r.candidate.kv_load else None)
        outcome = evaluate_one(request)
        scores[r.rank] = outcome.score if outcome.feasible else None
    return ConfidenceCheck(confidence, scores)


__all__ = ["ConfidenceCheck", "confidence_check", "sla_moves_score", "CHECK_CONFIDENCE", "CHECK_TOP"]

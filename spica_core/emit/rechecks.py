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

They run side by side on the sweep's workers (``spica_core.evaluate.jobs``): a headroom search is a chain of
replays, each depending on the last, so a free worker takes another candidate's next replay meanwhile.
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
from spica_core.evaluate.bands import load_bands
from spica_core.evaluate.evaluator import EvalRequest
from spica_core.evaluate.headroom import headroom_job, metrics_attainment
from spica_core.evaluate.jobs import Job, run_job, run_jobs
from spica_core.evaluate.repeats import replay_is_exact, spread_job
from spica_core.evaluate.workers import Evaluator

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
                  trace_file: Path | None, evaluator: Evaluator | None = None) -> list[CandidateRecord]:
    """The records with the headroom of those in ``ranks`` (None for every record without an SLA)."""
    return recheck(records, ranks, config, trace_file, evaluator, spread=False, confidence=None)[0]


def with_spread(records: Sequence[CandidateRecord], ranks: Sequence[int], config: SmartSearchConfig,
                trace_file: Path | None, evaluator: Evaluator | None = None) -> list[CandidateRecord]:
    """The records whose replay is not exact (KV router) among ``ranks``, with their run-to-run spread in
    their bands; a candidate whose extra replay fails keeps its band and gets the reason as its spread note."""
    return recheck(records, ranks, config, trace_file, evaluator, headroom=False, confidence=None)[0]


def sla_moves_score(config: SmartSearchConfig) -> bool:
    goal = config.goal
    return goal.sla is not None and bool(GOODPUT_TARGETS & set(goal.objectives)) and not goal.is_pareto


def confidence_check(records: Sequence[CandidateRecord], config: SmartSearchConfig, trace_file: Path | None,
                     confidence: float = CHECK_CONFIDENCE, top: int = CHECK_TOP,
                     evaluator: Evaluator | None = None) -> ConfidenceCheck | None:
    """Replay the top ``top`` records with the SLA at ``confidence``; None when the SLA cannot move a score
    or the goal already asks for that confidence."""
    return recheck(records, (), config, trace_file, evaluator, confidence=confidence, top=top)[1]


def recheck(records: Sequence[CandidateRecord], ranks: Sequence[int], config: SmartSearchConfig,
            trace_file: Path | None, evaluator: Evaluator | None = None, *, headroom: bool = True,
            spread: bool = True, confidence: float | None = CHECK_CONFIDENCE,
            top: int = CHECK_TOP) -> tuple[list[CandidateRecord], ConfidenceCheck | None]:
    """Every extra replay of the emit stage at once: the headroom and the spread of the records in ``ranks``,
    and the ``confidence`` check of the top ``top`` (None: no check). On ``evaluator``, a free worker takes
    the next replay of any of them; without one, they run one after another in this process."""
    jobs: dict[tuple[str, int], Job[Any]] = {}
    for r in records:
        if r.rank not in ranks:
            continue
        if headroom and config.goal.sla is not None:
            jobs["headroom", r.rank] = headroom_job(request_of(r, config, trace_file), metrics_attainment(r.metrics))
        if spread and not replay_is_exact(r.candidate):
            jobs["spread", r.rank] = _spread_or_none(request_of(r, config, trace_file))
    checking = (confidence is not None and sla_moves_score(config) and config.goal.sla_confidence != confidence
                and bool(records))
    if checking:
        goal = config.goal.model_copy(update={"sla_confidence": confidence})
        for r in records[:top]:
            jobs["confidence", r.rank] = _score(request_of(r, config, trace_file, goal))
    if evaluator is None:
        found = dict(zip(jobs, (run_job(job) for job in jobs.values())))
    else:
        found = dict(zip(jobs, run_jobs(evaluator, list(jobs.values()))))
    out = []
    for r in records:
        if ("headroom", r.rank) in found:
            r = replace(r, headroom=found["headroom", r.rank])
        if ("spread", r.rank) in found:
            widened = {k: SPREAD_WIDENING * v for k, v in found["spread", r.rank].items()}
            bands = load_bands().bands(r.candidate.context.model_name, r.candidate.context.hardware_sku,
                                       r.candidate.backend, r.metrics, widened)
            r = replace(r, bands=bands)
        out.append(r)
    if not checking:
        return out, None
    return out, ConfidenceCheck(confidence, {rank: v for (kind, rank), v in found.items() if kind == "confidence"})  # type: ignore[arg-type]


def _spread_or_none(request: EvalRequest) -> Job[dict[str, float]]:
    """The candidate's band spread; empty when one of its replays is not scored (its band stays as it was)."""
    try:
        return (yield from spread_job(request, SPREAD_REPEATS)).band_spread()
    except SpicaError:
        return {}


def _score(request: EvalRequest) -> Job[float | None]:
    """One replay's score; None when it is not feasible."""
    (outcome,) = yield [request]
    return outcome.score if outcome.feasible else None


__all__ = ["ConfidenceCheck", "confidence_check", "recheck", "sla_moves_score", "with_headroom", "with_spread",
           "request_of", "CHECK_CONFIDENCE", "CHECK_TOP"]

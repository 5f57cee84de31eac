"""The emit stage's extra replays: the emitted candidates' headroom, and the confidence check.

* Headroom (``spica_core.evaluate.headroom``): how much more traffic each emitted candidate takes
  before its SLA breaks; at most 8 replays each.
* Replay spread (``spica_core.evaluate.repeats``): a KV-router candidate's replays differ slightly from
  run to run (the runtime breaks routing ties with an unseeded generator), so each emitted one is
  replayed ``SPREAD_REPEATS`` times and twice the half-width of its TTFT and ITL spread is added to
  its band (three replays alone under-cover a fourth); round-robin replays are exact. Twice the
  half-width of its scores is its ``score_spread``: neighbours in the ranking closer than that are
  near-ties (``spica_core.search.ranking.near_ties``).
* The confidence check: the report says which ``goal.sla_confidence`` ranked the candidates and how
  the top five would rank at 0.9, each replayed once more with the SLA held at that band quantile
  (``spica_core.evaluate.bands``). Only a goodput objective or the SLA requirement
  (``goal.sla_attainment``) can move; otherwise the SLA does not enter the ranking.

They run side by side on the sweep's workers (``spica_core.evaluate.jobs``): a headroom search is a chain of
replays, each depending on the last, so a free worker takes another candidate's next replay meanwhile.
``spica emit`` replays nothing, so it keeps what the sweep's emit stage found.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from spica_core.config.goal import GOODPUT_TARGETS
from spica_core.config.model import SmartSearchConfig
from spica_core.emit.records import CandidateRecord
from spica_core.errors import SpicaError
from spica_core.evaluate.calibration import Calibration
from spica_core.evaluate.bands import load_bands
from spica_core.evaluate.evaluation import EvalRequest
from spica_core.evaluate.headroom import headroom_job
from spica_core.evaluate.jobs import Job, run_job, run_jobs
from spica_core.evaluate import ReplaySpread, replay_is_exact, spread_job
from spica_core.evaluate.scoring import attainment, reaches
from spica_core.evaluate.evaluator import Evaluator
from spica_core.search.ranking import near_ties, order_key

CHECK_CONFIDENCE = 0.9
CHECK_TOP = 5
SPREAD_REPEATS = 3
SPREAD_WIDENING = 2.0   # three replays' half-width misses a fourth replay about 80 % of the time


@dataclass(frozen=True)
class ConfidenceCheck:
    """The top candidates' scores and SLA attainment with the SLA held at ``confidence``; None where the
    replay failed. ``required`` is the goal's SLA requirement (0: none)."""

    confidence: float
    scores: dict[int, float | None]   # rank -> score at that confidence
    attainments: dict[int, float | None] = field(default_factory=dict)   # rank -> attainment at that confidence
    required: float = 0.0

    def misses(self, rank: int) -> bool:
        return not reaches(self.attainments.get(rank), self.required)

    def reranked(self) -> list[int]:
        """The ranks in the order they would have at ``confidence``, by the ranking's own rule (failed last)."""
        return sorted(self.scores, key=lambda r: (self.scores[r] is None, order_key(
            self.scores[r] or 0.0, self.attainments.get(r), self.required), r))


def request_of(record: CandidateRecord, config: SmartSearchConfig, trace_file: Path | None,
               goal: Any = None, calibration: Calibration | None = None) -> EvalRequest:
    """The evaluation request that replays a ranked candidate again (under the run's calibration, if any)."""
    c = record.candidate
    return EvalRequest(candidate=replace(c), workload=config.workload, goal=goal or config.goal,
                       trace_file=str(trace_file) if trace_file else None,
                       kv_load_ratio=c.kv_load.ratio if c.kv_load else None, eval_id=f"rank-{record.rank}",
                       calibration=calibration)


def with_headroom(records: Sequence[CandidateRecord], ranks: Sequence[int], config: SmartSearchConfig,
                  trace_file: Path | None, evaluator: Evaluator | None = None) -> list[CandidateRecord]:
    """The records with the headroom of those in ``ranks`` (None for every record without an SLA)."""
    return recheck(records, ranks, config, trace_file, evaluator, spread=False, confidence=None)[0]


def with_spread(records: Sequence[CandidateRecord], ranks: Sequence[int], config: SmartSearchConfig,
                trace_file: Path | None, evaluator: Evaluator | None = None) -> list[CandidateRecord]:
    """The records whose replay is not exact (KV router) among ``ranks``, with their run-to-run spread in
    their bands; a candidate whose extra replay fails keeps its band and gets the reason as its spread note."""
    return recheck(records, ranks, config, trace_file, evaluator, headroom=False, confidence=None)[0]


def sla_moves_ranking(config: SmartSearchConfig) -> bool:
    """Whether the SLA can change a scalar ranking: through goodput, or as a requirement."""
    goal = config.goal
    return (goal.sla is not None and not goal.is_pareto
            and (bool(GOODPUT_TARGETS & set(goal.objectives)) or goal.required_attainment > 0))


def confidence_check(records: Sequence[CandidateRecord], config: SmartSearchConfig, trace_file: Path | None,
                     confidence: float = CHECK_CONFIDENCE, top: int = CHECK_TOP,
                     evaluator: Evaluator | None = None) -> ConfidenceCheck | None:
    """Replay the top ``top`` records with the SLA at ``confidence``; None when the SLA cannot move a score
    or the goal already asks for that confidence."""
    return recheck(records, (), config, trace_file, evaluator, confidence=confidence, top=top)[1]


def recheck(records: Sequence[CandidateRecord], ranks: Sequence[int], config: SmartSearchConfig,
            trace_file: Path | None, evaluator: Evaluator | None = None, *, headroom: bool = True,
            spread: bool = True, confidence: float | None = CHECK_CONFIDENCE, top: int = CHECK_TOP,
            calibration: Calibration | None = None) -> tuple[list[CandidateRecord], ConfidenceCheck | None]:
    """Every extra replay of the emit stage at once: the headroom and the spread of the records in ``ranks``,
    and the ``confidence`` check of the top ``top`` (None: no check). On ``evaluator``, a free worker takes
    the next replay of any of them; without one, they run one after another in this process. ``calibration``:
    the run's, which every extra replay is scored under."""
    jobs: dict[tuple[str, int], Job[Any]] = {}
    for r in records:
        if r.rank not in ranks:
            continue
        if headroom and config.goal.sla is not None:
            jobs["headroom", r.rank] = headroom_job(request_of(r, config, trace_file, calibration=calibration),
                                                    attainment(r.metrics))
        if spread and not replay_is_exact(r.candidate):
            jobs["spread", r.rank] = _spread_or_none(request_of(r, config, trace_file, calibration=calibration))
    checking = (confidence is not None and sla_moves_ranking(config) and config.goal.sla_confidence != confidence
                and bool(records))
    if checking:
        goal = config.goal.model_copy(update={"sla_confidence": confidence})
        for r in records[:top]:
            jobs["confidence", r.rank] = _score(request_of(r, config, trace_file, goal, calibration))
    if evaluator is None:
        found = dict(zip(jobs, (run_job(job) for job in jobs.values())))
    else:
        found = dict(zip(jobs, run_jobs(evaluator, list(jobs.values()))))
    out = []
    for r in records:
        if ("headroom", r.rank) in found:
            r = replace(r, headroom=found["headroom", r.rank])
        spread: ReplaySpread | None = found.get(("spread", r.rank))
        if spread is not None:
            widened = {k: SPREAD_WIDENING * v for k, v in spread.band_spread().items()}
            group = r.candidate.group
            raw = r.uncalibrated or r.metrics
            bands = load_bands().bands(*group, raw, widened)
            if calibration is not None:
                bands = calibration.bands(*group, raw, bands)
            half = max(spread.score.median - spread.score.min, spread.score.max - spread.score.median)
            r = replace(r, bands=bands, score_spread=SPREAD_WIDENING * half)
        out.append(r)
    if not config.goal.is_pareto:
        ties = near_ties(out)
        out = [replace(r, tied_with=ties.get(r.rank, ())) for r in out]
    if not checking:
        return out, None
    checked = {rank: v for (kind, rank), v in found.items() if kind == "confidence"}
    return out, ConfidenceCheck(confidence, {r: v[0] for r, v in checked.items()},
                                {r: v[1] for r, v in checked.items()}, config.goal.required_attainment)


def _spread_or_none(request: EvalRequest) -> Job[ReplaySpread | None]:
    """The candidate's replay spread; None when one of its replays is not scored (its band stays as it was)."""
    try:
        return (yield from spread_job(request, SPREAD_REPEATS))
    except SpicaError:
        return None


def _score(request: EvalRequest) -> Job[tuple[float | None, float | None]]:
    """One replay's score and SLA attainment; None for both when it is not feasible."""
    (outcome,) = yield [request]
    return (outcome.score, attainment(outcome.metrics)) if outcome.feasible else (None, None)


__all__ = ["ConfidenceCheck", "confidence_check", "recheck", "sla_moves_ranking", "with_headroom", "with_spread",
           "request_of", "CHECK_CONFIDENCE", "CHECK_TOP"]

"""The search loop of one branch (reference §6.2–§6.6, §7.4–§7.5), free of any orchestration.

A round asks its suggester for proposals, answers repeats from the in-run cache, evaluates the
rest in parallel and records every attempt as a :class:`Trial`. The trials table is the source of
truth: a round that already finished is read back, never re-evaluated, and an interrupted one
continues exactly where it stopped.
"""
from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import TYPE_CHECKING, Any

from spica_core.config.model import SmartSearchConfig, SweepPolicy
from spica_core.evaluate.candidate import Candidate
from spica_core.evaluate.evaluator import EvalRequest, Outcome, Status
from spica_core.evaluate.pool import Evaluator
from spica_core.run.fingerprint import fingerprint
from spica_core.search.suggesters import (
    ATTEMPT_CAP_FACTOR, SCALAR_METRIC, Proposal, Suggester, ThoroughSuggester, VizierSuggester, round_counts,
    thorough_size,
)
from spica_core.search.trials import EvalCache, Trial
from spica_core.search.warm_start import WarmStart
from spica_core.space.branches import Branch
from spica_core.space.parallel import ParallelConfig

if TYPE_CHECKING:
    from spica_core.predictors import LoadPredictorResult


@dataclass(frozen=True)
class SearchContext:
    """What every evaluation of a run shares; its fingerprint is part of every cache key (§6.3)."""

    config: SmartSearchConfig          # after the goal's policy filtering
    trace_file: str | None
    load_predictor: LoadPredictorResult | None
    profile_dir: str | None = None
    warm_start: WarmStart | None = None  # an earlier run's top candidates and trials (never their scores)
    workers: int = field(default=0, compare=False)  # evaluations run at once (the evaluator's); 0: sweep.workers
    suggesters: dict[str, Suggester] = field(default_factory=dict, compare=False, repr=False)

    def __getstate__(self) -> dict[str, Any]:
        """Pickled without the live suggesters (their designers hold compiled code); they are rebuilt."""
        state = dict(self.__dict__)
        state["suggesters"] = {}
        return state

    @cached_property
    def key(self) -> str:
        """Computed once: every proposal's cache key includes it."""
        lp = self.load_predictor
        key: dict[str, Any] = {"config": self.config.normalised(), "load_predictor": lp.rows() if lp else None}
        if self.warm_start:  # what is evaluated first, and the studies' prior, are part of what the run searched
            key["warm_start"] = self.warm_start.key()
        return fingerprint(key)

    def objectives(self) -> list[tuple[str, str]]:
        goal = self.config.goal
        if goal.is_pareto:
            return [(o.value, "min" if o.value == "e2e_latency" else "max") for o in goal.objectives]
        return [(SCALAR_METRIC, "max")]

    def suggester(self, branch: Branch) -> Suggester:
        """One per branch for the life of the process, so a Vizier designer stays warm across rounds."""
        known = self.suggesters.get(branch.mode)
        if known is not None and known.space.branch == branch:
            return known
        sweep = self.config.sweep
        made: Suggester
        if sweep.policy is SweepPolicy.thorough:
            made = ThoroughSuggester(branch)
        else:
            made = VizierSuggester(branch, self.objectives(), pareto=self.config.goal.is_pareto,
                                   algorithm=sweep.algorithm.value, seed=sweep.seed,
                                   budget=sweep.max_rounds * sweep.per_round, workers=self.workers or sweep.workers,
                                   warm_start=self.warm_start.of_mode(branch.mode) if self.warm_start else None)
        self.suggesters[branch.mode] = made
        return made

    def request(self, proposal: Proposal, eval_id: str) -> EvalRequest:
        winners = self.load_predictor.best_by_interval if self.load_predictor else None
        candidate = Candidate.unroll(self.config.search_space, proposal.selection, proposal.parallel, winners)
        ratio = proposal.selection.get("kv_load_ratio")
        return EvalRequest.from_config(self.config, candidate, trace_file=self.trace_file,
                                       profile_dir=self.profile_dir,
                                       kv_load_ratio=None if ratio is None else float(ratio), eval_id=eval_id)


def cache_key(context_key: str, selection: Mapping[str, Any], config: ParallelConfig) -> str:
    return fingerprint({"context": context_key, "selection": dict(selection), "parallel": config.to_dict(),
                        "mode": config.mode})


def study_metrics(context: SearchContext, outcome: Outcome) -> dict[str, float]:
    """What the study observes: the signed score, or the raw value per Pareto objective."""
    if context.config.goal.is_pareto:
        return {k: float(v) for k, v in (outcome.objectives or {}).items()}
    return {SCALAR_METRIC: float(outcome.score)}  # type: ignore[arg-type]


def finite_or_infeasible(context: SearchContext, outcome: Outcome) -> Outcome:
    """A feasible outcome whose objective is not finite (e.g. no request completed) cannot be ranked
    or told to the study: it becomes infeasible with that reason."""
    if outcome.feasible:
        metrics = study_metrics(context, outcome)
        if not metrics or not all(math.isfinite(v) for v in metrics.values()):
            return replace(outcome, status=Status.infeasible,
                           reason=f"non-finite objective {metrics} (did any request complete?)")
    return outcome


# ---------------------------------------------------------------- the round


@dataclass
class RoundResult:
    trials: list[Trial] = field(default_factory=list)
    unique: int = 0
    attempts: int = 0
    stalled: bool = False
    message: str = ""


def round_plan(branches: Sequence[Branch], config: SmartSearchConfig) -> tuple[dict[str, int], int]:
    """Rounds per branch and the evaluation target (§6.1): rapid → max_rounds × per_round per branch;
    thorough → enough rounds to enumerate each branch, the target being the space's size."""
    sweep = config.sweep
    if sweep.policy is SweepPolicy.thorough:
        rounds = {b.mode: -(-thorough_size(b) // sweep.per_round) for b in branches}
        return rounds, sum(thorough_size(b) for b in branches)
    return {b.mode: sweep.max_rounds for b in branches}, len(branches) * sweep.max_rounds * sweep.per_round


def run_round(branch: Branch, context: SearchContext, round_no: int, trials: Sequence[Trial], evaluator: Evaluator,
              cache: EvalCache, on_result: Callable[[Trial], None] | None = None,
              on_batch: Callable[[list[Trial]], None] | None = None) -> RoundResult:
    """One barrier round of §6.2 for one branch, resumed from ``trials`` (every trial of the run so far).

    Before every ask the suggester sees the branch's trials in trial order, and ``on_batch``
    receives each ask's trials once evaluated, so a resumed round asks, projects and evaluates
    exactly what an uninterrupted one would; a finished round is returned as recorded.
    """
    per_round = context.config.sweep.per_round
    suggester = context.suggester(branch)
    history = [t for t in trials if t.mode == branch.mode and t.round < round_no]
    rows = [t for t in trials if t.mode == branch.mode and t.round == round_no]
    ask = max((t.ask for t in rows), default=-1) + 1
    exhausted = False
    while (count := suggester.wanted(rows, per_round)) > 0:
        started = time.perf_counter()
        proposals = suggester.suggest(count, [*history, *rows], step=round_no * 1000 + ask)
        if not proposals:
            exhausted = True
            break
        new = _evaluate_ask(branch, context, round_no, ask, len(history) + len(rows), proposals, evaluator, cache,
                            on_result, suggest_seconds=time.perf_counter() - started)
        rows.extend(new)
        if on_batch is not None:
            on_batch(new)
        ask += 1
    unique, attempts = round_counts(rows)
    result = RoundResult(rows, unique, attempts)
    if exhausted:
        result.stalled = True
        result.message = (f"{branch.mode}: legal space exhausted: all {suggester.space.size} candidate(s) of the "
                          f"branch have been tried (round {round_no + 1}); moving on")
    elif suggester.stalls and unique < per_round:  # §6.5: a round short of its target ends the branch
        result.stalled = True
        result.message = (f"{branch.mode}: stopped early: {unique}/{per_round} unique successful evaluations "
                          f"after {attempts} attempt(s) in round {round_no + 1} (the attempt cap is "
                          f"{ATTEMPT_CAP_FACTOR} × candidates_per_round); moving on")
    return result


def _evaluate_ask(branch: Branch, context: SearchContext, round_no: int, ask: int, first: int,
                  proposals: Sequence[Proposal], evaluator: Evaluator, cache: EvalCache,
                  on_result: Callable[[Trial], None] | None, suggest_seconds: float) -> list[Trial]:
    """One ask: unsupported pairs and cache hits are answered at once, in-batch duplicates share
    their primary's outcome, and the rest are evaluated in parallel."""
    batch: dict[int, Trial] = {}
    primaries: dict[str, tuple[int, Proposal]] = {}            # cache key → the proposal that replays it
    duplicates: dict[str, list[tuple[int, Proposal]]] = {}

    def trial(t: int, p: Proposal, status: Status, key: str, **kw: Any) -> Trial:
        return Trial(branch.mode, round_no, t, status, p.parallel, p.raw, p.selection, ask=ask, cache_key=key,
                     projection=p.projection, suggest_seconds=suggest_seconds, suggested_by=p.suggested_by, **kw)

    for t, p in enumerate(proposals, start=first):
        key = cache_key(context.key, p.selection, p.parallel)
        backend = p.selection.get("backend")
        if backend not in branch.supported_backends.get(p.parallel, ()):
            batch[t] = trial(t, p, Status.unsupported, key,
                             reason=f"unsupported: {backend} cannot run {p.parallel.label()}")
        elif (hit := cache.get(key)) is not None:
            batch[t] = trial(t, p, Status.feasible, key, cache_hit=True, **_result_of(hit))
        elif key in primaries:
            duplicates.setdefault(key, []).append((t, p))
        else:
            primaries[key] = (t, p)
    requests = [context.request(p, f"{branch.mode}-{t}") for t, p in primaries.values()]
    outcomes = evaluator.evaluate_batch(requests) if requests else []
    for (key, (t, p)), outcome in zip(primaries.items(), outcomes):
        outcome = finite_or_infeasible(context, outcome)
        timings = outcome.timings
        batch[t] = trial(t, p, outcome.status, key, reason=outcome.reason, candidate=outcome.candidate,
                         score=outcome.score, objectives=outcome.objectives, metrics=outcome.metrics,
                         bands=outcome.bands,
                         eval_seconds=float(timings.get("total_s", 0.0)) if timings else None,
                         replay_seconds=float(timings.get("replay_s", 0.0)) if timings else None)
        if batch[t].is_evaluated_success:
            cache.add(batch[t])
        for dt, dp in duplicates.get(key, []):
            batch[dt] = trial(dt, dp, outcome.status, key, reason=outcome.reason, cache_hit=outcome.feasible,
                              duplicate_of=t, **_result_of(batch[t]))
        if on_result is not None:
            on_result(batch[t])
    return [batch[t] for t in sorted(batch)]


def _result_of(trial: Trial) -> dict[str, Any]:
    """What a cache hit or duplicate copies from the trial that ran."""
    return {"candidate": trial.candidate, "score": trial.score, "objectives": trial.objectives,
            "metrics": dict(trial.metrics), "bands": dict(trial.bands)}


__all__ = ["SearchContext", "RoundResult", "run_round", "round_plan", "cache_key", "study_metrics",
           "finite_or_infeasible"]

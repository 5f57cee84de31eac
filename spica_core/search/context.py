"""What every evaluation of a run shares (:class:`SearchContext`: the config, the trace, the load predictor, the
warm start and each branch's suggester), the cache key of a proposal, and what a study is told of an outcome.
The search loops (``rounds.py``, ``branch_loop.py``) take all of it from here.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import TYPE_CHECKING, Any, Final

from spica_core.config.goal import OptimizationTarget
from spica_core.config.model import SmartSearchConfig
from spica_core.config.sweep import SweepPolicy
from spica_core.deployment import Candidate
from spica_core.evaluate.calibration import Calibration
from spica_core.evaluate.evaluation import EvalRequest, Outcome, Status
from spica_core.evaluate.scoring import search_value
from spica_core.store import fingerprint
from spica_core.search.optimizer import OptimizerProcess
from spica_core.search.suggesters import SCALAR_METRIC, Proposal, Suggester, ThoroughSuggester, VizierSuggester
from spica_core.search.warm_start import WarmStart
from spica_core.space.branches import Branch
from spica_core.space.parallel import ParallelConfig

if TYPE_CHECKING:
    from spica_core.predictors import LoadPredictorResult


# What a branch's recorded trials mean (how batches are numbered and picked): trials recorded by another
# loop are not resumed, they are searched again.
SEARCH_LOOP: Final = 2


@dataclass(frozen=True)
class SearchContext:
    """What every evaluation of a run shares; its fingerprint is part of every cache key."""

    config: SmartSearchConfig          # after the goal's policy filtering
    trace_file: str | None
    load_predictor: LoadPredictorResult | None
    profile_dir: str | None = None
    warm_start: WarmStart | None = None  # an earlier run's top candidates and trials (never their scores)
    calibration: Calibration | None = None   # corrects each outcome's latencies, bands and SLA count
    optimizer: OptimizerProcess | None = field(default=None, compare=False, repr=False)  # where studies live
    suggesters: dict[str, Suggester] = field(default_factory=dict, compare=False, repr=False)

    def __getstate__(self) -> dict[str, Any]:
        """Pickled without the live suggesters (their designers hold compiled code), which are rebuilt, nor the
        optimizer process (a pipe): a copy elsewhere keeps its studies in its own process."""
        state = dict(self.__dict__)
        state["suggesters"] = {}
        state["optimizer"] = None
        return state

    @cached_property
    def key(self) -> str:
        """Computed once: every proposal's cache key includes it."""
        lp = self.load_predictor
        key: dict[str, Any] = {"config": self.config.normalised(), "load_predictor": lp.rows() if lp else None,
                               "loop": SEARCH_LOOP}
        if self.warm_start:  # what is evaluated first, and the studies' prior, are part of what the run searched
            key["warm_start"] = self.warm_start.key()
        if self.calibration is not None:   # the scores a study observed
            key["calibration"] = self.calibration.fingerprint
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
                                   budget=sweep.max_rounds * sweep.per_round,
                                   warm_start=self.warm_start.of_mode(branch.mode) if self.warm_start else None,
                                   optimizer=self.optimizer)
        self.suggesters[branch.mode] = made
        return made

    def request(self, proposal: Proposal, eval_id: str) -> EvalRequest:
        winners = self.load_predictor.best_by_interval if self.load_predictor else None
        candidate = Candidate.unroll(self.config.search_space, proposal.selection, proposal.parallel, winners)
        ratio = proposal.selection.get("kv_load_ratio")
        return EvalRequest.from_config(self.config, candidate, trace_file=self.trace_file,
                                       profile_dir=self.profile_dir,
                                       kv_load_ratio=None if ratio is None else float(ratio), eval_id=eval_id,
                                       calibration=self.calibration)


def cache_key(context_key: str, selection: Mapping[str, Any], config: ParallelConfig) -> str:
    return fingerprint({"context": context_key, "selection": dict(selection), "parallel": config.to_dict(),
                        "mode": config.mode})


def study_metrics(context: SearchContext, outcome: Outcome) -> dict[str, float]:
    """What the study observes: the signed score (below every candidate that meets the SLA requirement when
    this one misses it, ``scoring.search_value``), or the raw value per Pareto objective."""
    goal = context.config.goal
    if goal.is_pareto:
        return {k: float(v) for k, v in (outcome.objectives or {}).items()}
    return {SCALAR_METRIC: search_value(goal, float(outcome.score), outcome.metrics,  # type: ignore[arg-type]
                                        outcome.candidate.context.gpu_budget)}


def finite_or_infeasible(context: SearchContext, outcome: Outcome) -> Outcome:
    """A feasible outcome whose objective is not finite (e.g. no request completed) cannot be ranked
    or told to the study: it becomes infeasible with that reason."""
    if outcome.feasible:
        metrics = study_metrics(context, outcome)
        if not metrics or not all(math.isfinite(v) for v in metrics.values()):
            why = ("cost_per_mtok is null: no output token met the SLA"
                   if "cost_per_mtok" in outcome.metrics and outcome.metrics["cost_per_mtok"] is None
                   and OptimizationTarget.cost_per_mtok in context.config.goal.objectives
                   else f"non-finite objective {metrics} (did any request complete?)")
            return replace(outcome, status=Status.infeasible, reason=why)
    return outcome


__all__ = ["SearchContext", "cache_key", "study_metrics", "finite_or_infeasible"]

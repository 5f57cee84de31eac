"""The search stage: studies and suggesters, the optimizer process, the branch loop and its costs, trials, the
cache, the tally, ranking and the progress bar over the evaluation target.

The names below are imported on first use (PEP 562): the spawned optimizer process, which imports only the study,
does not also load the branch loop, the deployment model and their dependencies.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from spica_core.config.lazy import lazy_names

_FROM: dict[str, str] = {
    **dict.fromkeys(("search_branch", "search_branches"), "branch_loop"),
    **dict.fromkeys(("FLOAT_LEVELS", "CandidateSpace"), "candidates"),
    **dict.fromkeys(("SearchContext", "cache_key", "finite_or_infeasible", "study_metrics"), "context"),
    **dict.fromkeys(("Costs",), "costs"),
    **dict.fromkeys(("OptimizerProcess", "RemoteStudy", "optimizer_for", "optimizer_process",
                     "traces_ahead"), "optimizer"),
    **dict.fromkeys(("SweepProgress",), "progress"),
    **dict.fromkeys(("recalibrated",), "recalibrate"),
    **dict.fromkeys(("RankedCandidate", "Scored", "Tieable", "dominates", "near_ties", "order_key", "pareto_front",
                     "rank", "rank_trials"), "ranking"),
    **dict.fromkeys(("Batch", "BranchResult", "BranchSearch", "round_plan"), "rounds"),
    **dict.fromkeys(("Study", "TrialRecord", "derive_seed"), "study"),
    **dict.fromkeys(("ATTEMPT_CAP_FACTOR", "Proposal", "Suggester", "ThoroughSuggester", "VizierSuggester",
                     "thorough_proposals", "thorough_size"), "suggesters"),
    **dict.fromkeys(("SweepSummary",), "summary"),
    **dict.fromkeys(("EvalCache", "Tally", "Trial", "reason_class"), "trials"),
    **dict.fromkeys(("WARM_TOP", "WarmStart", "latest_run", "load_warm_start"), "warm_start"),
}


__getattr__, __dir__ = lazy_names(__name__, _FROM)


if TYPE_CHECKING:  # what type checkers and editors see
    from spica_core.search.branch_loop import search_branch, search_branches
    from spica_core.search.candidates import FLOAT_LEVELS, CandidateSpace
    from spica_core.search.context import SearchContext, cache_key, finite_or_infeasible, study_metrics
    from spica_core.search.costs import Costs
    from spica_core.search.optimizer import (
        OptimizerProcess, RemoteStudy, optimizer_for, optimizer_process, traces_ahead,
    )
    from spica_core.search.progress import SweepProgress
    from spica_core.search.recalibrate import recalibrated
    from spica_core.search.ranking import (
        RankedCandidate, Scored, Tieable, dominates, near_ties, order_key, pareto_front, rank, rank_trials,
    )
    from spica_core.search.rounds import Batch, BranchResult, BranchSearch, round_plan
    from spica_core.search.study import Study, TrialRecord, derive_seed
    from spica_core.search.suggesters import (
        ATTEMPT_CAP_FACTOR, Proposal, Suggester, ThoroughSuggester, VizierSuggester, thorough_proposals,
        thorough_size,
    )
    from spica_core.search.summary import SweepSummary
    from spica_core.search.trials import EvalCache, Tally, Trial, reason_class
    from spica_core.search.warm_start import WARM_TOP, WarmStart, latest_run, load_warm_start

__all__ = [
    "recalibrated",
    "ATTEMPT_CAP_FACTOR", "Batch", "BranchResult", "BranchSearch", "CandidateSpace", "Costs", "EvalCache",
    "FLOAT_LEVELS", "OptimizerProcess", "Proposal", "RankedCandidate", "RemoteStudy", "Scored",
    "SearchContext", "Study", "Suggester", "SweepProgress", "SweepSummary", "Tally", "ThoroughSuggester", "Tieable",
    "Trial", "TrialRecord", "VizierSuggester", "WARM_TOP", "WarmStart", "cache_key", "derive_seed", "dominates",
    "finite_or_infeasible", "latest_run", "load_warm_start", "near_ties", "optimizer_for", "optimizer_process",
    "order_key", "pareto_front", "rank", "rank_trials", "reason_class", "round_plan", "search_branch",
    "search_branches", "study_metrics", "thorough_proposals", "thorough_size", "traces_ahead",
]

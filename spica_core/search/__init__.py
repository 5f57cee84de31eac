"""The search stage: studies and suggesters, the branch loop and its costs, trials, the cache, the tally, ranking
and the progress bar over the evaluation target."""
from spica_core.search.candidates import FLOAT_LEVELS, CandidateSpace
from spica_core.search.costs import Costs
from spica_core.search.progress import SweepProgress
from spica_core.search.ranking import RankedCandidate, Scored, dominates, pareto_front, rank, rank_trials
from spica_core.search.rounds import (
    Batch, BranchResult, BranchSearch, SearchContext, cache_key, finite_or_infeasible, round_plan, search_branch,
    search_branches, study_metrics,
)
from spica_core.search.study import Study, TrialRecord, derive_seed
from spica_core.search.suggesters import (
    ATTEMPT_CAP_FACTOR, Proposal, Suggester, ThoroughSuggester, VizierSuggester, thorough_proposals, thorough_size,
)
from spica_core.search.summary import SweepSummary
from spica_core.search.trials import EvalCache, Tally, Trial, reason_class
from spica_core.search.warm_start import WARM_TOP, WarmStart, latest_run, load_warm_start

__all__ = [
    "ATTEMPT_CAP_FACTOR", "CandidateSpace", "EvalCache", "FLOAT_LEVELS", "Proposal", "RankedCandidate", "Batch",
    "BranchResult", "BranchSearch", "Costs", "Scored", "SearchContext",
    "Study", "Suggester", "SweepProgress", "SweepSummary", "Tally", "ThoroughSuggester", "Trial", "TrialRecord",
    "VizierSuggester", "cache_key",
    "derive_seed", "dominates", "finite_or_infeasible", "pareto_front", "rank", "rank_trials", "round_plan",
    "search_branch", "search_branches", "study_metrics", "thorough_proposals", "thorough_size", "WARM_TOP", "WarmStart", "latest_run",
    "load_warm_start", "reason_class",
]

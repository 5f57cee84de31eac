"""The evaluate stage: a typed candidate, its engine arguments, traffic and replay, its score, and
where evaluations run (worker processes, an existing Dask or Ray cluster, or this process)."""
from spica_core.evaluate.candidate import (
    Admission, Candidate, Context, EngineKnobs, HostOffload, KVLoad, LoadPredictorChoice, PlannerChoice, Router,
    roles_of,
)
from spica_core.evaluate.cluster import ClusterEvaluator
from spica_core.evaluate.evaluator import EvalRequest, Outcome, Status, evaluate_one
from spica_core.evaluate.pool import EvalPool, Evaluator, SequentialEvaluator, make_evaluator
from spica_core.evaluate.scoring import (
    avg_gpu, candidate_metrics, headline, is_feasible, metric_value, objective_vector, score_report, signed,
    sla_kwargs,
)

__all__ = [
    "Admission", "Candidate", "ClusterEvaluator", "Context", "EngineKnobs", "EvalPool", "EvalRequest", "Evaluator", "HostOffload",
    "KVLoad", "LoadPredictorChoice", "Outcome", "PlannerChoice", "Router", "SequentialEvaluator", "Status",
    "avg_gpu", "candidate_metrics", "evaluate_one", "headline", "is_feasible", "make_evaluator", "metric_value",
    "objective_vector", "roles_of", "score_report", "signed", "sla_kwargs",
]

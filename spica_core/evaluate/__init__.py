"""The evaluate stage: a candidate's engine arguments, traffic and replay, its score, and where
evaluations run (worker processes, an existing Dask or Ray cluster, or this process). The typed
candidate itself is ``spica_core.deployment``.

The names below are imported on first use (PEP 562): a spawned worker that imports the replay path
does not also load the pool, the cluster clients and their dependencies.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from spica_core.config.lazy import lazy_names

_FROM: dict[str, str] = {
    **dict.fromkeys(("ClusterEvaluator",), "cluster"),
    **dict.fromkeys(("EvalRequest", "Outcome", "Status", "evaluate_one"), "evaluator"),
    **dict.fromkeys(("make_evaluator",), "evaluators"),
    **dict.fromkeys(("EvalPool", "SequentialEvaluator", "abandon_all"), "pool"),
    **dict.fromkeys(("POLL_S", "Evaluator"), "workers"),
    **dict.fromkeys((
        "avg_gpu", "candidate_metrics", "headline", "is_feasible", "metric_value", "minimised", "objective_vector",
        "raw_value", "score_report", "signed", "sla_kwargs",
    ), "scoring"),
    **dict.fromkeys(("Band", "bands_from_dict", "bands_to_dict", "load_bands"), "bands"),
    **dict.fromkeys(("Headroom", "find_headroom", "metrics_attainment"), "headroom"),
    **dict.fromkeys(("replay_is_exact", "replay_spread"), "repeats"),
}


__getattr__, __dir__ = lazy_names(__name__, _FROM)


if TYPE_CHECKING:  # what type checkers and editors see
    from spica_core.evaluate.cluster import ClusterEvaluator
    from spica_core.evaluate.evaluator import EvalRequest, Outcome, Status, evaluate_one
    from spica_core.evaluate.evaluators import make_evaluator
    from spica_core.evaluate.pool import EvalPool, SequentialEvaluator, abandon_all
    from spica_core.evaluate.scoring import (
        avg_gpu, candidate_metrics, headline, is_feasible, metric_value, minimised, objective_vector, raw_value,
        score_report, signed, sla_kwargs
    )
    from spica_core.evaluate.workers import POLL_S, Evaluator
    from spica_core.evaluate.bands import Band, bands_from_dict, bands_to_dict, load_bands
    from spica_core.evaluate.headroom import Headroom, find_headroom, metrics_attainment
    from spica_core.evaluate.repeats import replay_is_exact, replay_spread

__all__ = [
    "POLL_S", "abandon_all", "ClusterEvaluator", "EvalPool", "EvalRequest", "Evaluator", "Outcome",
    "SequentialEvaluator", "Status", "avg_gpu", "candidate_metrics", "evaluate_one", "headline", "is_feasible",
    "make_evaluator", "metric_value", "objective_vector", "score_report", "signed", "sla_kwargs",
    "Band", "Headroom", "bands_from_dict", "bands_to_dict", "find_headroom", "load_bands", "metrics_attainment",
    "replay_is_exact", "replay_spread", "minimised", "raw_value",
]

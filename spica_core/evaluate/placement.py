"""Where a sweep's evaluations run: an existing cluster, local worker processes, or this process."""
from __future__ import annotations

from spica_core.evaluate.cluster import ClusterEvaluator
from spica_core.evaluate.pool import EvalPool, SequentialEvaluator
from spica_core.evaluate.evaluator import Evaluator


def make_evaluator(parallel_evals: int, max_eval_seconds: float | None,
                   cluster: str | None = None) -> Evaluator:
    """Where a sweep's evaluations run: on the cluster at ``cluster`` (``tcp://`` Dask, ``ray://`` Ray), else
    in a pool of ``parallel_evals`` local processes, else (1) in this process."""
    if cluster is not None:
        return ClusterEvaluator(cluster, max_eval_seconds)
    if parallel_evals <= 1:
        return SequentialEvaluator()
    return EvalPool(parallel_evals, max_eval_seconds)


__all__ = ["make_evaluator"]

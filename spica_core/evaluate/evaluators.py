"""Where a sweep's evaluations run: an existing cluster, local worker processes, or this process."""
from __future__ import annotations

from spica_core.evaluate.cluster import ClusterEvaluator
from spica_core.evaluate.pool import EvalPool, SequentialEvaluator
from spica_core.evaluate.workers import Evaluator

_HELD: list[EvalPool] = []  # local workers spawned ahead of the sweep (prestart_workers), not yet handed out


def prestart_workers(parallel_evals: int) -> None:
    """Spawn a sweep's local worker processes now, before it asks for them: they import the replay engines while
    the sweep starts (``spica sweep`` calls this once it has read the config), and :func:`make_evaluator` hands
    them to the sweep. Workers nobody takes are stopped with the process (they are daemons), or by
    :func:`discard_held_workers`."""
    if parallel_evals > 1 and not _HELD:
        pool = EvalPool(parallel_evals)
        _HELD.append(pool)
        pool.spawn()


def discard_held_workers() -> None:
    """Stop the workers :func:`prestart_workers` spawned if no sweep took them."""
    while _HELD:
        _HELD.pop().terminate()


def make_evaluator(parallel_evals: int, max_eval_seconds: float | None,
                   cluster: str | None = None) -> Evaluator:
    """Where a sweep's evaluations run: on the cluster at ``cluster`` (``tcp://`` Dask, ``ray://`` Ray), else
    in a pool of ``parallel_evals`` local processes (the held ones when they match), else (1) in this process."""
    held = _HELD.pop() if _HELD else None
    if held is not None and cluster is None and held.workers == parallel_evals:
        held.max_eval_seconds = max_eval_seconds
        return held
    if held is not None:
        held.terminate()
    if cluster is not None:
        return ClusterEvaluator(cluster, max_eval_seconds)
    if parallel_evals <= 1:
        return SequentialEvaluator()
    return EvalPool(parallel_evals, max_eval_seconds)


__all__ = ["discard_held_workers", "make_evaluator", "prestart_workers"]

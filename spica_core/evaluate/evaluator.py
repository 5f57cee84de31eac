"""The ``Evaluator`` interface and what every evaluator shares: the stream, the context-manager life cycle, the
hard deadline, and the engines a worker imports before its first candidate. A batch run over the stream is a job
(``jobs.evaluate_all``).

The local pool (``pool``) and the Dask/Ray evaluator (``cluster``) both build on this module, never on each other.
"""
from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, Protocol, Self

from spica_core.evaluate.evaluation import EvalRequest, Outcome, Status

POLL_S = 0.5          # longest the parent blocks without running Python (so signal handlers can run)

class Evaluator(Protocol):
    """Anything that runs evaluations, as a stream or a batch; a context manager that releases its
    processes on exit. ``workers`` is how many evaluations it runs at once.

    The stream is what a search uses, so that a worker that frees up gets the next candidate at once:
    ``submit`` starts one evaluation (only while ``capacity()`` is positive) and returns its ticket;
    ``poll`` waits up to ``timeout`` seconds and returns the ``(ticket, outcome)`` pairs finished since
    the last call. ``evaluate_batch`` is the stream run to the end, outcomes in request order.
    """

    workers: int

    def __enter__(self) -> Evaluator: ...

    def __exit__(self, exc_type: Any, *exc: Any) -> None: ...

    def spawn(self) -> None: ...

    def capacity(self) -> int: ...

    def submit(self, request: EvalRequest) -> int: ...

    def poll(self, timeout: float) -> list[tuple[int, Outcome]]: ...

    def in_flight(self) -> int: ...

    def evaluate_batch(self, requests: Sequence[EvalRequest]) -> list[Outcome]: ...


def warm_engines() -> int:
    """Import the engines once per worker process, before its first deadline starts (local or cluster worker)."""
    os.environ.setdefault("DYN_LOG", "error")
    import dynamo._core  # noqa: F401

    from spica_core.evaluate import engine_args, replay  # noqa: F401
    from spica_core.planner import make_policy  # noqa: F401
    return os.getpid()


class WorkerGroup:
    """Evaluation processes as a context manager. The first batch starts (warms) them, not entering, so a
    resumed run with nothing left to evaluate never starts any; leaving normally lets them finish politely,
    leaving on an exception (a stop signal) stops them at once."""

    def start(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def terminate(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        if exc_type is None:
            self.close()
        else:
            self.terminate()


def late(request: EvalRequest, elapsed: float, max_eval_seconds: float | None) -> Outcome | None:
    """The "exceed runtime" outcome of a candidate whose deadline has passed, else None. A result that
    arrives after its deadline (the parent was descheduled on a busy machine) is late too, so the hard
    deadline does not depend on how promptly the parent polls."""
    if max_eval_seconds is None or elapsed < float(max_eval_seconds):
        return None
    return Outcome(Status.infeasible, request.candidate, f"exceed runtime: replay > {max_eval_seconds:g}s",
                   timings={"wall_s": elapsed}, eval_id=request.eval_id)


__all__ = ["POLL_S", "Evaluator", "WorkerGroup", "late", "warm_engines"]

"""Evaluation jobs: chains of replays whose next requests depend on the last outcomes, run side by side.

A job is a generator: it yields the requests it needs next (a list, evaluated in parallel), receives their
outcomes in the same order, and returns its result. A headroom bisection is one (each scale depends on the
last), and so is a candidate's run-to-run spread (one list of repeats). :func:`run_jobs` runs many on one
evaluator: a worker that frees up takes the next request of any job, so one job's chain never holds another
back, and the emit stage's extra replays use every worker instead of one core of the sweep's process.
"""
from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from typing import Any, TypeVar

from spica_core.evaluate.evaluation import EvalRequest, Outcome, evaluate_one
from spica_core.evaluate.evaluator import POLL_S, Evaluator

T = TypeVar("T")
Job = Generator[Sequence[EvalRequest], Sequence[Outcome], T]


def run_job(job: Job[T], evaluate: Callable[[EvalRequest], Outcome] = evaluate_one) -> T:
    """One job, one request after another through ``evaluate`` (this process by default)."""
    try:
        requests = next(job)
        while True:
            requests = job.send([evaluate(r) for r in requests])
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


class _RunningJob:
    """A job and the outcomes of the requests it is waiting for."""

    def __init__(self, job: Job[Any]) -> None:
        self.job = job
        self.waiting: list[Outcome | None] = []
        self.result: Any = None
        self.done = False

    def advance(self, outcomes: Sequence[Outcome] | None) -> list[EvalRequest]:
        """Start it (``outcomes`` None) or send it its outcomes; the requests it needs next ([] once done)."""
        try:
            while True:
                requests = list(next(self.job) if outcomes is None else self.job.send(outcomes))
                if requests:
                    self.waiting = [None] * len(requests)
                    return requests
                outcomes = []  # a job may ask for nothing; it gets nothing back
        except StopIteration as done:
            self.result, self.done = done.value, True
            return []


def run_jobs(evaluator: Evaluator, jobs: Sequence[Job[Any]]) -> list[Any]:
    """Every job to its end on ``evaluator``; results in job order. The jobs start in order, and a job's next
    requests go before any not yet sent, so a long chain (a headroom search) is never left for last. A job
    that raises stops the others (their generators are closed) and the error propagates."""
    running = [_RunningJob(job) for job in jobs]
    queue: list[tuple[int, int, EvalRequest]] = []   # (job, position in its list, request)
    tickets: dict[int, tuple[int, int]] = {}
    try:
        for j, r in enumerate(running):
            queue += [(j, k, request) for k, request in enumerate(r.advance(None))]
        while queue or tickets:
            while queue and evaluator.capacity() > 0:
                j, k, request = queue.pop(0)
                tickets[evaluator.submit(request)] = (j, k)
            for ticket, outcome in evaluator.poll(POLL_S):
                j, k = tickets.pop(ticket)
                r = running[j]
                r.waiting[k] = outcome
                if all(o is not None for o in r.waiting):  # a chain goes on before new work starts: it is longest
                    queue[:0] = [(j, n, request) for n, request in enumerate(r.advance(r.waiting))]  # type: ignore[arg-type]
    finally:
        for r in running:
            if not r.done:
                r.job.close()
    return [r.result for r in running]


def evaluate_all(evaluator: Evaluator, requests: Sequence[EvalRequest]) -> list[Outcome]:
    """A batch through the stream, as one job that asks for all of it: each free slot takes the next request,
    outcomes in request order."""
    return run_jobs(evaluator, [_batch(requests)])[0]  # type: ignore[no-any-return]


def _batch(requests: Sequence[EvalRequest]) -> Job[list[Outcome]]:
    return list((yield list(requests)))


__all__ = ["Job", "evaluate_all", "run_job", "run_jobs"]

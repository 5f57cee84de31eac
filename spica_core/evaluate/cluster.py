"""Evaluations on an existing Dask or Ray cluster, with the local pool's deadline and isolation.

``ClusterEvaluator("tcp://HOST:PORT", max_eval_seconds)`` evaluates on a Dask cluster (through
``distributed.Client``), ``"ray://HOST:PORT"`` on a Ray cluster (through the Ray client). Both keep the
semantics of :class:`~spica_core.evaluate.pool.EvalPool`:

* **one evaluation per process at a time.** A slot is one Dask worker thread (run workers with
  ``--nthreads 1`` so that a slot is a process) or one Ray actor (a process of its own). Requests go only
  to warm slots (their worker has imported the engines); each slot runs one and holds :data:`PREFETCH`
  more queued behind it, so that the engine's ~10 ms round trip is not paid between two replays. A
  candidate's deadline counts from its own start (dispatch to an idle slot, or the end of the one before
  it), and a candidate queued behind a long evaluation moves to a slot that runs dry.
* **deadline.** A candidate still running at its deadline is ``infeasible`` with the pool's reason
  ("exceed runtime: replay > Ns"); its process is killed (the nanny / Ray starts a new one) and the other
  evaluations carry on.
* **isolation and retries.** A native abort kills only the process running that evaluation. The client
  sees the lost worker (Dask: the worker left the scheduler, or ``KilledWorker``; Ray: the actor died)
  and evaluates the candidate again, once, on a fresh worker; a candidate that loses a worker twice is
  ``failed`` ("worker lost twice: ..."). Dask tasks are pinned to one worker so that the scheduler itself
  never re-runs them: the retry is this module's, whatever the cluster's ``allowed-failures``.

The engines' clients are imported lazily: the module imports without them, and asking for an engine that
is not installed is a :class:`ClusterError` saying what to install. Workers need this project installed
(same Python environment as the sweep). See ``docs/clusters.md``.

This module is the evaluator (slots, queue, deadlines, retries); the engines' sides are
``dask_cluster.py`` and ``ray_cluster.py``, the address checks both share ``cluster_connect.py``.
"""
from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from spica_core.errors import ClusterError, RemoteTaskError, WorkerLost
from spica_core.evaluate.cluster_connect import _parse
from spica_core.evaluate.dask_cluster import _DaskBackend
from spica_core.evaluate.evaluation import EvalRequest, Outcome, Status
from spica_core.evaluate.jobs import evaluate_all
from spica_core.evaluate.ray_cluster import _RayBackend
from spica_core.evaluate.evaluator import POLL_S, WorkerGroup, late

log = logging.getLogger(__name__)

NO_WORKER_S = 120.0       # a batch with work but no usable worker for this long fails
LOST_LIMIT = 2            # losses of a worker after which a candidate is failed (so: retried once)
PREFETCH = 1              # evaluations queued on a slot behind its running one (hides the engine's round trip)
STEAL_AFTER_S = 1.0       # a slot that runs dry takes a candidate queued behind one running this long


# ---------------------------------------------------------------- the evaluator


@dataclass(eq=False)
class _Task:
    index: int                   # the ticket
    request: EvalRequest
    losses: list[str]
    slot: Any
    handle: Any = None
    submitted: float = 0.0
    start: float | None = None   # None while queued on its slot behind another evaluation

    def elapsed(self, now: float) -> float:
        return now - (self.start if self.start is not None else self.submitted)


class ClusterEvaluator(WorkerGroup):
    """An :class:`~spica_core.evaluate.pool.Evaluator` on an existing Dask (``tcp://``) or Ray (``ray://``)
    cluster. Connects on construction (a :class:`ClusterError` within about ``CONNECT_TIMEOUT_S`` when the
    address cannot be reached); a context manager like :class:`EvalPool`: leaving it normally releases the
    cluster's workers, leaving it on an exception also kills the processes still running its evaluations."""

    def __init__(self, address: str, max_eval_seconds: float | None):
        scheme, host, port = _parse(address)
        self.address = address.strip()
        self.max_eval_seconds = max_eval_seconds
        self.restarts = 0          # processes killed at a deadline or lost (the cluster starts new ones)
        self._backend: _DaskBackend | _RayBackend
        if scheme == "tcp":
            self._backend = _DaskBackend(self.address)
        else:
            self._backend = _RayBackend(self.address, host, port)
        self._fifo: dict[Any, list[_Task]] = {}              # slot → its tasks, running first
        self._queue: deque[tuple[int, list[str]]] = deque()  # (ticket, losses so far) waiting for a slot
        self._requests: dict[int, EvalRequest] = {}
        self._finished: list[tuple[int, Outcome]] = []
        self._ticket = 0
        self._idle_since = time.monotonic()

    @property
    def engine(self) -> str:
        return self._backend.engine

    @property
    def workers(self) -> int:
        """The cluster's evaluation slots (worker processes), for the search's batch sizes."""
        return max(1, self._backend.capacity())

    def start(self) -> None:
        """Warm every worker (import the engines) before the first deadline starts."""
        self._backend.start()

    def close(self) -> None:
        """Release the cluster: cancel what is left, disconnect (idempotent)."""
        busy = [slot for slot, tasks in self._fifo.items() if tasks]
        self._fifo, self._queue, self._requests, self._finished = {}, deque(), {}, []
        self._backend.close(kill=busy)

    def terminate(self) -> None:
        """Stop now: kill the worker processes still running this client's evaluations, disconnect."""
        self.close()

    # ------------------------------------------------------------ the stream

    def spawn(self) -> None:
        return None  # the cluster's workers exist already; the first request warms them

    def capacity(self) -> int:
        """Free room on the cluster: every slot's threads plus PREFETCH queued behind them, less what is
        running or queued already."""
        self._backend.start()
        room = sum(self._backend.threads(slot) + PREFETCH for slot in self._backend.ready_slots()) \
            or self.workers + PREFETCH  # none ready (warming, lost): queue, and let poll say so if none comes
        return max(0, room - sum(len(ts) for ts in self._fifo.values()) - len(self._queue))

    def in_flight(self) -> int:
        return sum(len(ts) for ts in self._fifo.values()) + len(self._queue) + len(self._finished)

    def submit(self, request: EvalRequest) -> int:
        self._backend.start()
        self._ticket += 1
        self._requests[self._ticket] = request
        self._queue.append((self._ticket, []))
        self._dispatch()
        return self._ticket

    def poll(self, timeout: float) -> list[tuple[int, Outcome]]:
        """One turn of the loop: lost slots, dispatch and stealing, results, deadlines."""
        backend = self._backend
        fifo = self._fifo
        if self._queue or self.in_flight():
            self._turn(backend, fifo, timeout)
        done, self._finished = self._finished, []
        for ticket, _ in done:
            self._requests.pop(ticket, None)
        return done

    def _turn(self, backend: _DaskBackend | _RayBackend, fifo: dict[Any, list[_Task]], timeout: float) -> None:
        for slot, reason in backend.dead():  # (reason None: retired, its evaluations are not to blame)
            self._drop(slot, reason)
        self._dispatch()
        if not self._queue:
            self._steal()
        tasks = [t for ts in fifo.values() for t in ts]
        if tasks or not self._queue:
            self._idle_since = time.monotonic()
        elif time.monotonic() - self._idle_since > NO_WORKER_S:
            raise ClusterError(f"no worker of the cluster at {self.address} could take an evaluation for "
                               f"{NO_WORKER_S:g}s{backend.why_no_worker()}")
        if self._finished:
            timeout = 0.0
        started = [t.start for t in tasks if t.start is not None]
        if self.max_eval_seconds is not None and started:
            first = min(started) + float(self.max_eval_seconds)
            timeout = min(timeout, max(0.0, first - time.perf_counter()))
        done = backend.wait([t.handle for t in tasks], min(timeout, POLL_S))
        backend.fetch(done)
        for slot in list(fifo):
            for task in [t for t in fifo.get(slot, []) if t.handle in done]:
                if task not in fifo.get(slot, []):
                    continue  # its slot was lost while collecting an earlier result
                try:
                    outcome = backend.collect(slot, task.handle)
                except WorkerLost as lost:
                    self._drop(slot, lost.reason)
                    break
                except RemoteTaskError as err:
                    outcome = Outcome(Status.failed, task.request.candidate, str(err), eval_id=task.request.eval_id)
                fifo[slot].remove(task)
                now = time.perf_counter()
                outcome.timings["wall_s"] = task.elapsed(now)
                overrun = None if task.start is None else late(task.request, now - task.start, self.max_eval_seconds)
                self._finished.append((task.index, outcome if outcome.status is Status.failed or overrun is None
                                       else overrun))
                self._clock(slot, now)
        if self.max_eval_seconds is not None:
            now = time.perf_counter()
            overdue = [t for ts in fifo.values() for t in ts
                       if t.start is not None and now - t.start >= self.max_eval_seconds]
            for task in overdue:
                self._finished.append((task.index, late(task.request, now - task.start, self.max_eval_seconds)))
                fifo[task.slot].remove(task)
                backend.cancel(task.handle)
            for slot in dict.fromkeys(t.slot for t in overdue):  # the replay cannot be interrupted: kill it
                backend.kill(slot)
                self.restarts += 1
                self._drop(slot, None)  # the others on it are not to blame

    def evaluate_batch(self, requests: Sequence[EvalRequest]) -> list[Outcome]:
        """Outcomes in request order; each slot takes the next request when it has room, each deadline
        counts from the candidate's own start."""
        return evaluate_all(self, requests)

    def _submit(self, slot: Any, ticket: int, losses: list[str]) -> None:
        request = self._requests[ticket]
        task = _Task(ticket, request, losses, slot)
        task.handle = self._backend.submit(slot, request)
        task.submitted = time.perf_counter()
        slot_tasks = self._fifo.setdefault(slot, [])
        slot_tasks.append(task)
        if len(slot_tasks) <= self._backend.threads(slot):
            task.start = task.submitted

    def _dispatch(self) -> None:
        """Fill every ready slot's threads first, then queue PREFETCH more on each."""
        slots = self._backend.ready_slots()
        for extra in (0, PREFETCH):
            for slot in sorted(slots, key=lambda s: len(self._fifo.get(s, ())) / self._backend.threads(s)):
                while self._queue and len(self._fifo.get(slot, ())) < self._backend.threads(slot) + extra:
                    ticket, losses = self._queue.popleft()
                    self._submit(slot, ticket, losses)

    def _clock(self, slot: Any, now: float) -> None:
        """A slot finished one: the next queued evaluation(s) run from now."""
        for task in self._fifo.get(slot, [])[:self._backend.threads(slot)]:
            if task.start is None:
                task.start = now

    def _steal(self) -> None:
        """The queue is dry: a slot with nothing to do takes a candidate queued behind a long evaluation."""
        now = time.perf_counter()
        for slot in self._backend.ready_slots():
            if self._fifo.get(slot):
                continue
            donors = [ts for ts in self._fifo.values() if ts and ts[-1].start is None
                      and all(now - t.start >= STEAL_AFTER_S for t in ts if t.start is not None)]
            if not donors:
                return
            task = max(donors, key=len).pop()
            self._backend.cancel(task.handle)
            self._submit(slot, task.index, task.losses)

    def _drop(self, slot: Any, reason: str | None) -> None:
        """A slot is gone: lost (``reason``; its running evaluations are retried once), or killed by this client
        at a deadline or retired by the scheduler (``None``: the evaluations on it are not to blame). Queued
        ones go back to the queue."""
        gone = self._fifo.pop(slot, [])
        now = time.perf_counter()
        for task in reversed(gone):
            self._backend.cancel(task.handle)
            if reason is None or task.start is None:
                self._queue.appendleft((task.index, task.losses))
                continue
            self.restarts += 1
            losses = [*task.losses, reason]
            req = task.request
            if len(losses) < LOST_LIMIT:
                log.warning("evaluation %s: %s; evaluating it again", req.eval_id or task.index, reason)
                self._queue.appendleft((task.index, losses))
            else:
                self._finished.append((task.index, Outcome(Status.failed, req.candidate,
                                                           f"worker lost twice: {'; '.join(losses)}",
                                                           timings={"wall_s": task.elapsed(now)},
                                                           eval_id=req.eval_id)))


__all__ = ["ClusterEvaluator"]

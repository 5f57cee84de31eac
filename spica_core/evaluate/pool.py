"""Where evaluations run: isolated worker processes with a hard deadline, or this process.

The replay is not fork-safe and runs native code that can crash or run long, so sweeps evaluate in
spawned worker processes (:class:`EvalPool`) with a hard per-candidate deadline; a stuck or crashed
worker is terminated and replaced, and the caller carries on.

Stopping (see ``children.py``): the parent decides. Workers ignore SIGINT from birth (a
Ctrl-C reaches the whole process group, and a traceback per worker helps nobody); the pool's wait
wakes up at least every :data:`POLL_S` so the parent's signal handlers run promptly even when the
signal was delivered to another thread; and shutdown is bounded: SIGTERM, then SIGKILL after a short
grace, because a worker deep in a Rust replay may not react to SIGTERM.
"""
from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import signal
import time
from collections.abc import Sequence
from multiprocessing.connection import Connection, wait
from typing import Any

from spica_core.errors import SpicaError, WorkerStoppedError
from spica_core.evaluate.children import start_child, stop_processes
from spica_core.evaluate.evaluation import EvalRequest, Outcome, Status, evaluate_in_worker, evaluate_one
from spica_core.evaluate.evaluator import POLL_S, WorkerGroup, late, warm_engines
from spica_core.evaluate.jobs import evaluate_all

TERM_GRACE_S = 1.0    # SIGTERM → SIGKILL
# A ready worker yields the CPU to the sweep's own process and its optimizer process: the workers wait for
# their picks, so on a machine with no core to spare an ask that shares one with two replays keeps both
# workers waiting longer (the replays get the same CPU time either way, just later).
WORKER_NICENESS = 10
CLOSE_GRACE_S = 2.0   # a polite stop (None sent) → SIGTERM

# Exit signals that mean "someone is stopping us", not "this candidate crashed the worker": a worker
# that dies of one of them must not be recorded as a failed evaluation (the sweep is stopping and the
# candidate will be evaluated again on resume). SIGKILL stays a crash: it is what the OOM killer sends.
_STOP_SIGNALS = frozenset({signal.SIGTERM, signal.SIGINT, signal.SIGHUP})


def _yield_cpu() -> None:
    """Raise this process's niceness by :data:`WORKER_NICENESS`, for every thread: on Linux niceness is per
    thread, and the engines' warm-up may have started some (new threads inherit their creator's)."""
    try:
        threads = [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:
        threads = [0]
    for tid in threads:
        with contextlib.suppress(OSError):  # a thread that ended meanwhile
            os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + WORKER_NICENESS))


def _worker_main(conn: Connection) -> None:
    """Worker loop: import the engines once, then evaluate requests until told to stop."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides (it was blocked since fork anyway)
    os.environ.setdefault("DYN_LOG", "error")
    warm_engines()  # before the first deadline starts
    _yield_cpu()  # once ready: the start-up before the first replay is not slowed

    try:
        conn.send(("ready", os.getpid()))
        while True:
            try:
                msg = conn.recv()
            except EOFError:
                return
            if msg is None:
                return
            _sent_at, req = msg
            conn.send(evaluate_in_worker(req))
    except (BrokenPipeError, ConnectionResetError):  # the parent went away: nobody wants the result
        return


class _Worker:
    def __init__(self, ctx: Any):
        parent, child = ctx.Pipe(duplex=True)
        self.conn: Connection = parent
        self._child: Connection | None = child
        self.proc = ctx.Process(target=_worker_main, args=(child,), daemon=True)
        self.ready = False

    def start(self) -> None:
        start_child(self.proc)
        if self._child is not None:
            self._child.close()
            self._child = None

    @property
    def pid(self) -> int | None:
        return self.proc.pid

    def wait_ready(self, timeout: float) -> bool:
        if self.ready:
            return True
        end = time.monotonic() + timeout
        while True:  # in slices, so that the parent's signal handlers run while a worker warms up
            left = end - time.monotonic()
            if left <= 0 or not self.proc.is_alive() and not self.conn.poll(0):
                return False
            if self.conn.poll(min(POLL_S, left)):
                try:
                    tag, _pid = self.conn.recv()
                    self.ready = tag == "ready"
                except (EOFError, OSError):
                    self.ready = False
                return self.ready

    def kill(self) -> None:
        _stop_workers([self], polite=False)


def _stop_workers(workers: Sequence[_Worker], polite: bool) -> None:
    """Stop workers in bounded time: (if polite) ask them to exit and wait up to CLOSE_GRACE_S, then SIGTERM
    all of them at once, SIGKILL after TERM_GRACE_S what is left (``children.stop_processes``), and reap them."""
    started = [w for w in workers if w.proc.pid is not None]
    if polite:
        for w in started:
            try:
                w.conn.send(None)
            except (OSError, ValueError):
                pass
        end = time.monotonic() + CLOSE_GRACE_S
        for w in started:
            w.proc.join(max(0.0, end - time.monotonic()))
    stop_processes([w.proc.pid for w in started if w.proc.exitcode is None], TERM_GRACE_S)
    for w in workers:
        try:
            w.conn.close()
        except OSError:
            pass


class EvalPool(WorkerGroup):
    """Spawned worker processes evaluating a batch from one queue, with a hard per-candidate deadline.

    A request is sent only to an idle worker, so queued work never eats a candidate's time. At its
    deadline (its start + ``max_eval_seconds``) an unfinished candidate is infeasible ("exceed
    runtime"), and its worker is terminated and replaced; a worker that dies (a native crash) makes
    its candidate failed. Use as a context manager, under ``if __name__ == "__main__":`` in scripts:
    leaving it normally stops the workers politely, leaving it on an exception (a stop signal) at once.
    """

    START_TIMEOUT_S = 120.0

    def __init__(self, workers: int, max_eval_seconds: float | None = 600.0):
        if workers < 1:
            raise ValueError("workers must be >= 1")
        self.workers = workers
        self.max_eval_seconds = max_eval_seconds
        self._ctx = mp.get_context("spawn")
        self._pool: list[_Worker] = []
        self._running: dict[int, tuple[int, EvalRequest, float]] = {}   # worker slot → (ticket, request, start)
        self._finished: list[tuple[int, Outcome]] = []
        self._tickets = 0
        self.restarts = 0

    def _spawn(self) -> _Worker:
        """A new worker, in the pool before it starts (so a signal right after the fork cannot orphan it)."""
        w = _Worker(self._ctx)
        self._pool.append(w)
        w.start()
        return w

    def spawn(self) -> None:
        """Start the worker processes without waiting for them (they warm up while the caller goes on)."""
        while len(self._pool) < self.workers:
            self._spawn()

    def start(self) -> None:
        self.spawn()
        for w in self._pool:
            if not w.wait_ready(self.START_TIMEOUT_S):
                raise SpicaError("an evaluation worker process failed to start; scripts that evaluate in parallel "
                                 "must guard their entry point with `if __name__ == \"__main__\":`, or set "
                                 "sweep.parallel_evals: 1")

    def close(self) -> None:
        """Ask the workers to exit, then terminate the ones that do not within a few seconds (idempotent)."""
        workers, self._pool = self._pool, []
        self._running, self._finished = {}, []
        _stop_workers(workers, polite=True)

    def terminate(self) -> None:
        """Stop the workers now: SIGTERM, SIGKILL after a short grace (idempotent; at most ~2 s)."""
        workers, self._pool = self._pool, []
        self._running, self._finished = {}, []
        _stop_workers(workers, polite=False)

    def worker_pids(self) -> list[int]:
        return [w.proc.pid for w in self._pool if w.proc.pid is not None]

    def _replace(self, i: int) -> None:
        old = self._pool[i]
        _stop_workers([old], polite=False)
        w = _Worker(self._ctx)
        self._pool[i] = w
        w.start()
        self.restarts += 1

    def capacity(self) -> int:
        """Idle workers: a request is sent only to one, so queued work never eats a candidate's time."""
        return self.workers - len(self._running)

    def in_flight(self) -> int:
        return len(self._running) + len(self._finished)

    def submit(self, request: EvalRequest) -> int:
        """Send ``request`` to an idle worker (starting the pool on first use); its deadline starts now."""
        self.spawn()  # each worker is waited for when it gets its first request
        slot = next((s for s in range(len(self._pool)) if s not in self._running), None)
        if slot is None:
            raise RuntimeError("submit() needs an idle worker: check capacity() first")
        ticket = self._tickets = self._tickets + 1
        if not self._pool[slot].wait_ready(self.START_TIMEOUT_S):  # a replaced worker warms up first
            raise SpicaError("an evaluation worker process failed to start")
        try:
            self._pool[slot].conn.send((time.perf_counter(), request))
            self._running[slot] = (ticket, request, time.perf_counter())
        except (OSError, BrokenPipeError) as exc:
            self._finished.append((ticket, Outcome(Status.failed, request.candidate, f"worker unavailable: {exc}",
                                                   eval_id=request.eval_id)))
            self._replace(slot)
        return ticket

    def poll(self, timeout: float) -> list[tuple[int, Outcome]]:
        """Wait up to ``timeout`` (and at most until the first deadline) for results; a candidate past its
        deadline is infeasible and its worker is replaced."""
        if self._running and not self._finished:
            wait_s = min(timeout, POLL_S)
            if self.max_eval_seconds is not None:
                first_deadline = min(start for _, _, start in self._running.values()) + float(self.max_eval_seconds)
                wait_s = min(wait_s, max(0.0, first_deadline - time.perf_counter()))
            ready = wait([self._pool[slot].conn for slot in self._running], timeout=wait_s)
            by_conn = {self._pool[slot].conn: slot for slot in self._running}
            for conn in ready:
                slot = by_conn[conn]  # type: ignore[index]
                ticket, request, start = self._running.pop(slot)
                outcome = self._receive(slot, request, start)
                overrun = late(request, time.perf_counter() - start, self.max_eval_seconds)
                self._finished.append((ticket, outcome if outcome.status is Status.failed or overrun is None
                                       else overrun))
            now = time.perf_counter()
            for slot, (ticket, request, start) in list(self._running.items()):
                if overdue := late(request, now - start, self.max_eval_seconds):
                    del self._running[slot]
                    self._finished.append((ticket, overdue))
                    self._replace(slot)
        done, self._finished = self._finished, []
        return done

    def evaluate_batch(self, requests: Sequence[EvalRequest]) -> list[Outcome]:
        """Outcomes in request order. Each idle worker takes the next request, so one slow candidate
        never holds the others back; each candidate's deadline counts from its own start."""
        return evaluate_all(self, requests)

    def _receive(self, slot: int, request: EvalRequest, start: float) -> Outcome:
        """The outcome a worker sends back, or ``failed`` when it died (a native crash) on the way."""
        worker = self._pool[slot]
        try:
            outcome: Outcome = worker.conn.recv()
            outcome.timings["wall_s"] = time.perf_counter() - start
            return outcome
        except (EOFError, OSError):
            worker.proc.join(1.0)
            code = worker.proc.exitcode
            if code is not None and code < 0 and -code in _STOP_SIGNALS:
                raise WorkerStoppedError(f"evaluation worker {worker.proc.pid} was stopped by "
                                    f"{signal.Signals(-code).name} while evaluating; finished evaluations are "
                                    "kept: run the same command to resume") from None
            self._replace(slot)
            return Outcome(Status.failed, request.candidate, f"worker crashed (exit code {code}) while evaluating",
                           eval_id=request.eval_id)


class SequentialEvaluator:
    """parallel_evals == 1: evaluate in this process, one after another (no hard deadline).
    ``poll`` runs the submitted evaluation, so the caller's optimizer and the replay take turns."""

    workers = 1

    def __init__(self) -> None:
        self._queued: list[tuple[int, EvalRequest]] = []
        self._tickets = 0

    def __enter__(self) -> SequentialEvaluator:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None

    def spawn(self) -> None:
        return None

    def capacity(self) -> int:
        return self.workers - len(self._queued)

    def in_flight(self) -> int:
        return len(self._queued)

    def submit(self, request: EvalRequest) -> int:
        self._tickets += 1
        self._queued.append((self._tickets, request))
        return self._tickets

    def poll(self, timeout: float) -> list[tuple[int, Outcome]]:
        done, self._queued = self._queued, []
        return [(ticket, self.evaluate(request)) for ticket, request in done]

    def evaluate(self, request: EvalRequest) -> Outcome:
        return evaluate_one(request)

    def evaluate_batch(self, requests: Sequence[EvalRequest]) -> list[Outcome]:
        return evaluate_all(self, requests)


__all__ = ["EvalPool", "SequentialEvaluator"]

"""Where evaluations run: isolated worker processes with a hard deadline, or this process (§6.4).

The replay is not fork-safe and runs native code that can crash or run long, so sweeps evaluate in
spawned worker processes (:class:`EvalPool`) with a hard per-candidate deadline; a stuck or crashed
worker is terminated and replaced, and the caller carries on.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import time
import traceback
from collections.abc import Sequence
from multiprocessing.connection import Connection, wait
from typing import Any, Protocol

from spica_core.errors import SpicaError
from spica_core.evaluate.evaluator import EvalRequest, Outcome, Status, evaluate_one


class Evaluator(Protocol):
    """Anything that turns a batch of requests into outcomes, in request order."""

    def evaluate_batch(self, requests: Sequence[EvalRequest]) -> list[Outcome]: ...


def _worker_main(conn: Connection) -> None:
    """Worker loop: import the engines once, then evaluate requests until told to stop."""
    os.environ.setdefault("DYN_LOG", "error")
    import dynamo._core  # noqa: F401 - warm the runtime before the first deadline starts

    from spica_core.evaluate import engine_args, replay  # noqa: F401
    from spica_core.planner import make_policy  # noqa: F401

    conn.send(("ready", os.getpid()))
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return
        if msg is None:
            return
        _sent_at, req = msg
        try:
            out = evaluate_one(req)
        except Exception as exc:  # noqa: BLE001
            out = Outcome(Status.failed, req.candidate,
                          f"worker error: {type(exc).__name__}: {exc}\n{traceback.format_exc(limit=3)}",
                          eval_id=req.eval_id)
        conn.send(out)


class _Worker:
    def __init__(self, ctx: Any):
        parent, child = ctx.Pipe(duplex=True)
        self.conn: Connection = parent
        self.proc = ctx.Process(target=_worker_main, args=(child,), daemon=True)
        self.proc.start()
        child.close()
        self.ready = False

    def wait_ready(self, timeout: float) -> bool:
        if self.ready:
            return True
        if self.conn.poll(timeout):
            try:
                tag, _pid = self.conn.recv()
                self.ready = tag == "ready"
            except (EOFError, OSError):
                self.ready = False
        return self.ready

    def kill(self) -> None:
        try:
            self.conn.close()
        except OSError:
            pass
        if self.proc.is_alive():
            self.proc.terminate()
            self.proc.join(2.0)
            if self.proc.is_alive():
                self.proc.kill()
        self.proc.join(1.0)


class EvalPool:
    """Spawned worker processes evaluating a batch from one queue, with a hard per-candidate deadline.

    A request is sent only to an idle worker, so queued work never eats a candidate's time. At its
    deadline (its start + ``max_eval_seconds``) an unfinished candidate is infeasible ("exceed
    runtime"), and its worker is terminated and replaced; a worker that dies (a native crash) makes
    its candidate failed. Use as a context manager, under ``if __name__ == "__main__":`` in scripts.
    """

    START_TIMEOUT_S = 120.0

    def __init__(self, workers: int, max_eval_seconds: float | None = 600.0):
        if workers < 1:
            raise ValueError("workers must be >= 1")
        self.workers = workers
        self.max_eval_seconds = max_eval_seconds
        self._ctx = mp.get_context("spawn")
        self._pool: list[_Worker] = []
        self.restarts = 0

    def __enter__(self) -> EvalPool:
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def start(self) -> None:
        while len(self._pool) < self.workers:
            self._pool.append(_Worker(self._ctx))
        for w in self._pool:
            if not w.wait_ready(self.START_TIMEOUT_S):
                raise SpicaError("an evaluation worker process failed to start; scripts that evaluate in parallel "
                                 "must guard their entry point with `if __name__ == \"__main__\":`, or set "
                                 "sweep.parallel_evals: 1")

    def close(self) -> None:
        for w in self._pool:
            try:
                w.conn.send(None)
            except (OSError, BrokenPipeError):
                pass
        for w in self._pool:
            w.proc.join(2.0)
            w.kill()
        self._pool = []

    def _replace(self, i: int) -> None:
        self._pool[i].kill()
        self._pool[i] = _Worker(self._ctx)
        self.restarts += 1

    def evaluate_batch(self, requests: Sequence[EvalRequest]) -> list[Outcome]:
        """Outcomes in request order. Each idle worker takes the next request, so one slow candidate
        never holds the others back; each candidate's deadline counts from its own start."""
        if not self._pool:
            self.start()
        results: dict[int, Outcome] = {}
        queue = list(range(len(requests)))
        running: dict[int, tuple[int, float]] = {}        # worker slot → (request index, start)
        while queue or running:
            for slot in range(len(self._pool)):
                if slot in running or not queue:
                    continue
                if not self._pool[slot].wait_ready(self.START_TIMEOUT_S):  # a replaced worker warms up first
                    raise SpicaError("an evaluation worker process failed to start")
                i = queue.pop(0)
                try:
                    self._pool[slot].conn.send((time.perf_counter(), requests[i]))
                    running[slot] = (i, time.perf_counter())
                except (OSError, BrokenPipeError) as exc:
                    results[i] = Outcome(Status.failed, requests[i].candidate, f"worker unavailable: {exc}",
                                         eval_id=requests[i].eval_id)
                    self._replace(slot)
            if not running:
                continue
            timeout = None
            if self.max_eval_seconds is not None:
                first_deadline = min(start for _, start in running.values()) + float(self.max_eval_seconds)
                timeout = max(0.0, first_deadline - time.perf_counter())
            ready = wait([self._pool[slot].conn for slot in running], timeout=timeout)
            by_conn = {self._pool[slot].conn: slot for slot in running}
            for conn in ready:
                slot = by_conn[conn]  # type: ignore[index]
                i, start = running.pop(slot)
                results[i] = self._receive(slot, requests[i], start)
            if self.max_eval_seconds is not None:
                now = time.perf_counter()
                for slot, (i, start) in list(running.items()):
                    if now - start >= float(self.max_eval_seconds):
                        del running[slot]
                        results[i] = Outcome(Status.infeasible, requests[i].candidate,
                                             f"exceed runtime: replay > {self.max_eval_seconds:g}s",
                                             timings={"wall_s": now - start}, eval_id=requests[i].eval_id)
                        self._replace(slot)
        return [results[i] for i in range(len(requests))]

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
            self._replace(slot)
            return Outcome(Status.failed, request.candidate, f"worker crashed (exit code {code}) while evaluating",
                           eval_id=request.eval_id)


class SequentialEvaluator:
    """parallel_evals == 1: evaluate in this process, one after another (no hard deadline, §6.4)."""

    workers = 1

    def __enter__(self) -> SequentialEvaluator:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None

    def evaluate_batch(self, requests: Sequence[EvalRequest]) -> list[Outcome]:
        return [evaluate_one(r) for r in requests]


def make_evaluator(parallel_evals: int, max_eval_seconds: float | None) -> EvalPool | SequentialEvaluator:
    """The pool for parallel_evals > 1, else the in-process sequential path."""
    if parallel_evals <= 1:
        return SequentialEvaluator()
    return EvalPool(parallel_evals, max_eval_seconds)


__all__ = ["Evaluator", "EvalPool", "SequentialEvaluator", "make_evaluator"]

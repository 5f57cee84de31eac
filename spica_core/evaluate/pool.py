"""Where evaluations run: isolated worker processes with a hard deadline, or this process (§6.4).

The replay is not fork-safe and runs native code that can crash or run long, so sweeps evaluate in
spawned worker processes (:class:`EvalPool`) with a hard per-wave deadline; a stuck or crashed
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
    """Spawned worker processes evaluating batches in waves with a hard per-wave deadline.

    A wave submits at most ``workers`` requests, so queued work never eats a candidate's time. At
    the deadline (wave start + ``max_eval_seconds``) an unfinished candidate is infeasible ("exceed
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
        """Outcomes in request order."""
        if not self._pool:
            self.start()
        out: list[Outcome] = []
        for i in range(0, len(requests), self.workers):
            out.extend(self._wave(requests[i:i + self.workers]))
        return out

    def _wave(self, wave: Sequence[EvalRequest]) -> list[Outcome]:
        for w in self._pool:
            if not w.wait_ready(self.START_TIMEOUT_S):
                raise SpicaError("an evaluation worker process failed to start")
        results: dict[int, Outcome] = {}
        start = time.perf_counter()
        pending: dict[Connection, int] = {}
        for i, req in enumerate(wave):
            w = self._pool[i]
            try:
                w.conn.send((time.perf_counter(), req))
                pending[w.conn] = i
            except (OSError, BrokenPipeError) as exc:
                results[i] = Outcome(Status.failed, req.candidate, f"worker unavailable: {exc}", eval_id=req.eval_id)
        deadline = None if self.max_eval_seconds is None else start + float(self.max_eval_seconds)
        while pending:
            timeout = None if deadline is None else max(0.0, deadline - time.perf_counter())
            ready = wait(list(pending), timeout=timeout)
            if not ready:
                break
            for conn in ready:
                i = pending.pop(conn)  # type: ignore[arg-type]
                try:
                    outcome = conn.recv()  # type: ignore[union-attr]
                    outcome.timings["wall_s"] = time.perf_counter() - start
                    results[i] = outcome
                except (EOFError, OSError):
                    code = self._pool[i].proc.exitcode
                    self._pool[i].proc.join(1.0)
                    code = self._pool[i].proc.exitcode if code is None else code
                    results[i] = Outcome(Status.failed, wave[i].candidate,
                                         f"worker crashed (exit code {code}) while evaluating", eval_id=wave[i].eval_id)
                    self._replace(i)
        for conn, i in pending.items():
            results[i] = Outcome(Status.infeasible, wave[i].candidate,
                                 f"exceed runtime: replay > {self.max_eval_seconds:g}s",
                                 timings={"wall_s": time.perf_counter() - start}, eval_id=wave[i].eval_id)
            self._replace(i)
        return [results[i] for i in range(len(wave))]


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

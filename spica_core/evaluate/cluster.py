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
"""
from __future__ import annotations

import importlib
import logging
import os
import signal
import socket
import time
import uuid
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from spica_core.config.model import CLUSTER_FORMS, parse_cluster_address
from spica_core.errors import ClusterError, RemoteTaskError, WorkerLost
from spica_core.evaluate.evaluator import EvalRequest, Outcome, Status, evaluate_in_worker
from spica_core.evaluate.jobs import evaluate_all
from spica_core.evaluate.workers import POLL_S, WorkerGroup, check_abandoned, late, warm_engines
from spica_core.evaluate.ray_private import no_auto_init

log = logging.getLogger(__name__)

OPTION = "sweep.cluster (--cluster)"
FORMS = f"{CLUSTER_FORMS} (a Ray head's client server listens on port 10001 by default)"
CONNECT_TIMEOUT_S = 5.0   # an unreachable address fails within about this long
WORKER_WAIT_S = 15.0      # a Dask scheduler without workers for this long at connect fails
START_TIMEOUT_S = 120.0   # a worker that takes longer to import the engines is not used
NO_WORKER_S = 120.0       # a batch with work but no usable worker for this long fails
KILL_GRACE_S = 10.0       # a killed Dask worker still registered after this is left alone (never used again)
LOST_LIMIT = 2            # losses of a worker after which a candidate is failed (so: retried once)
PREFETCH = 1              # evaluations queued on a slot behind its running one (hides the engine's round trip)
_RAY_TRANSIENT = ("client server failed", "Proxy failed to Connect to backend")
RAY_CONNECT_ATTEMPTS = 3   # the Ray head failing to start this client's server process is tried again
STEAL_AFTER_S = 1.0       # a slot that runs dry takes a candidate queued behind one running this long


# ---------------------------------------------------------------- worker side


async def _die() -> int:
    """Run on a Dask worker's event loop: SIGKILL this worker process shortly after replying (the replay
    thread cannot be interrupted; the nanny starts a new worker)."""
    import asyncio

    pid = os.getpid()
    asyncio.get_running_loop().call_later(0.05, os.kill, pid, signal.SIGKILL)
    return pid


class _EvalActor:
    """A Ray actor: one process, engines imported once, one evaluation at a time."""

    def __init__(self) -> None:
        self.pid = warm_engines()

    def ready(self) -> int:
        return self.pid

    def evaluate(self, req: EvalRequest) -> Outcome:
        return evaluate_in_worker(req)


# ---------------------------------------------------------------- addresses


def _parse(address: str) -> tuple[str, str, int]:
    """(scheme, host, port) of a cluster address, or a ClusterError naming the option and the allowed forms."""
    try:
        return parse_cluster_address(address)
    except ValueError:
        raise ClusterError(f"{OPTION}: {str(address).strip()!r} is not a cluster address; expected {FORMS}") from None


def _reachable(kind: str, address: str, host: str, port: int, greets: bool = False) -> None:
    """A TCP connection within CONNECT_TIMEOUT_S (and, ``greets``, the first bytes the server sends unasked:
    a Dask scheduler's handshake, which ``distributed`` itself waits for without a timeout)."""
    try:
        with socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S) as sock:
            if greets and not sock.recv(1):
                raise OSError("the connection was closed at once")
    except TimeoutError:
        raise ClusterError(f"{address} accepts connections but does not answer like a {kind} within "
                         f"{CONNECT_TIMEOUT_S:g}s; fix {OPTION}") from None
    except OSError as exc:
        raise ClusterError(f"cannot reach the {kind} at {address} ({exc}); start it (see docs/clusters.md) "
                         f"or fix {OPTION}") from None


def _engine(module: str, address: str, name: str, install: str) -> Any:
    """The engine's client library, or a ClusterError saying how to install it."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise ClusterError(f"{OPTION}: {address} is a {name} address, but {name} is not installed: {install}") from None


def check_reachable(address: str) -> None:
    """Within seconds and without the engines' clients: a ClusterError when ``address`` has another form or
    nothing answers there (so that ``spica sweep`` fails before it starts anything)."""
    scheme, host, port = _parse(address)
    if scheme == "tcp":
        _reachable("Dask scheduler", address, host, port, greets=True)
    else:
        _reachable("Ray client server", address, host, port)


def _grpc_ready(address: str, host: str, port: int) -> None:
    """Ray's own connect retries for ~30 s on a port that accepts TCP but speaks no gRPC: fail in seconds."""
    import grpc

    channel = grpc.insecure_channel(f"{host}:{port}")
    try:
        grpc.channel_ready_future(channel).result(timeout=CONNECT_TIMEOUT_S)
    except grpc.FutureTimeoutError:
        raise ClusterError(f"{address} accepts connections but is not a Ray client server (no gRPC answer in "
                         f"{CONNECT_TIMEOUT_S:g}s); the head's client server listens on port 10001 by default"
                         ) from None
    finally:
        channel.close()


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
        check_abandoned()
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
        check_abandoned()
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


# ---------------------------------------------------------------- Dask


@dataclass(eq=False)
class _DaskWorker:
    address: str
    incarnation: tuple[Any, ...]
    nthreads: int
    status: str = "running"
    state: str = "warming"     # warming → ready; killed (by this client); broken (cannot warm)
    since: float = field(default_factory=time.monotonic)
    warm: Any = None           # the warm-up future
    pid: int | None = None
    error: str = ""

    def describe(self) -> str:
        return f"Dask worker {self.address}" + (f" (pid {self.pid})" if self.pid else "")


class _DaskBackend:
    """Slots are worker addresses (``nthreads`` evaluations each); tasks are pinned to their worker so the
    scheduler never re-runs one elsewhere when the worker dies: the retry is the evaluator's."""

    engine = "dask"

    def __init__(self, address: str):
        distributed = _engine("distributed", address, "Dask",
                              "pip install distributed (in the sweep's and the workers' environment)")
        check_reachable(address)
        try:
            self.client = distributed.Client(address, timeout=CONNECT_TIMEOUT_S, set_as_default=False)
        except (OSError, TimeoutError) as exc:
            raise ClusterError(f"cannot connect to the Dask scheduler at {address}: {exc}") from None
        self.address = address
        self._workers: dict[str, _DaskWorker] = {}
        self._fetched: dict[Any, Outcome] = {}
        self._last_refresh = 0.0
        self._started = False
        self._prefix = f"spica-{uuid.uuid4().hex[:8]}"
        deadline = time.monotonic() + WORKER_WAIT_S
        self._refresh()
        while not self._workers and time.monotonic() < deadline:
            time.sleep(0.2)
            self._refresh()
        if not self._workers:
            self.close(kill=[])
            raise ClusterError(f"the Dask scheduler at {address} has no workers; start some: "
                             f"dask worker {address} --nworkers N --nthreads 1")
        if any(w.nthreads > 1 for w in self._workers.values()):
            log.warning("Dask workers at %s run several threads: a crash or a deadline in one evaluation also "
                        "stops the others of that process (start workers with --nthreads 1)", address)

    def capacity(self) -> int:
        return sum(w.nthreads for w in self._workers.values() if w.state in ("warming", "ready"))

    def threads(self, slot: str) -> int:
        w = self._workers.get(slot)
        return w.nthreads if w is not None else 1

    def start(self) -> None:
        if self._started:
            return
        self._started = True
        end = time.monotonic() + START_TIMEOUT_S
        while any(w.state == "warming" for w in self._workers.values()) and time.monotonic() < end:
            self.wait([], POLL_S)
            self._refresh()
        if not any(w.state == "ready" for w in self._workers.values()):
            raise ClusterError(f"no worker of the Dask cluster at {self.address} could start evaluating"
                             f"{self.why_no_worker()}")

    def why_no_worker(self) -> str:
        errors = sorted({w.error for w in self._workers.values() if w.error})
        return f" ({'; '.join(errors)})" if errors else " (are the workers running? see docs/clusters.md)"

    def _refresh(self) -> list[_DaskWorker]:
        """Sync with the scheduler's worker list; returns the workers that went away."""
        self._last_refresh = time.monotonic()
        status = str(self.client.status)
        if status in ("closing", "closed"):
            raise self._lost_scheduler()
        if status != "running":  # reconnecting (for up to CONNECT_TIMEOUT_S): the worker list is unknown now
            return []
        try:
            info = self.client.scheduler_info(n_workers=-1).get("workers", {})
        except (OSError, TimeoutError) as exc:
            raise self._lost_scheduler(f" ({type(exc).__name__}: {exc})") from None
        current = {addr: (meta.get("id"), meta.get("local_directory"), meta.get("nanny"))
                   for addr, meta in info.items()}
        gone = []
        for addr, known in list(self._workers.items()):
            if current.get(addr) != known.incarnation:
                del self._workers[addr]
                gone.append(known)
                if known.warm is not None:
                    known.warm.release()
        for addr, incarnation in current.items():
            w = self._workers.get(addr)
            if w is None:
                w = _DaskWorker(addr, incarnation, max(1, int(info[addr].get("nthreads", 1))))
                w.warm = self.client.submit(warm_engines, key=f"{self._prefix}-warm-{uuid.uuid4().hex}", workers=[addr],
                                            allow_other_workers=False, pure=False)
                self._workers[addr] = w
            w.status = str(info[addr].get("status", "running"))
        now = time.monotonic()
        for w in self._workers.values():
            if w.state == "warming" and now - w.since > START_TIMEOUT_S:
                w.state, w.error = "broken", f"{w.describe()} did not import the engines in {START_TIMEOUT_S:g}s"
            elif w.state == "killed" and now - w.since > KILL_GRACE_S and not w.error:
                w.error = f"{w.describe()} was killed at a deadline but is still registered"
                log.warning("%s; it is not used again", w.error)
        return gone

    def _lost_scheduler(self, detail: str = "") -> ClusterError:
        return ClusterError(f"lost the connection to the Dask scheduler at {self.address}{detail}; finished "
                          "evaluations are kept: run the same command to resume")

    def dead(self) -> list[tuple[str, str | None]]:
        """Every POLL_S: the workers that left the scheduler, with the reason to record against their
        evaluations; None for a worker the scheduler retired (a scale-down: not the candidate's doing)."""
        if time.monotonic() - self._last_refresh < POLL_S:
            return []
        return [(w.address, None if self._retired(w.address) else f"{w.describe()} left the cluster while evaluating")
                for w in self._refresh()]

    def _retired(self, address: str) -> bool:
        try:
            events = self.client.get_events(address)
        except Exception as exc:  # noqa: BLE001 - the scheduler's event log is a nicety
            log.debug("events of %s: %s", address, exc)
            return False
        removals = [m for _t, m in events if isinstance(m, dict) and m.get("action") == "remove-worker"]
        return bool(removals) and bool(removals[-1].get("expected"))

    def ready_slots(self) -> list[str]:
        return [a for a, w in self._workers.items() if w.state == "ready" and w.status == "running"]

    def submit(self, slot: str, req: EvalRequest) -> Any:
        return self.client.submit(evaluate_in_worker, req, key=f"{self._prefix}-eval-{uuid.uuid4().hex}",
                                  workers=[slot], allow_other_workers=False, pure=False)

    def wait(self, handles: list[Any], timeout: float) -> set[Any]:
        from distributed import wait
        from distributed.client import FuturesCancelledError

        warming = [w for w in self._workers.values() if w.state == "warming" and w.warm is not None]
        futures = handles + [w.warm for w in warming]
        if not futures:
            time.sleep(timeout)
            return set()
        try:
            with self.client.as_current():
                wait(futures, timeout=timeout, return_when="FIRST_COMPLETED")
        except TimeoutError:
            return set()
        except FuturesCancelledError:  # the client lost the scheduler, or someone cancelled our tasks
            end = time.monotonic() + CONNECT_TIMEOUT_S + 2.0
            while str(self.client.status) not in ("running", "closed") and time.monotonic() < end:
                time.sleep(0.1)  # the client tries to reconnect for CONNECT_TIMEOUT_S
            if str(self.client.status) != "running":
                raise self._lost_scheduler() from None
        for w in warming:
            if w.warm.done():
                fut, w.warm = w.warm, None
                if fut.status == "cancelled":  # by someone else: warm it again
                    w.warm = self.client.submit(warm_engines, key=f"{self._prefix}-warm-{uuid.uuid4().hex}",
                                                workers=[w.address], allow_other_workers=False, pure=False)
                    continue
                try:
                    w.pid = int(fut.result())
                    w.state = "ready"
                except Exception as exc:  # noqa: BLE001 - e.g. the worker's environment lacks the project
                    w.state = "broken"
                    w.error = f"{w.describe()} cannot import the engines: {type(exc).__name__}: {exc}"
                    log.warning("%s", w.error)
                fut.release()
        return {f for f in handles if f.done()}

    def fetch(self, handles: set[Any]) -> None:
        """The results of finished evaluations, in one round trip (``collect`` then takes them)."""
        finished = [f for f in handles if f.status == "finished" and f.key not in self._fetched]
        if not finished:
            return
        from distributed.client import FutureCancelledError

        try:
            values = self.client.gather(finished)
        except (Exception, FutureCancelledError) as exc:  # noqa: BLE001 - one went away: collect one by one
            log.debug("gathering %d results: %s", len(finished), exc)
            return
        self._fetched.update((f.key, v) for f, v in zip(finished, values))

    def collect(self, slot: str, handle: Any) -> Outcome:
        from distributed import KilledWorker

        w = self._workers.get(slot)
        who = w.describe() if w is not None else f"Dask worker {slot}"
        try:
            if handle.key in self._fetched:
                return self._fetched.pop(handle.key)
            if handle.status == "cancelled":  # (its result() raises a BaseException)
                raise WorkerLost(f"the evaluation on {who} was cancelled on the cluster")
            return handle.result()
        except KilledWorker as exc:  # a cluster with allowed-failures 0: the scheduler reports the loss itself
            self._workers.pop(slot, None)
            raise WorkerLost(f"{who} died while evaluating ({exc})") from None
        except WorkerLost:
            raise
        except Exception as exc:  # noqa: BLE001 - e.g. the request could not be unpickled on the worker
            raise RemoteTaskError(f"worker error: {type(exc).__name__}: {exc}") from None
        finally:
            handle.release()

    def cancel(self, handle: Any) -> None:
        try:
            handle.cancel()
            handle.release()
        except Exception as exc:  # noqa: BLE001 - the client may be closing
            log.debug("cancelling %s: %s", handle, exc)

    def kill(self, slot: str) -> None:
        """At a deadline: SIGKILL the worker process (the replay thread cannot be interrupted; the nanny starts
        a new worker, which joins as a new slot)."""
        w = self._workers.get(slot)
        if w is None or w.state == "killed":
            return
        w.state, w.since = "killed", time.monotonic()
        self._die([slot])

    def _die(self, addresses: list[str]) -> None:
        try:
            self.client.run(_die, workers=addresses, wait=False, on_error="ignore")
        except Exception as exc:  # noqa: BLE001 - the worker may be gone already
            log.debug("killing Dask workers %s: %s", addresses, exc)

    def close(self, kill: list[str]) -> None:
        client = getattr(self, "client", None)
        if client is None:
            return
        try:
            if kill:
                self._die(kill)
        finally:
            self.client = None  # type: ignore[assignment]
            self._workers = {}
            try:
                client.close(timeout=5)
            except Exception as exc:  # noqa: BLE001 - the scheduler may be gone
                log.debug("closing the Dask client: %s", exc)


# ---------------------------------------------------------------- Ray


@dataclass(eq=False)
class _RaySlot:
    actor: Any = None
    state: str = "warming"     # warming → ready; broken (cannot start)
    since: float = field(default_factory=time.monotonic)
    ready_ref: Any = None
    pid: int | None = None
    error: str = ""

    def describe(self) -> str:
        return "Ray worker" + (f" (pid {self.pid})" if self.pid else "")


class _RayBackend:
    """Slots are actors (``num_cpus=1``, one per CPU of the cluster, no restarts, no task retries): a dead or
    killed actor is replaced by a new one, which warms up before it takes work."""

    engine = "ray"

    def __init__(self, address: str, host: str, port: int):
        ray = _engine("ray", address, "Ray", "pip install 'ray[client]' (the same version as the cluster's)")
        check_reachable(address)
        _grpc_ready(address, host, port)
        self.ray = ray
        self.address = address
        if ray.is_initialized():
            raise ClusterError(f"{OPTION}: this process is already connected to a Ray cluster")
        no_auto_init()
        for attempt in range(RAY_CONNECT_ATTEMPTS):
            try:
                ray.init(address, logging_level=logging.WARNING, log_to_driver=False)
                break
            except Exception as exc:  # noqa: BLE001 - ConnectionError, version mismatch, ...
                # The head starts a server process per client; on a busy head that start, or the wait for its
                # channel, can fail once (Ray's proxier: "Starting Ray client server failed", "Proxy failed to
                # Connect to backend").
                transient = isinstance(exc, ConnectionAbortedError) and any(m in str(exc) for m in _RAY_TRANSIENT)
                if not transient or attempt + 1 == RAY_CONNECT_ATTEMPTS:
                    raise ClusterError(f"cannot connect to the Ray cluster at {address}: {_connect_failure(exc)}") \
                        from None
                log.warning("connecting to the Ray cluster at %s: %s; trying again", address, _connect_failure(exc))
                ray.shutdown()
                time.sleep(1.0)
        self._connected = True
        self._slots: list[_RaySlot] = []
        self._fetched: dict[Any, Outcome] = {}
        try:
            cpus = int(ray.cluster_resources().get("CPU", 0))
        except Exception as exc:  # noqa: BLE001
            self.close(kill=[])
            raise ClusterError(f"cannot read the Ray cluster's resources at {address}: {exc}") from None
        if cpus < 1:
            self.close(kill=[])
            raise ClusterError(f"the Ray cluster at {address} has no CPUs to evaluate on")
        self._actor_cls = ray.remote(num_cpus=1, max_restarts=0, max_task_retries=0)(_EvalActor)
        self._slots = [_RaySlot() for _ in range(cpus)]
        self._started = False

    def capacity(self) -> int:
        return sum(1 for s in self._slots if s.state != "broken")

    def threads(self, slot: _RaySlot) -> int:
        return 1

    def _spawn(self, slot: _RaySlot) -> None:
        slot.actor = self._actor_cls.remote()
        slot.ready_ref = slot.actor.ready.remote()
        slot.state, slot.since, slot.pid = "warming", time.monotonic(), None

    def start(self) -> None:
        if self._started:
            return
        self._started = True
        for slot in self._slots:
            self._spawn(slot)
        end = time.monotonic() + START_TIMEOUT_S
        while any(s.state == "warming" for s in self._slots) and time.monotonic() < end:
            self.wait([], POLL_S)
        if not any(s.state == "ready" for s in self._slots):
            raise ClusterError(f"no worker of the Ray cluster at {self.address} could start evaluating"
                             f"{self.why_no_worker()}")

    def why_no_worker(self) -> str:
        errors = sorted({s.error for s in self._slots if s.error})
        return f" ({'; '.join(errors)})" if errors else ""

    def dead(self) -> list[tuple[_RaySlot, str | None]]:
        return []  # a dead actor shows in its results

    def ready_slots(self) -> list[_RaySlot]:
        return [s for s in self._slots if s.state == "ready"]

    def submit(self, slot: _RaySlot, req: EvalRequest) -> Any:
        return slot.actor.evaluate.remote(req)

    def _lost_cluster(self, detail: str) -> ClusterError:
        self._connected = False  # no more Ray calls (see _live)
        try:
            self.ray.shutdown()
        except Exception as exc:  # noqa: BLE001
            log.debug("disconnecting from Ray: %s", exc)
        return ClusterError(f"lost the connection to the Ray cluster at {self.address}{detail}; finished "
                          "evaluations are kept: run the same command to resume")

    def wait(self, handles: list[Any], timeout: float) -> set[Any]:
        ray = self.ray
        if not self._live():
            raise self._lost_cluster("")
        warming = [s.ready_ref for s in self._slots if s.state == "warming" and s.ready_ref is not None]
        refs = handles + warming
        if not refs:
            time.sleep(timeout)
            return set()
        try:
            ready, rest = ray.wait(refs, num_returns=1, timeout=timeout)
            if ready and rest:
                more, _ = ray.wait(rest, num_returns=len(rest), timeout=0)
                ready += more
        except ConnectionError as exc:
            raise self._lost_cluster(f" ({exc})") from None
        done = set(ready)
        now = time.monotonic()
        for slot in self._slots:
            if slot.state != "warming":
                continue
            if slot.ready_ref in done:
                try:
                    slot.pid = int(ray.get(slot.ready_ref))
                    slot.state = "ready"
                except Exception as exc:  # noqa: BLE001 - e.g. the workers' environment lacks the project
                    slot.state, slot.error = "broken", f"a Ray worker cannot import the engines: {_first_line(exc)}"
                    log.warning("%s", slot.error)
                    self._kill_actor(slot)
                slot.ready_ref = None
            elif now - slot.since > START_TIMEOUT_S:
                slot.state = "broken"
                slot.error = f"a Ray actor did not start in {START_TIMEOUT_S:g}s (not enough free CPUs?)"
                self._kill_actor(slot)
        return {r for r in handles if r in done}

    def fetch(self, handles: set[Any]) -> None:
        """The results of finished evaluations, in one round trip (``collect`` then takes them)."""
        refs = [r for r in handles if r not in self._fetched]
        if len(refs) < 2:
            return
        try:
            values = self.ray.get(refs)
        except Exception as exc:  # noqa: BLE001 - one of them failed: collect one by one
            log.debug("getting %d results: %s", len(refs), exc)
            return
        self._fetched.update(zip(refs, values))

    def collect(self, slot: _RaySlot, handle: Any) -> Outcome:
        ray = self.ray
        try:
            if handle in self._fetched:
                return self._fetched.pop(handle)
            return ray.get(handle)
        except ray.exceptions.RayActorError as exc:
            who = slot.describe()
            self._replace(slot)
            raise WorkerLost(f"{who} died while evaluating ({_first_line(exc)})") from None
        except Exception as exc:  # noqa: BLE001 - e.g. the request could not be unpickled on the worker
            raise RemoteTaskError(f"worker error: {_first_line(exc)}") from None

    def _live(self) -> bool:
        """Still connected. Every Ray API call made while not connected would start a local Ray instance
        in this process (Ray's auto-init), so none is made then."""
        return self._connected and self.ray.is_initialized()

    def cancel(self, handle: Any) -> None:
        if not self._live():
            return
        try:
            self.ray.cancel(handle)
        except Exception as exc:  # noqa: BLE001 - finished, or its actor is gone
            log.debug("cancelling a Ray task: %s", exc)

    def _kill_actor(self, slot: _RaySlot) -> None:
        if slot.actor is None or not self._live():
            return
        try:
            self.ray.kill(slot.actor, no_restart=True)
        except Exception as exc:  # noqa: BLE001 - already dead
            log.debug("killing a Ray actor: %s", exc)
        slot.actor = None

    def _replace(self, slot: _RaySlot) -> None:
        self._kill_actor(slot)
        self._spawn(slot)

    def kill(self, slot: _RaySlot) -> None:
        """At a deadline: kill the actor's process (the replay cannot be interrupted) and start a new one."""
        self._replace(slot)

    def close(self, kill: list[_RaySlot]) -> None:
        if not getattr(self, "_connected", False):
            return
        for slot in self._slots:  # this client's actors: all of them go
            self._kill_actor(slot)
        self._connected = False
        try:
            self.ray.shutdown()
        except Exception as exc:  # noqa: BLE001
            log.debug("disconnecting from Ray: %s", exc)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"


def _connect_failure(exc: BaseException) -> str:
    """Why ``ray.init`` failed: its first line and, when that line only announces the head's traceback
    ("Initialization failure from server:"), the traceback's last line, which says what failed."""
    text = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    if len(text) > 1 and text[0].endswith(":"):
        return f"{type(exc).__name__}: {text[0]} {text[-1]}"
    return _first_line(exc)


__all__ = ["ClusterEvaluator", "check_reachable"]

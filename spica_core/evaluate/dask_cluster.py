"""The Dask side of :class:`~spica_core.evaluate.cluster.ClusterEvaluator`: a ``distributed.Client`` on the
scheduler at ``tcp://HOST:PORT``, whose slots are worker addresses. Tasks are pinned to their worker, a worker
killed at a deadline dies by SIGKILL (its nanny starts a new one), and a worker that left the scheduler is
reported to the evaluator, which retries its evaluations.
"""
from __future__ import annotations

import logging
import os
import signal
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from spica_core.errors import ClusterError, RemoteTaskError, WorkerLost
from spica_core.evaluate.cluster_connect import CONNECT_TIMEOUT_S, START_TIMEOUT_S, _engine, check_reachable
from spica_core.evaluate.evaluation import EvalRequest, Outcome, evaluate_in_worker
from spica_core.evaluate.evaluator import POLL_S, warm_engines

log = logging.getLogger(__name__)

WORKER_WAIT_S = 15.0      # a Dask scheduler without workers for this long at connect fails
KILL_GRACE_S = 10.0       # a killed Dask worker still registered after this is left alone (never used again)


# ---------------------------------------------------------------- worker side


async def _die() -> int:
    """Run on a Dask worker's event loop: SIGKILL this worker process shortly after replying (the replay
    thread cannot be interrupted; the nanny starts a new worker)."""
    import asyncio

    pid = os.getpid()
    asyncio.get_running_loop().call_later(0.05, os.kill, pid, signal.SIGKILL)
    return pid


# ---------------------------------------------------------------- the backend


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


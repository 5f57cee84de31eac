"""The Ray side of :class:`~spica_core.evaluate.cluster.ClusterEvaluator`: the Ray client connected to
``ray://HOST:PORT``, whose slots are actors (one process each, engines imported once). A dead or killed actor
is replaced by a new one; Ray's auto-init is turned off (``ray_private``) so that a lost connection never
starts a local Ray instance in the sweep's process.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

from spica_core.errors import ClusterError, RemoteTaskError, WorkerLost
from spica_core.evaluate.cluster_connect import CONNECT_TIMEOUT_S, OPTION, START_TIMEOUT_S, _engine, check_reachable
from spica_core.evaluate.evaluation import EvalRequest, Outcome, evaluate_in_worker
from spica_core.evaluate.ray_private import no_auto_init
from spica_core.evaluate.evaluator import POLL_S, warm_engines

log = logging.getLogger(__name__)

# How the head's proxier reports that the server process it started for this client died at start (it dies during
# fork on a busy head, ray-project/ray#63202; the proxier then finds it failed, or finds it a zombie).
_RAY_TRANSIENT = ("client server failed", "Proxy failed to Connect to backend", "ZombieProcess")
RAY_CONNECT_ATTEMPTS = 3   # the Ray head failing to start this client's server process is tried again


# ---------------------------------------------------------------- worker side


class _EvalActor:
    """A Ray actor: one process, engines imported once, one evaluation at a time."""

    def __init__(self) -> None:
        self.pid = warm_engines()

    def ready(self) -> int:
        return self.pid

    def evaluate(self, req: EvalRequest) -> Outcome:
        return evaluate_in_worker(req)


# ---------------------------------------------------------------- connecting


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


# ---------------------------------------------------------------- the backend


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

"""The optimizer process: a sweep's Vizier studies, in a spawned process of their own.

jax traces GP-UCB-PE's code once per process (about 6 s of Python on a 2-core machine)
and an ask is mostly Python dispatch. In the sweep's own process both shared one GIL with Prefect's start-up, the
search loop and the workers' results, and the tracing could only start once jax was imported there, seconds into
the command. Here the process starts as soon as a sweep has read its config (``spica sweep``, or the flow when it
is started another way), imports jax and traces while Prefect's server starts and the stages before the search
run, and answers the search's asks beside it. A :class:`RemoteStudy` is the search's handle on a study there: the
same arguments, ``sync`` and ``suggest`` as a local :class:`~spica_core.search.study.Study`, and the same picks
(the same code on the same inputs).

One process serves every sweep of the sweep's process (a test session, a Prefect worker running several flows),
each ask on a thread of its own, so a branch's space-filling ask never waits behind another's model ask; model asks
take turns on the process's :data:`~spica_core.search.jax_setup.MODEL_ASK`, as they did in the sweep's process.

Stopping: the process ignores SIGINT (the sweep decides, as for its replay workers), ends when its pipe closes
and is a daemon; a sweep's hard stop kills its process tree (``spica_cli/supervisor.py``).
"""
from __future__ import annotations

import itertools
import multiprocessing as mp
import pickle
import signal
import threading
import weakref
from collections.abc import Iterable, Sequence
from concurrent.futures import Future
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

from spica_core.errors import OptimizerStoppedError
from spica_core.evaluate import start_child
from spica_core.search.gp_warm_up import warm_up
from spica_core.search.study import Goal, Study, TrialRecord

if TYPE_CHECKING:
    from spica_core.config.model import SmartSearchConfig
    from spica_core.space.params import Param


def traces_ahead(config: SmartSearchConfig) -> bool:
    """Whether a sweep's first model ask is GP-UCB-PE's, worth tracing before the search: a rapid DEFAULT sweep of
    one objective (the other algorithms trace little, or nothing)."""
    from spica_core.config.sweep import SweepPolicy, VizierAlgorithm

    return config.sweep.policy is SweepPolicy.rapid and config.sweep.algorithm is VizierAlgorithm.DEFAULT \
        and not config.goal.is_pareto


def optimizer_for(config: SmartSearchConfig) -> OptimizerProcess | None:
    """The optimizer process a sweep of ``config`` asks (started now if none runs; None for a thorough sweep,
    which asks no model), tracing GP-UCB-PE ahead when :func:`traces_ahead`."""
    from spica_core.config.sweep import SweepPolicy

    if config.sweep.policy is not SweepPolicy.rapid:
        return None
    return optimizer_process(trace=traces_ahead(config))


_PROCESS: list[OptimizerProcess] = []  # this process's optimizer process, once started
_STARTING = threading.Lock()


def optimizer_process(trace: bool = False) -> OptimizerProcess:
    """This process's optimizer process: the running one, or a new one if none runs (or it ended). ``trace``: it
    traces GP-UCB-PE now, once (:func:`~spica_core.search.gp_warm_up.warm_up`)."""
    with _STARTING:
        if not _PROCESS or not _PROCESS[0].alive:
            if _PROCESS:
                _PROCESS.pop().close()
            _PROCESS.append(OptimizerProcess())
        process = _PROCESS[0]
    if trace and not process.tracing:
        process.tracing = True
        process.send("warm", True)
    return process


class OptimizerProcess:
    """A spawned process holding studies, and the pipe to it: :meth:`call` sends one request and waits for its
    answer (requests from several threads at once are answered as they finish)."""

    def __init__(self) -> None:
        ctx = mp.get_context("spawn")
        self._conn, child = ctx.Pipe(duplex=True)
        self._proc = ctx.Process(target=_serve, args=(child,), name="spica-optimizer", daemon=True)
        self._ids = itertools.count()
        self._sending = threading.Lock()
        self._waiting: dict[int, Future[Any]] = {}
        self._ended: BaseException | None = None
        self._gone = threading.Event()  # the reader saw the process end and reaped it (nothing else waits for it)
        self.tracing = False
        start_child(self._proc)
        child.close()
        threading.Thread(target=self._read, name="spica-optimizer-answers", daemon=True).start()
        self.send("warm", False)  # imports jax and Vizier now

    @property
    def pid(self) -> int | None:
        return self._proc.pid

    @property
    def alive(self) -> bool:
        return self._ended is None

    @property
    def exitcode(self) -> int | None:
        """The process's exit code once it has ended (None while it runs)."""
        return self._proc.exitcode if self._gone.is_set() else None

    def study(self, params: Sequence[Param], objectives: Sequence[tuple[str, Goal]] = (("objective", "max"),),
              algorithm: str = "DEFAULT", seed: int = 0, *, prior: Iterable[TrialRecord] = ()) -> RemoteStudy:
        return RemoteStudy(self, params, objectives, algorithm, seed, prior=prior)

    def send(self, op: str, *args: Any) -> Future[Any]:
        """Send one request; its answer (or the error it raised there) arrives in the returned future."""
        future: Future[Any] = Future()
        with self._sending:
            if self._ended is None:
                number = next(self._ids)
                self._waiting[number] = future
                try:
                    self._conn.send((number, op, args))
                    return future
                except (OSError, ValueError):  # the pipe is gone, or closed: the process has ended
                    self._waiting.pop(number, None)
        self._gone.wait(5.0)  # the reader says how it ended (it alone waits for the process)
        raise OptimizerStoppedError(str(self._ended or "the optimizer process, which holds the sweep's studies, "
                                        "ended; finished evaluations are kept: run the same command to resume"))

    def call(self, op: str, *args: Any) -> Any:
        return self.send(op, *args).result()

    def _read(self) -> None:
        while True:
            try:
                number, error, answer = self._conn.recv()
            except Exception:  # noqa: BLE001 - ended, or an answer that cannot be read: no ask may wait forever
                break
            future = self._waiting.pop(number, None)
            if future is None:
                continue
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(answer)
        self._proc.join(5.0)  # only this thread waits for the process: two threads reaping one child race
        stopped = self._stopped()
        with self._sending:
            self._ended = stopped
            waiting, self._waiting = self._waiting, {}
        self._gone.set()
        for future in waiting.values():
            future.set_exception(stopped)

    def _stopped(self) -> OptimizerStoppedError:
        """How the process ended, for the reader thread once it has reaped it."""
        code = self._proc.exitcode
        how = "killed or crashed" if code is None else f"exit code {code}" + (
            " (killed by that signal; -9 also when the system ran out of memory)" if code < 0 else "")
        return OptimizerStoppedError(f"the optimizer process, which holds the sweep's studies, ended ({how}); "
                                     "finished evaluations are kept: run the same command to resume")

    def close(self) -> None:
        """End the process: its running asks finish first (it waits for them), unless it is killed at exit."""
        with self._sending:
            if self._ended is None:
                try:
                    self._conn.send(None)
                except (OSError, ValueError):
                    pass
        if not self._gone.wait(5.0):
            self._proc.kill()
            self._gone.wait(5.0)


class RemoteStudy:
    """A :class:`~spica_core.search.study.Study` in the optimizer process: opened with the same arguments (a bad
    declaration raises here, with the study's message), told its trials by :meth:`sync`, asked by :meth:`suggest`.
    The trials travel with each ask, and the pool only when it is not the same object as the last ask's, so the
    study there keeps the pool's converted features."""

    def __init__(self, process: OptimizerProcess, params: Sequence[Param],
                 objectives: Sequence[tuple[str, Goal]] = (("objective", "max"),), algorithm: str = "DEFAULT",
                 seed: int = 0, *, prior: Iterable[TrialRecord] = ()) -> None:
        self._process = process
        self.algorithm = str(getattr(algorithm, "value", algorithm))
        self.seed = int(seed)
        self._records: list[TrialRecord] = []
        self._pool: Sequence[dict[str, Any]] | None = None
        self.waited = 0.0
        self._id: int = process.call("open", tuple(params), tuple(objectives), self.algorithm, self.seed, tuple(prior))
        weakref.finalize(self, _forget, process, self._id).atexit = False  # at exit the process ends anyway

    def sync(self, records: Sequence[TrialRecord]) -> None:
        self._records = list(records)

    def suggest(self, count: int, step: int, pool: Sequence[dict[str, Any]],
                allowed: Sequence[bool] | None = None, *, model: bool = True,
                pending: Sequence[dict[str, Any]] = (), exploit: bool = True) -> list[int]:
        sent = None if pool is self._pool else list(pool)
        picks, self.waited = self._process.call("suggest", self._id, self._records, sent, count, step,
                                                None if allowed is None else list(allowed), model, list(pending),
                                                exploit)
        self._pool = pool
        return picks


def _forget(process: OptimizerProcess, study: int) -> None:
    if process.alive:
        try:
            process.send("forget", study)
        except OptimizerStoppedError:
            pass


# ---------------------------------------------------------------- the process's side


def _travels(error: BaseException) -> bool:
    """Whether an error comes out of the pipe as it went in (an exception whose constructor takes other arguments
    than its message pickles, and fails to unpickle)."""
    try:
        pickle.loads(pickle.dumps(error))
    except Exception:  # noqa: BLE001 - any failure means: send its text instead
        return False
    return True


def _serve(conn: Connection) -> None:
    """The optimizer process: each request on a thread of its own, its answer sent when done. Threads are not
    daemons: at the end (the pipe closed) the process waits for a running ask instead of stopping it inside jax,
    which aborts the process."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the sweep decides (it was blocked since the spawn anyway)
    studies: dict[int, Study] = {}
    pools: dict[int, Sequence[dict[str, Any]]] = {}
    sending = threading.Lock()
    opened = itertools.count()

    def answer(number: int, op: str, args: tuple[Any, ...]) -> None:
        error: BaseException | None = None
        result: Any = None
        try:
            if op == "warm":
                warm_up(trace=args[0])
            elif op == "open":
                params, objectives, algorithm, seed, prior = args
                study_id = next(opened)
                studies[study_id] = Study(params, objectives, algorithm, seed, prior=prior)
                result = study_id
            elif op == "suggest":
                study_id, records, pool, count, step, allowed, model, pending, exploit = args
                study = studies[study_id]
                if pool is not None:
                    pools[study_id] = pool
                study.sync(records)
                result = (study.suggest(count, step, pools[study_id], allowed, model=model, pending=pending,
                                        exploit=exploit), study.waited)
            elif op == "forget":
                studies.pop(args[0], None)
                pools.pop(args[0], None)
            else:
                raise ValueError(f"unknown request {op!r}")
        except BaseException as exc:  # noqa: BLE001 - raised again where the request was made
            error = exc if _travels(exc) else RuntimeError(f"{type(exc).__name__}: {exc}")
        try:
            with sending:
                conn.send((number, error, result))
        except (OSError, ValueError):  # the sweep has gone: nobody waits for the answer
            pass
        except Exception as exc:  # noqa: BLE001 - an answer or error that does not pickle: say so instead
            with sending:
                conn.send((number, RuntimeError(f"the optimizer's answer to {op!r} could not be sent: {exc}"), None))

    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return
        if message is None:
            return
        number, op, args = message
        threading.Thread(target=answer, args=(number, op, args), name=f"spica-optimizer-{op}").start()


__all__ = ["OptimizerProcess", "RemoteStudy", "optimizer_for", "optimizer_process", "traces_ahead"]

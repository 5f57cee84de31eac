"""Stopping ``spica sweep`` on SIGINT / SIGTERM, and when its Prefect API goes away: promptly, quietly, no orphans.

Why this module exists (Prefect 3.9.1, read in its source and measured):

* The temporary ("ephemeral") API server is a ``python -m uvicorn`` child that Prefect starts in the
  sweep's process group. A Ctrl-C or a group SIGTERM (``timeout``, Kubernetes) stops it together with
  the sweep; every API call after that (the engine reporting the crash, the log and event workers
  draining at exit) retries the dead server with exponential backoff, 1+2+4+8+16 s per call: the
  reported hangs. So the sweep starts that server itself, in its own session (:class:`~spica_cli.api_server.TempServer`): it
  outlives the flow's crash report and the exit drains, and an atexit callback stops it last. It also
  gets a parent-death signal, so not even a SIGKILLed sweep orphans it.
* Starting that server was most of the time from ``spica sweep`` to its first replay (issue 21,
  ``bench/bench_startup.py``): the child's imports and set-up, and Prefect's server modules, imported by the
  sweep itself only to start the child. So the sweep starts the child first thing, *held*
  (:func:`~spica_cli.api_server.prestart_api`): it imports while the sweep reads its config and imports Prefect, and serves once
  Prefect's settings say that a temporary server is wanted (:meth:`_Guard.start_api`); the sweep never imports
  Prefect's server, and points its own settings at the child's URL (:func:`~spica_cli.api_server.use_api_url`). The first API call,
  slow on a new server, is made while the sweep imports the flow and the optimizer. Runs land in the same
  database (PREFECT_HOME) as before; with PREFECT_API_URL set, none of this happens.
* The flow engine swaps SIGTERM for its own handler while a flow runs (``capture_sigterm``). When its
  ``TerminationSignal`` leaves the engine it restores the previous handler and sends SIGTERM again; with
  SIG_DFL there the process dies on the spot, atexit never runs and the server is orphaned. Our handler
  is that previous handler, so the second SIGTERM becomes :class:`Interrupted`.
* A BaseException the flow engine sees after the flow body has finished is logged at debug and
  swallowed, and a Ctrl-C during interpreter teardown lands in an atexit callback ("Exception ignored
  ... KeyboardInterrupt", exit 0): the "ignored" SIGINT. So a stop is recorded before anything is
  raised and re-checked when the flow returns, and teardown after a finished sweep gets its own handler.
* A Python handler can also run inside a gc callback (jax registers one) or a ``__del__``, where Python
  cannot raise: it prints the stop's exception as "Exception ignored in …" with a traceback, and the stop is
  lost. While a sweep runs, such a stop exception is not printed; the signal is sent again a moment later,
  to be raised where the sweep can see it (the sentry's deadline stays, should that land badly too).
* A Python handler runs only between bytecodes of the main thread, which runs the flow, the Vizier GP
  and (``parallel_evals: 1``) the replay: a long native call delays it. So the C-level wakeup fd also
  tells a sentry thread, which gives the orderly way :data:`GRACE_S` and then kills the children and
  ``os._exit``\\ s; likewise when the API server dies, since every way out through Prefect then hangs.

Exit codes: 130 (SIGINT) and 143 (SIGTERM), after one line on stderr; 2 with one ``error:`` line when the
Prefect API is lost (an environment failure to fix and re-run, like a held run folder; 1 would read as
"ran, found nothing feasible"). Finished evaluations are on disk after every ask, so re-running resumes.
"""
from __future__ import annotations

import atexit
import contextlib
import logging
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any, Callable

from spica_cli.api_server import TICK_S, TempServer, adopt, own_server, take_held
from spica_cli.prefect_private import running_temporary_server
from spica_cli.python_private import before_thread_join

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
GRACE_S = 6.0          # stop signal → forced exit, if the orderly way (report the crash, drain, stop) is not done
SERVER_GRACE_S = 1.5   # the API server's SIGTERM → SIGKILL, on a forced exit
REDELIVER_S = 0.05     # a stop exception Python could not raise: the signal is sent again after this
REMOTE_LOSS_S = 20.0   # a PREFECT_API_URL server that has not answered this long ends the sweep
REMOTE_EVERY_S = 2.0

Handler = Callable[[int, FrameType | None], Any] | int | None


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM stopped the sweep. A KeyboardInterrupt, so no ``except Exception`` on the way (Prefect's,
    the pool's, ours) takes it for an error of the stage; ``main()`` prints :attr:`message` and exits 128 + signal."""

    def __init__(self, signum: int, run_dir: Path | None = None):
        super().__init__(signum)
        self.signum = signum
        self.run_dir = run_dir

    @property
    def exit_code(self) -> int:
        return 128 + self.signum

    @property
    def message(self) -> str:
        return f"interrupted ({_name(self.signum)}); {_kept(self.run_dir)}"


def _stop_signal(exc: BaseException | None) -> int | None:
    """The stop signal behind ``exc``: ours (Interrupted), Prefect's flow engine's (TerminationSignal), or a
    plain Ctrl-C; None for anything else."""
    from prefect.exceptions import TerminationSignal

    if isinstance(exc, Interrupted):
        return exc.signum
    if isinstance(exc, KeyboardInterrupt):
        return signal.SIGINT
    if isinstance(exc, TerminationSignal) and exc.signal in STOP_SIGNALS:
        return exc.signal
    return None


def _name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def _kept(run_dir: Path | None) -> str:
    where = f" in {run_dir}" if run_dir else ""
    return f"finished evaluations are kept{where}: run the same command to resume"


def interrupted(exc: BaseException, default_code: int = 128 + signal.SIGINT) -> tuple[str, int]:
    """The line ``main()`` prints for a KeyboardInterrupt and the exit code (the line is empty when a forced exit
    already printed it, which is then moments away). A plain Ctrl-C outside a sweep gets ``default_code``."""
    if not isinstance(exc, Interrupted):
        return "interrupted; finished stages are kept in the run folder", default_code
    guard = _ACTIVE
    if guard is not None and not guard.announce():
        return "", exc.exit_code
    return ("\n" if sys.stderr.isatty() else "") + exc.message, exc.exit_code


# ------------------------------------------------------------------ the guard


class _Guard:
    """Process-wide state of one sweep's stop handling (one at a time, on the main thread)."""

    def __init__(self) -> None:
        self.run_dir: Path | None = None
        self._lock = threading.RLock()  # re-entrant: the Python handler may run inside a `with self._lock`
        self.signum: int | None = None      # the first stop signal
        self._raised = False                # Interrupted raised once; later signals only count
        self._announced = False
        self._forcing = False
        self._closing = threading.Event()
        self._rsock: socket.socket | None = None
        self._wsock: socket.socket | None = None
        self._previous: dict[int, Handler] = {}
        self._previous_wakeup = -1
        self._previous_unraisable: Callable[[Any], Any] = sys.unraisablehook
        self._own: TempServer | None = None      # our temporary server (start_api), waited for by watch_api
        self._remote: str | None = None           # PREFECT_API_URL's server
        self._server_proc: subprocess.Popen[Any] | None = None  # the temporary server's process, watched
        self._threads: list[threading.Thread] = []
        self._installed = False

    # -- installing

    def install(self) -> None:
        self._installed = True
        self._rsock, self._wsock = socket.socketpair()
        self._rsock.setblocking(False)
        self._wsock.setblocking(False)
        for sig in STOP_SIGNALS:
            self._previous[sig] = signal.signal(sig, self._on_signal)
        self._previous_wakeup = signal.set_wakeup_fd(self._wsock.fileno(), warn_on_full_buffer=False)
        self._previous_unraisable, sys.unraisablehook = sys.unraisablehook, self._on_unraisable
        self._start(self._sentry, "spica-stop-sentry")

    def _start(self, target: Callable[[], None], name: str) -> None:
        t = threading.Thread(target=target, name=name, daemon=True)
        t.start()
        self._threads.append(t)

    def start_api(self) -> None:
        """Where the sweep's Prefect API is, from Prefect's settings: the server PREFECT_API_URL names, Prefect's own
        temporary server when this process runs one already, or ours: the held one released now (it comes up
        while the sweep imports the flow), else one started now. :meth:`watch_api` waits for it."""
        held = take_held()
        if not self._installed:  # not on the main thread: Prefect starts its server itself, as it always did
            if held is not None:
                held.stop()
            return
        import prefect.context
        from prefect.settings import (
            PREFECT_API_URL, PREFECT_SERVER_EPHEMERAL_ENABLED, PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS,
        )

        url = PREFECT_API_URL.value()
        earlier = own_server()
        ours = earlier is not None and url == earlier.api_url
        if ours and earlier is not None and earlier.alive():  # an earlier sweep in this process started it
            self._own = earlier
        elif url and not ours:
            self._remote = url
        elif not PREFECT_SERVER_EPHEMERAL_ENABLED.value():
            pass  # Prefect's own error names the missing API when the flow starts
        elif (server := running_temporary_server()) is not None:
            self._server_proc = server.server_process
        elif prefect.context.SettingsContext.get() is not prefect.context.GLOBAL_SETTINGS_CONTEXT:
            pass  # settings set in this process (a `temporary_settings` block): Prefect starts its server for them
        else:
            try:
                self._own = held or TempServer(hold=False)
            except (OSError, RuntimeError) as exc:
                from spica_core.errors import SpicaError

                raise SpicaError(f"the temporary Prefect API server did not start: {exc}") from None
            held = None if self._own is held else held
            self._own.release(float(PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS.value()))
        if held is not None:
            held.stop()

    def watch_api(self) -> None:
        """Wait for the temporary server (once, before the flow starts) and point Prefect at it; then watch the
        sweep's API: the temporary server's process, or PREFECT_API_URL's server over HTTP."""
        if not self._installed:
            return
        if self._own is not None:
            self._own.wait_ready()
            adopt(self._own)
            self._server_proc = self._own.proc
        if self._server_proc is not None:
            self._start(self._watch_server, "spica-api-watch")
        elif self._remote is not None:
            url = self._remote
            self._start(lambda: self._watch_remote(url), "spica-api-watch")

    def uninstall(self) -> None:
        """Back to the previous handlers (a sweep called in-process, e.g. from tests, leaves nothing behind)."""
        self._closing.set()
        self._poke(0)
        for t in self._threads:
            t.join(2.0)
        assert self._rsock is not None and self._wsock is not None
        current = signal.set_wakeup_fd(self._previous_wakeup)
        if current != self._wsock.fileno():  # someone replaced ours meanwhile: theirs stays
            signal.set_wakeup_fd(current)
        for sig, handler in self._previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
        if sys.unraisablehook == self._on_unraisable:
            sys.unraisablehook = self._previous_unraisable
        self._rsock.close()
        self._wsock.close()
        self._wsock = None

    # -- signals

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._note(signum)
        with self._lock:
            if self._raised:
                return
            self._raised = True
        raise Interrupted(signum, self.run_dir)

    def _on_unraisable(self, unraisable: Any) -> None:
        """A stop's exception raised where Python cannot raise (module docstring): send the signal again."""
        signum = _stop_signal(unraisable.exc_value)
        if signum is None:
            self._previous_unraisable(unraisable)
            return
        with self._lock:
            if self._forcing:
                return
            if isinstance(unraisable.exc_value, Interrupted):
                self._raised = False  # ours was never raised where the sweep could see it
        timer = threading.Timer(REDELIVER_S, os.kill, (os.getpid(), signum))
        timer.daemon = True
        timer.start()

    def _note(self, signum: int) -> None:
        with self._lock:
            if self.signum is not None:
                return
            self.signum = signum
        # Prefect's internal services log to stderr when their API calls fail on the way out.
        logging.getLogger("prefect._internal").setLevel(logging.CRITICAL + 1)
        self._poke(signum)

    def _poke(self, byte: int) -> None:
        if self._wsock is not None:
            with contextlib.suppress(OSError):
                self._wsock.send(bytes([byte]))

    def stopping(self) -> None:
        """The sweep is unwinding for a stop: no more raising; the sentry keeps its deadline until exit."""
        with self._lock:
            self._raised = True

    def stop_exception(self) -> Interrupted | None:
        return None if self.signum is None else Interrupted(self.signum, self.run_dir)

    def announce(self) -> bool:
        """True for the one caller that should print the stop message."""
        with self._lock:
            first = not self._announced
            self._announced = True
            return first

    def _sentry(self) -> None:
        """Reads the wakeup fd (signal numbers, written by the C-level handler even while the main thread is
        stuck in native code); once a stop signal came, forces the exit if the process outlives GRACE_S."""
        assert self._rsock is not None
        deadline: float | None = None
        while not self._closing.is_set():
            timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                readable, _, _ = select.select([self._rsock], [], [], timeout)
            except (OSError, ValueError):
                return
            if self._closing.is_set():
                return
            if readable:
                try:
                    data = self._rsock.recv(64)
                except BlockingIOError:
                    continue
                except OSError:
                    return
                for sig in data:
                    if sig in STOP_SIGNALS:
                        self._note(sig)
                if self.signum is not None and deadline is None:
                    deadline = time.monotonic() + GRACE_S
            elif deadline is not None and time.monotonic() >= deadline:
                assert self.signum is not None
                self.force_exit(128 + self.signum, Interrupted(self.signum, self.run_dir).message)

    # -- the API

    def _watch_server(self) -> None:
        proc = self._server_proc
        while proc is not None and not self._closing.wait(TICK_S):
            code = proc.poll()
            if code is not None and not self._closing.is_set() and self.signum is None:
                self.force_exit(2, f"error: lost the Prefect API: its temporary server (pid {proc.pid}) exited "
                                   f"with code {code} during the sweep; {_kept(self.run_dir)}")

    def _watch_remote(self, url: str) -> None:
        import httpx

        silent_since: float | None = None
        with httpx.Client(timeout=REMOTE_EVERY_S * 2) as client:
            while not self._closing.wait(REMOTE_EVERY_S):
                try:
                    client.get(f"{url.rstrip('/')}/health")  # any HTTP answer means reachable
                    silent_since = None
                except httpx.TransportError:
                    now = time.monotonic()
                    silent_since = silent_since or now
                    if now - silent_since >= REMOTE_LOSS_S and not self._closing.is_set() and self.signum is None:
                        self.force_exit(2, f"error: lost the Prefect API: {url} has not answered for "
                                           f"{REMOTE_LOSS_S:g} s; {_kept(self.run_dir)}")

    # -- the way out when the orderly one cannot finish

    def force_exit(self, code: int, message: str) -> None:
        """Kill the children (workers first, so that no killed evaluation is recorded as failed), print the one
        line, ``os._exit``. Any thread; writes stderr's fd directly (the main thread may hold sys.stderr)."""
        with self._lock:
            if self._forcing:
                return
            self._forcing = True
            announce = not self._announced
            self._announced = True
        logging.getLogger("prefect._internal").setLevel(logging.CRITICAL + 1)
        with contextlib.suppress(Exception):
            from spica_core.evaluate.pool import abandon_all

            abandon_all()
        _kill_children(self._server_proc)
        if announce:
            with contextlib.suppress(OSError):
                os.write(2, (("\n" if os.isatty(2) else "") + message + "\n").encode())
        os._exit(code)


def _kill_children(server: subprocess.Popen[Any] | None) -> None:
    """The API server (SIGTERM, SIGKILL after SERVER_GRACE_S) and any other child (SIGKILL). Not the
    multiprocessing resource tracker: it exits by itself when this process is gone."""
    import psutil

    procs: list[psutil.Process] = []
    with contextlib.suppress(psutil.Error):
        procs = psutil.Process().children(recursive=True)
    if server is not None and server.poll() is None:
        with contextlib.suppress(OSError):
            server.terminate()
    for p in procs:
        with contextlib.suppress(psutil.Error):
            if server is not None and p.pid == server.pid:
                continue
            if "resource_tracker" in " ".join(p.cmdline()):
                continue
            p.kill()
    if server is not None:
        try:
            server.wait(SERVER_GRACE_S)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(OSError):
                server.kill()
        except Exception:  # noqa: BLE001 - the main thread may be reaping it concurrently
            pass


_ACTIVE: _Guard | None = None


def _exit_phase_handler(signum: int, frame: FrameType | None) -> None:
    """A stop signal while the interpreter tears down after a finished sweep: nothing is left to save."""
    server = own.proc if (own := own_server()) is not None else None
    with contextlib.suppress(Exception):
        server = server or getattr(running_temporary_server(), "server_process", None)
    _kill_children(server)
    with contextlib.suppress(OSError):
        os.write(2, f"interrupted ({_name(signum)}) while exiting; the sweep had finished\n".encode())
    os._exit(128 + signum)


def _arm_exit_phase() -> None:
    """At interpreter shutdown, before Prefect drains its log and event workers and stops its server (threading's
    exit hooks run last-registered first, and atexit after them), stop signals exit at once instead."""
    def arm() -> None:
        if threading.current_thread() is threading.main_thread():
            for sig in STOP_SIGNALS:
                signal.signal(sig, _exit_phase_handler)

    before_thread_join(arm)  # python_private.py: the one hook Python has for that moment


def _skip_finalization() -> None:
    """After a stop, once the atexit callbacks registered after this one have run (Prefect stops its server in
    one; threading's exit hooks, which drain its log and event workers, ran before), exit without the
    interpreter's finalization: about 2 s of native teardown (XLA, the runtime) that saves nothing."""
    guard = _ACTIVE
    if guard is None or guard.signum is None:
        return
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(128 + guard.signum)


atexit.register(_skip_finalization)  # at import, i.e. before Prefect registers its server's stop


@contextlib.contextmanager
def stoppable() -> Iterator[_Guard]:
    """Run a sweep so that SIGINT / SIGTERM stop it cleanly, and a lost API ends it (module docstring).

    Inside: the first stop signal raises :class:`Interrupted` in the main thread (later ones only count), and
    the process is forced out GRACE_S after it if still alive. Leaving on a stop re-raises :class:`Interrupted`
    whatever was raised on the way (a stop that Prefect swallowed too); the handlers then stay until the
    process exits, which a stop signal means. Leaving otherwise restores the previous handlers.
    """
    global _ACTIVE
    if threading.current_thread() is not threading.main_thread() or _ACTIVE is not None:
        yield _Guard()  # signals are the main thread's business; a nested sweep leaves them to the outer one
        return
    guard = _Guard()
    guard.install()
    _ACTIVE = guard
    try:
        yield guard
    except BaseException as exc:
        from prefect.exceptions import TerminationSignal

        if isinstance(exc, TerminationSignal):
            guard._note(exc.signal)
        stop = guard.stop_exception()
        if stop is None:
            _ACTIVE = None
            guard.uninstall()
            raise
        guard.stopping()
        if isinstance(exc, Interrupted):
            raise
        raise stop from None  # e.g. Prefect's TerminationSignal, or what the stop made fail on the way out
    stop = guard.stop_exception()
    if stop is not None:  # a stop came and something swallowed its exception: still stop
        guard.stopping()
        raise stop
    _ACTIVE = None
    guard.uninstall()
    _arm_exit_phase()


__all__ = ["GRACE_S", "Interrupted", "interrupted", "stoppable"]

"""``spica sweep`` as two processes: this one supervises, a child runs the flow.

Why two: a stop must be prompt and quiet and leave no process behind, while Prefect's API must outlive the flow's
report of its own end. In one process that took Prefect's internals (its temporary server is a child in the
sweep's process group, so a Ctrl-C killed it first and every later API call hung in retries). Split, it takes only
public parts:

* The child (the same ``spica sweep`` command, with :data:`CHILD_ENV` set) runs the flow in its own session, so a
  Ctrl-C at the terminal or a SIGTERM to the group reaches only this process. This process passes one SIGINT on
  to the child, which unwinds as from any Ctrl-C: the flow records its end, the workers stop, and every finished
  evaluation is already on disk. A child still alive :data:`GRACE_S` later is killed with its process tree;
  whatever a child leaves in its session when it exits is killed too.
* Without a ``PREFECT_API_URL`` (environment or Prefect profile), this process starts the API server with
  Prefect's documented command, ``prefect server start --no-scheduler --no-late-runs --no-ui``, in its own
  session, on a free local port, and stops it after the child. Runs land in ``PREFECT_HOME``'s database, as
  with Prefect's temporary server. Server, child and the reading of Prefect's settings start together: the
  server is started unless the environment names an API, and stopped again if the settings name one after all
  (a profile); the child gets the URL on its stdin before it imports Prefect, and waits for its ``/health``.
* The API is watched: the server's process, or ``PREFECT_API_URL``'s ``/health``. A lost API ends the sweep.
* Both children get a parent-death signal (Linux ``prctl``, kept across ``exec``): a killed supervisor orphans
  nothing.

Exit codes: the child's; 128 + the signal after a stop, with one line on stderr; 2 with one ``error:`` line when
the API is lost.
"""
from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import FrameType

from spica_core.evaluate.children import process_tree, stop_processes

CHILD_ENV = "SPICA_SWEEP_CHILD"   # set in the child's environment: that process runs the flow
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
GRACE_S = 6.0            # the stop forwarded to the child → its process tree is killed
SERVER_GRACE_S = 2.0     # the API server's SIGTERM → SIGKILL
REMOTE_LOSS_S = 20.0     # PREFECT_API_URL's server silent this long: the API is lost
REMOTE_EVERY_S = 2.0
TICK_S = 0.1

# Run argv[3:] so that it gets signal argv[1] when its parent dies (prctl PR_SET_PDEATHSIG = 1, kept across exec);
# a parent (pid argv[2]) that died before the prctl sends nothing, so that case gets the signal at once.
_PARENT_DEATH = ("import ctypes, os, sys\n"
                 "try:\n    ctypes.CDLL(None, use_errno=True).prctl(1, int(sys.argv[1]))\n"
                 "except (AttributeError, OSError):\n    pass\n"
                 "if os.getppid() != int(sys.argv[2]):\n    os.kill(os.getpid(), int(sys.argv[1]))\n"
                 "os.execv(sys.argv[3], sys.argv[3:])\n")


def with_parent_death(command: list[str], signum: int) -> list[str]:
    """``command`` (starting with an executable's path) so that it receives ``signum`` when this process dies."""
    return [sys.executable, "-c", _PARENT_DEATH, str(int(signum)), str(os.getpid()), *command]


def configured_api() -> tuple[str | None, bool]:
    """``PREFECT_API_URL`` from Prefect's settings (environment, profile, ...), and whether they allow a temporary
    server. With neither, Prefect's own error names what is missing."""
    from prefect.settings import PREFECT_API_URL, PREFECT_SERVER_EPHEMERAL_ENABLED

    return PREFECT_API_URL.value() or None, bool(PREFECT_SERVER_EPHEMERAL_ENABLED.value())


def _free_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}/api"


def start_server(url: str) -> subprocess.Popen[bytes]:
    """``prefect server start`` at ``url``, in its own session. Its services record the sweep's task runs and
    events (the UI shows them); it schedules nothing and marks nothing late: no UI, scheduler or late-runs."""
    port = url.rsplit(":", 1)[1].split("/")[0]
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    command = [sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1", "--port", port,
               "--no-scheduler", "--no-late-runs", "--no-ui", "--log-level", "ERROR"]
    return subprocess.Popen(with_parent_death(command, signal.SIGTERM), env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, start_new_session=True)


def health(url: str, timeout: float) -> int | None:
    """The HTTP status of the Prefect API's ``/health`` at ``url``; None when nothing answers."""
    import httpx

    try:
        return httpx.get(f"{url.rstrip('/')}/health", timeout=timeout).status_code
    except httpx.TransportError:
        return None


def wait_for_api(url: str) -> None:
    """In the child: until the Prefect API at ``url`` answers (its server may still be starting), within Prefect's
    own start-up timeout for a temporary server, PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS."""
    from prefect.settings import PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS

    from spica_core.errors import SpicaError

    timeout = float(PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS.value())
    end = time.monotonic() + timeout
    while health(url, 2.0) != 200:
        if time.monotonic() >= end:
            raise SpicaError(f"the Prefect API at {url} did not answer within {timeout:g} s (raise "
                             "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS on a slow machine, or set "
                             "PREFECT_API_URL to a running server)")
        time.sleep(0.1)


def read_api_url() -> str | None:
    """In the child, before Prefect is imported: the API URL the supervisor sends (None: Prefect's settings)."""
    url = sys.stdin.readline().strip()
    if url:
        os.environ["PREFECT_API_URL"] = url
    return url or None


def _name(signum: int) -> str:
    return signal.Signals(signum).name


def kept(run_dir: Path) -> str:
    return f"finished evaluations are kept in {run_dir}: run the same command to resume"


class _Watch:
    """The sweep's API: fails when the server's process exits, or when PREFECT_API_URL stays silent too long."""

    def __init__(self, url: str | None, server: subprocess.Popen[bytes] | None):
        self.url, self.server = url, server
        self._checked = self._answered = time.monotonic()
        self._warm = server is None

    def warm_up(self) -> None:
        """Once our server answers, make its first API call, which is slow (its lazy set-up): here, while the
        child imports, rather than in the flow's first call."""
        if self._warm or self.url is None or health(self.url, 1.0) != 200:
            return
        import httpx

        self._warm = True
        with contextlib.suppress(httpx.HTTPError):
            httpx.get(f"{self.url}/admin/version", timeout=2.0)

    def lost(self) -> str | None:
        if self.server is not None:
            code = self.server.poll()
            return None if code is None else (f"its temporary server (pid {self.server.pid}) exited with code "
                                              f"{code} during the sweep")
        now = time.monotonic()
        if self.url is None or now - self._checked < REMOTE_EVERY_S:
            return None
        self._checked = now
        if health(self.url, 1.0) is not None:  # any HTTP answer means reachable
            self._answered = now
        elif now - self._answered >= REMOTE_LOSS_S:
            return f"{self.url} has not answered for {REMOTE_LOSS_S:g} s"
        return None


def supervise(command: list[str], run_dir: Path) -> int:
    """Run ``command`` (the child, argv with its executable) under the rules of the module docstring."""
    stops: list[int] = []
    previous = {}
    if threading.current_thread() is threading.main_thread():
        def on_stop(signum: int, frame: FrameType | None) -> None:
            stops.append(signum)
        previous = {sig: signal.signal(sig, on_stop) for sig in STOP_SIGNALS}
    child: subprocess.Popen[bytes] | None = None
    server: subprocess.Popen[bytes] | None = None
    try:
        guess = None if os.environ.get("PREFECT_API_URL") else _free_url()
        server = start_server(guess) if guess else None
        child = subprocess.Popen(with_parent_death(command, signal.SIGINT), env={**os.environ, CHILD_ENV: "1"},
                                 stdin=subprocess.PIPE, start_new_session=True)
        named, allowed = configured_api()
        url = named or (guess if allowed else None)
        if server is not None and url != guess:  # the settings name a server after all, or forbid ours
            stop_processes([server.pid], SERVER_GRACE_S)
            server = None
        assert child.stdin is not None
        with contextlib.suppress(OSError):  # (a child that already exited reads nothing)
            child.stdin.write(f"{url or ''}\n".encode())
            child.stdin.close()
        return _wait(child, _Watch(url, server), stops, run_dir)
    finally:
        if child is not None:  # nothing is left of the child's tree: its descendants, and its session's group
            stop_processes(process_tree(child.pid), grace=0.0)
            child.wait()
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(child.pid, signal.SIGKILL)
        if server is not None:
            stop_processes([server.pid], SERVER_GRACE_S)
            server.wait()
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _wait(child: subprocess.Popen[bytes], watch: _Watch, stops: list[int], run_dir: Path) -> int:
    """Until the child exits: forward the first stop, kill the child's tree GRACE_S later, end on a lost API."""
    kill_at: float | None = None
    while child.poll() is None:
        if stops and kill_at is None:
            os.kill(child.pid, signal.SIGINT)
            kill_at = time.monotonic() + GRACE_S
        if kill_at is not None and time.monotonic() >= kill_at:
            break
        if kill_at is None and (why := watch.lost()) is not None:
            print(f"error: lost the Prefect API: {why}; {kept(run_dir)}", file=sys.stderr)
            return 2
        watch.warm_up()
        time.sleep(TICK_S)
    if stops:
        newline = "\n" if sys.stderr.isatty() else ""
        print(f"{newline}interrupted ({_name(stops[0])}); {kept(run_dir)}", file=sys.stderr)
        return 128 + stops[0]
    return child.returncode if child.returncode >= 0 else 128 - child.returncode


__all__ = ["CHILD_ENV", "GRACE_S", "STOP_SIGNALS", "configured_api", "health", "kept", "read_api_url",
           "start_server", "supervise", "wait_for_api", "with_parent_death"]

"""The sweep's temporary Prefect API server: started held first thing, released or discarded once Prefect's
settings are known, in its own session so that a stop signal to the sweep's process group does not reach it.

Why the sweep starts the server itself, and not Prefect, is in ``spica_cli/signals.py``'s docstring: a server in
the sweep's process group dies with a Ctrl-C, and every API call after that hangs in Prefect's retries.
"""
from __future__ import annotations

import atexit
import contextlib
import importlib.util
import os
import random
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from spica_cli.prefect_private import SERVER_APP, SERVER_ENV, SERVER_PORTS, running_temporary_server

TICK_S = 0.25          # how often the watchers look at the API server process

# The child side of the server's command: die with the sweep (PR_SET_PDEATHSIG = 1; Linux), and not start
# at all if the sweep already died between fork and prctl. Held (SPICA_SERVER_HOLD): first import uvicorn and
# Prefect's server, most of its start-up and free of side effects, then wait for one line on stdin: "go"
# serves, anything else (EOF: the sweep ended, or it needs no temporary server) exits. Then exactly
# `python -m uvicorn ARGS`.
_SERVER_BOOT = """\
import ctypes, os, signal, sys
try:
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)
except Exception:
    pass
if str(os.getppid()) != os.environ.pop("SPICA_SWEEP_PID", str(os.getppid())):
    sys.exit(0)
if os.environ.pop("SPICA_SERVER_HOLD", ""):
    import uvicorn.main, prefect.server.api.server
    if sys.stdin.readline().strip() != "go":
        sys.exit(0)
sys.argv[0] = "uvicorn"
from uvicorn.main import main
main()
"""
_PORT_IN_USE = 3             # uvicorn's exit code when it cannot bind


def _free_port() -> int:
    """A free local port from Prefect's range, chosen as Prefect chooses it (random, bind-tested)."""
    for _ in range(10):
        port = random.choice(SERVER_PORTS)
        with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as sock:
            try:
                sock.bind(("127.0.0.1", port))
                return port
            except OSError:
                time.sleep(random.uniform(0.1, 0.5))
    raise RuntimeError("no free port for the temporary Prefect API server")


def _site_packages() -> str:
    """Where ``prefect`` is installed (uvicorn's --app-dir), without importing it."""
    module = sys.modules.get("prefect")
    if module is not None:
        return str(module.__module_path__.parent)
    spec = importlib.util.find_spec("prefect")
    if spec is None or spec.origin is None:
        raise RuntimeError("prefect is not installed")
    return str(Path(spec.origin).parent.parent)


class TempServer:
    """Prefect's temporary API server, started by the sweep: Prefect 3.9.1's command and environment (server.py,
    ``SubprocessASGIServer``) in its own session, so that signals to the sweep's process group do not reach it,
    with a parent-death signal. Started *held* (:func:`prestart_api`) it imports while the sweep checks its
    inputs, and serves once :meth:`release`\\ d; it is stopped at exit, after the flow has reported its end
    and Prefect's log and event workers have drained (atexit, registered before Prefect's own callbacks)."""

    def __init__(self, hold: bool):
        self.port = _free_port()
        self.held = hold
        self.proc = self._popen(hold)
        self._ready = threading.Event()
        self._failure: str | None = None
        atexit.register(self.stop)

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/api"

    def _popen(self, hold: bool) -> subprocess.Popen[Any]:
        server_env = dict(SERVER_ENV)
        settings_env: dict[str, str] = {}
        if "prefect.settings" in sys.modules:  # (Prefect passes its settings on; a held start precedes them)
            from prefect.settings import get_current_settings

            settings_env = get_current_settings().to_environment_variables(exclude_unset=True)
            settings_env.pop("PREFECT_API_URL", None)
        env = {**os.environ, **server_env, **settings_env, "SPICA_SWEEP_PID": str(os.getpid())}
        if hold:
            env["SPICA_SERVER_HOLD"] = "1"
        return subprocess.Popen(
            args=[sys.executable, "-c", _SERVER_BOOT, "--app-dir", _site_packages(),
                  "--factory", SERVER_APP, "--host", "127.0.0.1",
                  "--port", str(self.port), "--log-level", "error", "--lifespan", "on"],
            env=env, stdin=subprocess.PIPE if hold else None, start_new_session=True,
        )

    def alive(self) -> bool:
        return self.proc.poll() is None

    def release(self, timeout: float) -> None:
        """Serve now (a held server stops waiting), and come up in the background: :meth:`wait_ready`."""
        if self.held:
            self.held = False
            assert self.proc.stdin is not None
            with contextlib.suppress(OSError):
                self.proc.stdin.write(b"go\n")
                self.proc.stdin.close()
        threading.Thread(target=self._come_up, args=(timeout,), name="spica-api-start", daemon=True).start()

    def _come_up(self, timeout: float) -> None:
        """Until /health answers (a new port when uvicorn found this one taken, as Prefect does), then the first
        API call, which is slow (the server's lazy set-up): here, not in the flow's start."""
        import httpx

        end = time.monotonic() + timeout
        try:
            with httpx.Client() as client:
                while True:
                    code = self.proc.poll()
                    if code == _PORT_IN_USE:
                        self.port = _free_port()
                        self.proc = self._popen(hold=False)
                        continue
                    if code is not None:
                        self._failure = f"its process exited with code {code}"
                        return
                    if time.monotonic() >= end:
                        self._failure = f"it did not answer within {timeout:g} s"
                        return
                    try:
                        if client.get(f"{self.api_url}/health").status_code == 200:
                            break
                    except httpx.TransportError:
                        pass
                    time.sleep(0.1)
                with contextlib.suppress(httpx.HTTPError):
                    client.get(f"{self.api_url}/admin/version")
        except Exception as exc:  # noqa: BLE001 - reported by wait_ready, in the main thread
            self._failure = f"{type(exc).__name__}: {exc}"
        finally:
            self._ready.set()

    def wait_ready(self) -> None:
        """Once it answers (in slices, so that the main thread's signal handlers run meanwhile)."""
        while not self._ready.wait(TICK_S):
            pass
        if self._failure is not None:
            from spica_core.errors import SpicaError

            raise SpicaError(f"the temporary Prefect API server did not start: {self._failure} (raise "
                             "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS on a slow machine, or set "
                             "PREFECT_API_URL to a running server)")

    def stop(self) -> None:
        """As Prefect stops its server: SIGTERM, SIGKILL after 5 s (idempotent; a held one just exits)."""
        proc = self.proc
        if proc.stdin is not None:
            with contextlib.suppress(OSError):
                proc.stdin.close()
        if proc.poll() is None:
            with contextlib.suppress(OSError):
                proc.terminate()
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


_HELD: TempServer | None = None   # started by prestart_api, not yet released or discarded
_OWN: TempServer | None = None    # the server this process's Prefect settings point at (reused by a later sweep)


def env_disables_ephemeral() -> bool:
    value = os.environ.get("PREFECT_SERVER_EPHEMERAL_ENABLED", os.environ.get("PREFECT_SERVER_ALLOW_EPHEMERAL_MODE"))
    return value is not None and value.strip().lower() in ("0", "false", "no", "off")


def prestart_api() -> None:
    """First thing in ``spica sweep``: start the temporary server's process, held, so that it imports (most of
    its start-up, on another core) while the sweep reads its config and imports Prefect. Skipped when the
    environment names an API (PREFECT_API_URL) or forbids the temporary server, when one runs already, and off
    the main thread. :meth:`_Guard.start_api` releases or discards it once Prefect's settings are known."""
    global _HELD
    if (_HELD is not None or (_OWN is not None and _OWN.alive()) or os.environ.get("PREFECT_API_URL")
            or env_disables_ephemeral() or threading.current_thread() is not threading.main_thread()
            or running_temporary_server() is not None):
        return
    try:
        _HELD = TempServer(hold=True)
    except (OSError, RuntimeError):
        _HELD = None  # the ordinary start (start_api) reports what is wrong


def discard_held() -> None:
    """A held server that no sweep released (the sweep failed before): it exits on EOF."""
    global _HELD
    held, _HELD = _HELD, None
    if held is not None:
        held.stop()


def use_api_url(url: str) -> None:
    """Point this process's Prefect settings at ``url`` for the rest of its life, every thread included: the
    process-wide settings context that ``SettingsContext.get()`` falls back to (as Prefect's test harness does).
    Nothing is exported to the environment, so child processes do not inherit it."""
    import prefect.context
    from prefect.settings import PREFECT_API_URL

    root = prefect.context.GLOBAL_SETTINGS_CONTEXT
    prefect.context.GLOBAL_SETTINGS_CONTEXT = prefect.context.SettingsContext(
        profile=root.profile, settings=root.settings.copy_with_update(updates={PREFECT_API_URL: url}))


def take_held() -> TempServer | None:
    """The held server, now the caller's to release or stop (None when none was started)."""
    global _HELD
    held, _HELD = _HELD, None
    return held


def own_server() -> TempServer | None:
    """The server this process's Prefect settings point at (an earlier sweep in this process started it)."""
    return _OWN


def adopt(server: TempServer) -> None:
    """Point this process's Prefect settings at ``server`` for the rest of its life (once per server)."""
    global _OWN
    if _OWN is not server:
        use_api_url(server.api_url)
        _OWN = server


__all__ = ["TICK_S", "TempServer", "adopt", "discard_held", "env_disables_ephemeral", "own_server", "prestart_api",
           "take_held", "use_api_url"]

"""The sweep's temporary Prefect API server (spica_cli/api_server.py): started held, released or discarded, and the
process's Prefect settings pointed at it. A real sweep through it: test_stop.py, test_cli.py (slow)."""
from __future__ import annotations

import os
import socket
import threading

import pytest

from spica_cli import api_server


def test_a_held_server_that_is_not_released_exits_on_eof_without_serving() -> None:
    server = api_server.TempServer(hold=True)
    try:
        assert server.held and server.alive()
        assert server.proc.stdin is not None
        server.proc.stdin.close()       # what the sweep's exit does to a held server it never released
        assert server.proc.wait(120) == 0
        with socket.socket() as sock:   # it never listened
            assert sock.connect_ex(("127.0.0.1", server.port)) != 0
    finally:
        server.stop()


def test_no_held_server_when_the_environment_names_an_api(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(api_server, "_HELD", None)
    monkeypatch.setattr(api_server, "_OWN", None)
    monkeypatch.setattr(api_server, "running_temporary_server", lambda: None)
    for name in ("PREFECT_API_URL", "PREFECT_SERVER_ALLOW_EPHEMERAL_MODE", "PREFECT_SERVER_EPHEMERAL_ENABLED"):
        monkeypatch.delenv(name, raising=False)
    for name, value in (("PREFECT_API_URL", "http://127.0.0.1:9/api"),
                        ("PREFECT_SERVER_ALLOW_EPHEMERAL_MODE", "false")):
        with monkeypatch.context() as env:
            env.setenv(name, value)
            api_server.prestart_api()
            assert api_server._HELD is None
    api_server.prestart_api()          # the same call with neither variable: a held server is started ...
    held = api_server._HELD
    try:
        assert held is not None and held.held and held.alive()
    finally:
        api_server.discard_held()      # ... and discarding it stops it
    assert api_server._HELD is None and held.proc.wait(120) is not None


def test_the_api_url_reaches_every_thread_but_not_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    import prefect.context
    from prefect.settings import PREFECT_API_URL

    monkeypatch.setattr(prefect.context, "GLOBAL_SETTINGS_CONTEXT", prefect.context.GLOBAL_SETTINGS_CONTEXT)
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    url = "http://127.0.0.1:8999/api"
    api_server.use_api_url(url)
    seen: list[str | None] = []
    thread = threading.Thread(target=lambda: seen.append(PREFECT_API_URL.value()))
    thread.start()
    thread.join()
    assert PREFECT_API_URL.value() == url and seen == [url]
    assert "PREFECT_API_URL" not in os.environ  # spawned workers and test subprocesses do not inherit it

"""The private Prefect name Spica uses, and what it copies from Prefect, in one module (tested with prefect 3.9.1,
pinned in pyproject).

Prefect keeps the temporary API server it started in ``SubprocessASGIServer._instances`` and has no public
way to ask whether one runs. The sweep asks so that it never starts a second server beside Prefect's own
(a test, or a flow run started from Python, may have started it). The sweep also starts that server itself
(``spica_cli/api_server.py`` says why) with Prefect's own command: its port range, its environment and its
uvicorn arguments, copied here from ``SubprocessASGIServer``. :func:`missing` says, with the pinned version,
when that name is gone or when the installed Prefect starts its server differently from the copy.
"""
from __future__ import annotations

import sys
from typing import Any

PINNED = "prefect 3.9.1"

# Copied from SubprocessASGIServer (prefect/server/api/server.py): the ports it picks from, the environment
# it gives the server, and the application uvicorn serves (with ``--factory``, ``--app-dir``, ``--lifespan``).
SERVER_PORTS = range(8000, 9000)
SERVER_ENV = {"PREFECT_UI_ENABLED": "0", "PREFECT__SERVER_EPHEMERAL": "1", "PREFECT__SERVER_FINAL": "1"}
SERVER_APP = "prefect.server.api.server:create_app"
_COPIED = ("range(8000, 9000)", *SERVER_ENV, SERVER_APP, "--factory", "--app-dir", "--lifespan")


def running_temporary_server() -> Any | None:
    """Prefect's own running temporary server, if something in this process started one (never imports it)."""
    module = sys.modules.get("prefect.server.api.server")
    server = module.SubprocessASGIServer._instances.get(None) if module is not None else None
    return server if server is not None and server.running else None


def missing() -> list[str]:
    """The private names above that the installed Prefect lacks, and the copied facts its server no longer has."""
    import inspect

    from prefect.server.api.server import SubprocessASGIServer

    out = []
    if not isinstance(getattr(SubprocessASGIServer, "_instances", None), dict):
        out.append("SubprocessASGIServer._instances is gone from the installed Prefect "
                   f"(Spica is tested with {PINNED})")
    source = inspect.getsource(SubprocessASGIServer)
    out += [f"SubprocessASGIServer no longer uses {fact!r}, which spica_cli/api_server.py copies (Spica is tested "
            f"with {PINNED})" for fact in _COPIED if fact not in source]
    return out


__all__ = ["PINNED", "SERVER_APP", "SERVER_ENV", "SERVER_PORTS", "missing", "running_temporary_server"]

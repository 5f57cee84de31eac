"""The one private Prefect name Spica uses, in one module (tested with prefect 3.9.1, pinned in pyproject).

Prefect keeps the temporary API server it started in ``SubprocessASGIServer._instances`` and has no public
way to ask whether one runs. The sweep asks so that it never starts a second server beside Prefect's own
(a test, or a flow run started from Python, may have started it). :func:`missing` says, with the pinned
version, when that name is gone.
"""
from __future__ import annotations

import sys
from typing import Any

PINNED = "prefect 3.9.1"


def running_temporary_server() -> Any | None:
    """Prefect's own running temporary server, if something in this process started one (never imports it)."""
    module = sys.modules.get("prefect.server.api.server")
    server = module.SubprocessASGIServer._instances.get(None) if module is not None else None
    return server if server is not None and server.running else None


def missing() -> list[str]:
    """The private names above that the installed Prefect lacks."""
    from prefect.server.api.server import SubprocessASGIServer

    if not isinstance(getattr(SubprocessASGIServer, "_instances", None), dict):
        return [f"SubprocessASGIServer._instances is gone from the installed Prefect (Spica is tested with {PINNED})"]
    return []


__all__ = ["PINNED", "missing", "running_temporary_server"]

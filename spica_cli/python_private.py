"""The one private name of Python's standard library Spica uses (tested with CPython 3.11).

``threading._register_atexit`` runs a function at interpreter shutdown before ``threading`` joins the
non-daemon threads (Prefect's log and event workers drain there), which ``atexit`` cannot: its callbacks run
after that join. Python has no public hook for that moment. :func:`missing` says when the running Python
lacks it, and a test runs it; without it a stop during shutdown only waits for the drain.
"""
from __future__ import annotations

import contextlib
import threading
from typing import Callable

PINNED = "CPython 3.11"


def before_thread_join(fn: Callable[[], None]) -> bool:
    """Run ``fn`` at shutdown before threading joins the non-daemon threads; False when that is not possible
    (no hook in this Python, or the interpreter is already shutting down)."""
    register = getattr(threading, "_register_atexit", None)
    if register is None:
        return False
    with contextlib.suppress(RuntimeError):
        register(fn)
        return True
    return False


def missing() -> list[str]:
    """The private name above, when the running Python lacks it, with the version Spica is tested with."""
    if callable(getattr(threading, "_register_atexit", None)):
        return []
    return [f"threading._register_atexit is gone from the running Python (Spica is tested with {PINNED})"]


__all__ = ["PINNED", "before_thread_join", "missing"]

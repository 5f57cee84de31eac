"""Child processes the sweep stops itself (replay workers, the optimizer process): they ignore SIGINT from birth.

A Ctrl-C reaches the whole process group, and a traceback per child helps nobody; the parent decides how its
children stop (``spica_cli/signals.py``).
"""
from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def sigint_blocked() -> Iterator[None]:
    """Block SIGINT in this thread while a child is forked: the child inherits the mask across exec, so it
    ignores Ctrl-C before its first line of Python runs. A SIGINT meanwhile stays pending for the parent
    (delivered when the mask is restored), unlike a temporary SIG_IGN, which would lose it."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def start_child(process: Any) -> None:
    """Start a multiprocessing process that ignores SIGINT from birth (its target then sets SIG_IGN for good)."""
    # The first spawn starts multiprocessing's resource tracker, which unblocks SIGINT in this thread on the
    # way: start it before blocking.
    from multiprocessing import resource_tracker

    resource_tracker.ensure_running()
    with sigint_blocked():
        process.start()


__all__ = ["sigint_blocked", "start_child"]

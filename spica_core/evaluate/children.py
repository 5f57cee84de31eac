"""Child processes and how they stop: the sweep's own children ignore SIGINT from birth, and one bounded stop
(SIGTERM, a grace, SIGKILL) serves every process the sweep ends (workers, the flow's process, the API server).

A Ctrl-C reaches a whole process group, and a traceback per child helps nobody: the parent decides how its
children stop (``spica_cli/supervisor.py``, ``pool.py``).
"""
from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from typing import Any, Iterable

import psutil


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


def process_tree(pid: int) -> list[int]:
    """``pid`` and its descendants, deepest last (empty when it is gone)."""
    try:
        root = psutil.Process(pid)
        return [pid, *(p.pid for p in root.children(recursive=True))]
    except psutil.Error:
        return []


def stop_processes(pids: Iterable[int], grace: float) -> None:
    """Stop processes in bounded time: SIGTERM, then SIGKILL to those alive after ``grace`` s (at once when it is
    0), and wait for them (reaping this process's own children). Processes already gone are skipped."""
    procs: list[psutil.Process] = []
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            procs.append(psutil.Process(pid))
    if grace > 0:
        for p in procs:
            with contextlib.suppress(psutil.Error):
                p.terminate()
        _, procs = psutil.wait_procs(procs, timeout=grace)
    for p in procs:
        with contextlib.suppress(psutil.Error):
            p.kill()
    psutil.wait_procs(procs, timeout=max(grace, 1.0))


__all__ = ["process_tree", "sigint_blocked", "start_child", "stop_processes"]

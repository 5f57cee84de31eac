"""Recoveries the user is told about: an artifact set aside and its stage computed again.

The catalog (``spica_core.run.catalog``) only records a :class:`SetAside` notice and calls the run
folder's ``on_set_aside`` callback; the sweep's folder is opened with :func:`report_set_aside` (see
``tasks/validate.py``), which puts the notice in the run's Prefect log (a warning of the task run that
read the artifact, so it is in the flow run's log) and hands it to every :func:`listening` callback:
``spica sweep`` prints it on stderr.
"""
from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Callable, Iterator

from prefect.exceptions import MissingContextError
from prefect.logging import get_run_logger

from spica_core.run.catalog import SetAside

Listener = Callable[[SetAside], None]

_listeners: list[Listener] = []
_lock = threading.Lock()


def report_set_aside(notice: SetAside) -> None:
    """The run folder's ``on_set_aside``: the run's log, then the listeners (stage threads call it too)."""
    try:
        logger = get_run_logger()
    except MissingContextError:
        logger = None  # a stage called outside a flow run (tests): the catalog's own log line is the record
    if logger is not None:
        logger.warning(notice.message)
    with _lock:
        listeners = tuple(_listeners)
    for listener in listeners:
        listener(notice)


@contextmanager
def listening(listener: Listener) -> Iterator[None]:
    """Call ``listener`` with every notice reported in this process while the block runs."""
    with _lock:
        _listeners.append(listener)
    try:
        yield
    finally:
        with _lock:
            _listeners.remove(listener)


__all__ = ["Listener", "report_set_aside", "listening"]

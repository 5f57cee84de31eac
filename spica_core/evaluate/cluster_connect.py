"""Connecting to a Dask or Ray cluster, what both backends share: the accepted address forms, a check that
something answers there within seconds, the engine's client library (or what to install), and the timeouts.

:func:`check_reachable` needs neither engine's client: ``spica sweep`` fails on a bad address before it starts
anything. The evaluator itself is :mod:`spica_core.evaluate.cluster`.
"""
from __future__ import annotations

import importlib
import socket
from typing import Any

from spica_core.config.sweep import CLUSTER_FORMS, parse_cluster_address
from spica_core.errors import ClusterError

OPTION = "sweep.cluster (--cluster)"
FORMS = f"{CLUSTER_FORMS} (a Ray head's client server listens on port 10001 by default)"
CONNECT_TIMEOUT_S = 5.0   # an unreachable address fails within about this long
START_TIMEOUT_S = 120.0   # a worker that takes longer to import the engines is not used


def _parse(address: str) -> tuple[str, str, int]:
    """(scheme, host, port) of a cluster address, or a ClusterError naming the option and the allowed forms."""
    try:
        return parse_cluster_address(address)
    except ValueError:
        raise ClusterError(f"{OPTION}: {str(address).strip()!r} is not a cluster address; expected {FORMS}") from None


def _reachable(kind: str, address: str, host: str, port: int, greets: bool = False) -> None:
    """A TCP connection within CONNECT_TIMEOUT_S (and, ``greets``, the first bytes the server sends unasked:
    a Dask scheduler's handshake, which ``distributed`` itself waits for without a timeout)."""
    try:
        with socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S) as sock:
            if greets and not sock.recv(1):
                raise OSError("the connection was closed at once")
    except TimeoutError:
        raise ClusterError(f"{address} accepts connections but does not answer like a {kind} within "
                         f"{CONNECT_TIMEOUT_S:g}s; fix {OPTION}") from None
    except OSError as exc:
        raise ClusterError(f"cannot reach the {kind} at {address} ({exc}); start it (see docs/clusters.md) "
                         f"or fix {OPTION}") from None


def _engine(module: str, address: str, name: str, install: str) -> Any:
    """The engine's client library, or a ClusterError saying how to install it."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise ClusterError(f"{OPTION}: {address} is a {name} address, but {name} is not installed: {install}") from None


def check_reachable(address: str) -> None:
    """Within seconds and without the engines' clients: a ClusterError when ``address`` has another form or
    nothing answers there (so that ``spica sweep`` fails before it starts anything)."""
    scheme, host, port = _parse(address)
    if scheme == "tcp":
        _reachable("Dask scheduler", address, host, port, greets=True)
    else:
        _reachable("Ray client server", address, host, port)


__all__ = ["check_reachable"]

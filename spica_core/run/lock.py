"""One sweep per run folder: an exclusive lock held for the life of the process that sweeps it.

The lock is ``flock`` on ``<run dir>/.lock``, so the kernel releases it when its holder dies: a
lock left by a killed sweep is simply taken over, and the file only says who holds it now (pid,
host, start time) so that a second sweep can name the process it is waiting for.
"""
from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from pathlib import Path
from typing import IO

from spica_core.errors import RunDirError

LOCK_FILE = ".lock"
_HELD: dict[Path, IO[str]] = {}   # folder → the open lock file of this process


def check_folder(path: Path, option: str = "--run-dir") -> None:
    """A run folder must be a folder (created when missing)."""
    if path.exists() and not path.is_dir():
        raise RunDirError(f"{option} {path}: is an existing file, not a folder; give a folder (created if missing)")


def acquire(folder: str | Path, pid: int | None = None) -> Path:
    """Lock ``folder`` for this process (again is a no-op); raises RunDirError naming the holder if taken.

    ``pid`` is the process the file names as the holder, when not this one: a sweep's flow process names the
    ``spica sweep`` command that supervises it, the process a user started and would stop."""
    path = Path(folder).resolve()
    if path in _HELD:
        return path
    check_folder(path)
    path.mkdir(parents=True, exist_ok=True)
    handle = open(path / LOCK_FILE, "a+", encoding="utf-8")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = _describe(handle.read())
        handle.close()
        raise RunDirError(f"{path} is in use by {holder}; wait for that sweep to finish, stop it, or choose "
                          "another --run-dir") from None
    handle.seek(0)
    handle.truncate()
    handle.write(json.dumps({"pid": pid or os.getpid(), "host": socket.gethostname(),
                             "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}))
    handle.flush()
    _HELD[path] = handle
    return path


def release(folder: str | Path) -> None:
    """Give the folder back (the file stays; only the lock on it matters)."""
    handle = _HELD.pop(Path(folder).resolve(), None)
    if handle is not None:
        fcntl.flock(handle, fcntl.LOCK_UN)
        handle.close()


def _describe(text: str) -> str:
    try:
        info = json.loads(text)
        return f"process {info['pid']} on {info['host']} (since {info['started']})"
    except (ValueError, KeyError, TypeError):
        return "another process"


__all__ = ["acquire", "release", "check_folder", "LOCK_FILE"]

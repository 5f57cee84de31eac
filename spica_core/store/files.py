"""Atomic files: a reader (another worker, a resumed run) sees the old file or the new one, never half of one."""
from __future__ import annotations

import os
import threading
from pathlib import Path


def write_file(path: Path, data: bytes | str) -> Path:
    """Written beside the target and renamed over it (JSON, CSV, YAML, a report, a cached estimate)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        tmp.write_bytes(data.encode() if isinstance(data, str) else data)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


__all__ = ["write_file"]

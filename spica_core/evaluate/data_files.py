"""The accuracy data files that ship with Spica (``data/bands.json``, ``data/serving.json``), read one way: JSON
with a schema number and one table, and an error that names the file, what is wrong and how to fix it."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from spica_core.errors import BandFileError


def read_data_file(path: str, kind: str, schema: int, table: str, fix: str) -> dict[str, Any]:
    """A shipped accuracy file (``kind``: band, serving) as JSON with its ``schema`` and a ``table`` mapping;
    BandFileError names the file, what is wrong, and ``fix``."""
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BandFileError(f"{kind} file {path} is missing; {fix}") from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise BandFileError(f"{kind} file {path} is unreadable ({type(exc).__name__}: {exc}); {fix}") from None
    if not isinstance(doc, dict) or doc.get("schema") != schema or not isinstance(doc.get(table), dict):
        raise BandFileError(f"{kind} file {path} is not a schema-{schema} {kind} file (it needs 'schema': "
                            f"{schema} and a '{table}' mapping); {fix}")
    return doc


__all__ = ["read_data_file"]

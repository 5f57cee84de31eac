"""Engine flags as text: one reader for ``--x v`` and ``--x=v``, and one spelling of numbers and JSON values."""
from __future__ import annotations

import json
from typing import Any


def flag_value(args: list[str], *names: str) -> str | None:
    """The value of the last occurrence of any of ``names`` (``--x v`` or ``--x=v``)."""
    found = None
    for i, arg in enumerate(args):
        for name in names:
            if arg == name and i + 1 < len(args):
                found = args[i + 1]
            elif arg.startswith(name + "="):
                found = arg[len(name) + 1:]
    return found


def int_flag(args: list[str], *names: str, default: int = 1) -> int | None:
    """An integer flag (``default`` when absent, None when it is not an integer)."""
    value = flag_value(args, *names)
    if value is None:
        return default
    try:
        return int(value)
    except ValueError:
        return None


def json_flag(args: list[str], name: str) -> dict[str, Any] | None:
    """A flag whose value is a JSON object (None when absent or not an object)."""
    raw = flag_value(args, name)
    if raw is None:
        return None
    try:
        parsed = json.loads(raw)
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict) else None


def int_or_none(value: Any) -> int | None:
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def num_arg(value: float | int) -> str:
    """A number as an argument string: ints plain, floats in Python's shortest form (4.0, 0.9)."""
    return str(int(value)) if isinstance(value, int) and not isinstance(value, bool) else repr(float(value))


def json_arg(value: Any) -> str:
    """A JSON argument, compact."""
    return json.dumps(value, separators=(",", ":"))


__all__ = ["flag_value", "int_flag", "int_or_none", "json_arg", "json_flag", "num_arg"]

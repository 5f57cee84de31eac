"""Pydantic's validation errors as :class:`Issue` records: YAML path, offending value, what is allowed.

Pydantic's own locations carry union tags and validator names that are not YAML keys, and its
messages do not list the allowed keys; a user needs both to fix a config.
"""
from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ValidationError

from spica_core.config.model import (
    OptimizationGoal,
    ParallelShape,
    SearchSpace,
    SLATarget,
    SmartSearchConfig,
    SweepConfig,
    Workload,
)
from spica_core.errors import FieldError, Issue

# Location parts that pydantic adds for unions and validators: never YAML keys.
_UNION_TAGS = ("agg", "disagg")
_VALIDATOR_PARTS = ("str", "dict[str,any]", "function-before[check()]", "function-after[check()]")

_MODELS_AT: dict[str, type[BaseModel]] = {
    "": SmartSearchConfig, "search_space": SearchSpace, "workload": Workload, "goal": OptimizationGoal,
    "sweep": SweepConfig, "goal.sla": SLATarget,
}
_PARALLEL_ENTRY = re.compile(r"search_space\.parallel_configs\[\d+\]")
_PARALLEL_ROLE = re.compile(r"search_space\.parallel_configs\[\d+\]\.(prefill|decode)")


def _format_loc(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in _UNION_TAGS and out.endswith("]"):
            continue
        elif part in _VALIDATOR_PARTS:
            continue
        else:
            out += f".{part}" if out else str(part)
    return out


def _allowed_keys(parent: str) -> list[str] | None:
    """The keys the mapping at ``parent`` accepts (None when it is not a known mapping)."""
    if parent in _MODELS_AT:
        return list(_MODELS_AT[parent].model_fields)
    if _PARALLEL_ROLE.fullmatch(parent):
        return list(ParallelShape.model_fields)
    if _PARALLEL_ENTRY.fullmatch(parent):
        return list(ParallelShape.model_fields) + ["(disagg: prefill, decode)"]
    return None


def _lookup(data: Any, loc: tuple[Any, ...]) -> tuple[bool, Any]:
    """(found, value) of the raw input at a pydantic location: what the user wrote, not a default."""
    cur = data
    for part in loc:
        if isinstance(cur, dict) and part in cur:
            cur = cur[part]
        elif isinstance(cur, list) and isinstance(part, int) and part < len(cur):
            cur = cur[part]
        elif part in _UNION_TAGS:
            continue
        else:
            return False, None
    return True, cur


def issues_from(exc: ValidationError, data: Any) -> list[Issue]:
    """Turn pydantic errors into YAML-path issues with value and allowed values."""
    issues: list[Issue] = []
    for err in exc.errors():
        loc = tuple(err["loc"])
        path = _format_loc(loc)
        ctx_error = (err.get("ctx") or {}).get("error")
        if isinstance(ctx_error, FieldError):
            sub = ctx_error.rel_path
            full = ".".join(p for p in (path, sub) if p).replace(".[", "[")
            issues.append(Issue(full, ctx_error.message, ctx_error.value, ctx_error.has_value))
            continue
        msg = err["msg"]
        if msg.startswith("Value error, "):
            msg = msg[len("Value error, "):]
        if err["type"] == "extra_forbidden":
            allowed = _allowed_keys(_format_loc(loc[:-1]))
            msg = "unknown key" + (f"; allowed keys: {allowed}" if allowed else "")
            issues.append(Issue(path, msg))
            continue
        if err["type"] == "missing":
            issues.append(Issue(path, "is required"))
            continue
        found, value = _lookup(data, loc)
        issues.append(Issue(path, msg, value, found))
    # union branches can report the same problem twice (values may be unhashable: compare, don't hash)
    return [issue for i, issue in enumerate(issues) if issue not in issues[:i]]


__all__ = ["issues_from"]

"""Pydantic's validation errors as :class:`Issue` records: YAML path, offending value, what is allowed.

Pydantic's own locations carry union tags and validator names that are not YAML keys, and its
messages do not list the allowed keys; a user needs both to fix a config.
"""
from __future__ import annotations

from typing import Any, get_args

from pydantic import BaseModel, Tag, ValidationError

from spica_core.errors import FieldError, Issue

# Location parts that pydantic adds for unions and validators: never YAML keys.
_UNION_TAGS = ("agg", "disagg")
_VALIDATOR_PARTS = ("str", "dict[str,any]", "function-before[check()]", "function-after[check()]")


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


def _models_in(annotation: Any, tag: str | None = None) -> list[tuple[type[BaseModel], str | None]]:
    """The pydantic models a field can hold, through Optional, unions, lists and dicts, each with its union tag."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [(annotation, tag)]
    args = get_args(annotation)
    tag = next((a.tag for a in args if isinstance(a, Tag)), tag)
    return [found for arg in args for found in _models_in(arg, tag)]


def _allowed_keys(root: type[BaseModel], loc: tuple[Any, ...]) -> list[str] | None:
    """The keys the mapping at pydantic location ``loc`` accepts, found by walking the root model's fields
    (None when ``loc`` is not a model). In a tagged union the location names the member; the other
    members' keys follow as a hint, e.g. ``(disagg: prefill, decode)`` for a parallel_configs entry."""
    models: list[tuple[type[BaseModel], str | None]] = [(root, None)]
    for part in loc:
        if isinstance(part, int) or part in _VALIDATOR_PARTS:
            continue
        if any(tag == part for _, tag in models):
            models = [m for m in models if m[1] == part] + [m for m in models if m[1] != part]
            continue
        fields = models[0][0].model_fields
        if part not in fields:
            return None
        models = _models_in(fields[part].annotation)
        if not models:
            return None
    keys = list(models[0][0].model_fields)
    return keys + [f"({tag}: {', '.join(model.model_fields)})" for model, tag in models[1:] if tag]


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


def issues_from(exc: ValidationError, data: Any, root: type[BaseModel]) -> list[Issue]:
    """Turn pydantic errors of validating ``data`` as ``root`` into YAML-path issues with value and allowed values."""
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
            allowed = _allowed_keys(root, loc[:-1])
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

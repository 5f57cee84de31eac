"""The CRD's own CEL rules (``x-kubernetes-validations``), evaluated offline as the apiserver would.

JSON Schema ignores ``x-kubernetes-validations``, so the rule strings are read from the shipped CRD and
evaluated with ``cel-python`` (``celpy``), each against every node its schema node matches, after the
schema's defaults are applied (the apiserver defaults before it validates). The Kubernetes CEL library
adds functions plain CEL lacks; the ones the CRD uses are supplied here (``lowerAscii``, ``split``, and
``hasValue`` of an optional ``oldSelf``). A transition rule (one that reads ``oldSelf``) runs on create
only when it sets ``optionalOldSelf``, with ``oldSelf`` absent; the others are update-only and are left out,
as the apiserver leaves them out on create. A rule that cannot be evaluated offline (a function this
module lacks, a type error) is reported as a problem naming the rule, never skipped.
"""
from __future__ import annotations

import copy
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

ITEM = "[]"      # a path part: each item of a list
VALUE = "{}"     # a path part: each value of a map (additionalProperties)


@dataclass(frozen=True)
class CrdRule:
    """One ``x-kubernetes-validations`` entry of the schema, where it sits and what it says."""

    path: tuple[str, ...]    # property names from the root, ITEM for list items, VALUE for map values
    rule: str                # the CEL expression, verbatim
    message: str             # the CRD's message
    optional_old_self: bool = False

    @property
    def where(self) -> str:
        """``spec.components[].eppConfig``: the schema path as the CRD documents read."""
        return "".join(p if p in (ITEM, VALUE) else (f".{p}" if i else p) for i, p in enumerate(self.path))

    @property
    def on_create(self) -> bool:
        """Transition rules (``oldSelf``) run only on update, unless ``optionalOldSelf`` lets them run on create."""
        return "oldSelf" not in self.rule or self.optional_old_self


def rules_of(schema: Mapping[str, Any]) -> tuple[CrdRule, ...]:
    """Every rule under a schema, create-time and update-only alike, in schema order."""
    return tuple(_walk(schema, ()))


def _walk(node: Any, path: tuple[str, ...]) -> Iterator[CrdRule]:
    if not isinstance(node, Mapping):
        return
    for entry in node.get("x-kubernetes-validations") or ():
        yield CrdRule(path, entry["rule"], entry.get("message", ""), bool(entry.get("optionalOldSelf")))
    for name, child in (node.get("properties") or {}).items():
        yield from _walk(child, (*path, name))
    if isinstance(node.get("items"), Mapping):
        yield from _walk(node["items"], (*path, ITEM))
    if isinstance(node.get("additionalProperties"), Mapping):
        yield from _walk(node["additionalProperties"], (*path, VALUE))
    for key in ("allOf", "anyOf", "oneOf"):
        for child in node.get(key) or ():
            yield from _walk(child, path)


def cel_problems(doc: Mapping[str, Any], schema: Mapping[str, Any]) -> list[str]:
    """One ``path: message`` per create-time rule a node of ``doc`` breaks (or that cannot be evaluated)."""
    out = []
    for rule in rules_of(schema):
        if not rule.on_create:
            continue
        program = _program(rule.rule)
        for parts, node, node_schema in _nodes(doc, schema, rule.path):
            where = readable_path(doc, parts)
            try:
                ok = program.evaluate(_activation(_defaulted(node, node_schema), rule))
            except Exception as exc:  # noqa: BLE001 - celpy raises its own errors and Python's; report, never skip
                out.append(f"{where}: the CRD rule {rule.rule!r} ({rule.message}) could not be evaluated offline "
                           f"({type(exc).__name__}: {exc})")
                continue
            if not _is_bool(ok):   # celpy returns some errors as values
                out.append(f"{where}: the CRD rule {rule.rule!r} ({rule.message}) could not be evaluated offline "
                           f"(it gave {ok!r})")
            elif not ok:
                out.append(f"{where}: {rule.message}")
    return out


def _is_bool(value: Any) -> bool:
    from celpy import celtypes

    return isinstance(value, (bool, celtypes.BoolType))


def _nodes(value: Any, schema: Any, path: tuple[str, ...],
           parts: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], Any, Mapping[str, Any]]]:
    """(the concrete path, the node, its schema node) of every node of ``value`` at a schema path. A null
    counts as absent, as the apiserver prunes nulls before it validates."""
    if value is None or not isinstance(schema, Mapping):
        return
    if not path:
        yield parts, value, schema
        return
    head, rest = path[0], path[1:]
    if head == ITEM:
        if isinstance(value, list):
            for i, item in enumerate(value):
                yield from _nodes(item, schema.get("items"), rest, (*parts, i))
    elif head == VALUE:
        if isinstance(value, Mapping):
            for key, item in value.items():
                yield from _nodes(item, schema.get("additionalProperties"), rest, (*parts, key))
    elif isinstance(value, Mapping) and head in value:
        yield from _nodes(value[head], (schema.get("properties") or {}).get(head), rest, (*parts, head))


def _defaulted(value: Any, schema: Mapping[str, Any]) -> Any:
    """``value`` with the schema's ``default`` filled in wherever a property is missing, at every depth."""
    if isinstance(value, Mapping):
        props = schema.get("properties") or {}
        out = {k: v for k, v in value.items() if v is not None}
        for name, sub in props.items():
            if name not in out and isinstance(sub, Mapping) and "default" in sub:
                out[name] = copy.deepcopy(sub["default"])
        extra = schema.get("additionalProperties")
        return {k: _defaulted(v, props.get(k) or (extra if isinstance(extra, Mapping) else {}))
                for k, v in out.items()}
    if isinstance(value, list):
        items = schema.get("items") if isinstance(schema.get("items"), Mapping) else {}
        return [_defaulted(v, items) for v in value]
    return value


def _activation(value: Any, rule: CrdRule) -> dict[str, Any]:
    import celpy

    activation = {"self": celpy.json_to_cel(value)}
    if rule.optional_old_self:
        activation["oldSelf"] = _Absent()   # a create: there is no old object
    return activation


@lru_cache(maxsize=None)
def _program(rule: str) -> Any:
    import celpy

    env = celpy.Environment()
    return env.program(env.compile(rule), functions=_kubernetes_functions())


def _kubernetes_functions() -> dict[str, Any]:
    """The Kubernetes CEL library functions the CRD uses that plain CEL lacks."""
    from celpy import celtypes

    def lower_ascii(text: Any) -> Any:
        return celtypes.StringType(str(text).lower())

    def split(text: Any, separator: Any) -> Any:
        return celtypes.ListType([celtypes.StringType(p) for p in str(text).split(str(separator))])

    def has_value(optional: Any) -> Any:
        return celtypes.BoolType(not isinstance(optional, _Absent))

    return {"lowerAscii": lower_ascii, "split": split, "hasValue": has_value}


class _Absent:
    """``optional.none()``: the old object of a create."""


def readable_path(doc: Any, parts: Iterable[Any]) -> str:
    """A readable path; list items with a ``name`` are shown by name (``containers[main]``)."""
    out, node = "", doc
    for part in parts:
        if isinstance(part, int):
            item = node[part] if isinstance(node, list) and part < len(node) else None
            name = item.get("name") if isinstance(item, Mapping) else None
            out += f"[{name}]" if isinstance(name, str) and name else f"[{part}]"
            node = item
        else:
            key = str(part)
            out += f"[{key!r}]" if ("." in key or "/" in key) else (f".{key}" if out else key)
            node = node.get(part) if isinstance(node, Mapping) else None
    return out or "<root>"


__all__ = ["CrdRule", "cel_problems", "readable_path", "rules_of", "ITEM", "VALUE"]

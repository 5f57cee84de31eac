"""The shipped DynamoGraphDeployment CRD and the checks of its schema: strict JSON Schema, list keys and sets.

Strict mode: every object node that has no ``additionalProperties`` and is not
``x-kubernetes-preserve-unknown-fields`` gets ``additionalProperties: false`` (root ``metadata``
excepted), so typos and v1alpha1 keys fail instead of being pruned by the apiserver. The list-map keys
and list sets the schema declares but JSON Schema cannot enforce are checked by walking the manifest.
"""
from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from spica_core.emit.crd_cel import readable_path


CRD_PATH = Path(__file__).with_name("data") / "nvidia.com_dynamographdeployments.yaml"


# ---------------------------------------------------------------- the CRD and its strict schema


@lru_cache(maxsize=1)
def crd() -> dict[str, Any]:
    """The shipped DynamoGraphDeployment CRD document."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    with open(CRD_PATH, encoding="utf-8") as f:
        return yaml.load(f, Loader=loader)   # a safe loader (the C one when available)


def version_schema(version: str = "v1beta1") -> dict[str, Any]:
    """The CRD's ``openAPIV3Schema`` of one version (as shipped, not strict)."""
    for entry in crd()["spec"]["versions"]:
        if entry["name"] == version:
            return entry["schema"]["openAPIV3Schema"]
    raise KeyError(f"the DynamoGraphDeployment CRD has no version {version!r}")


def strict_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """A deep copy where unknown fields are errors, as with kubectl's strict field validation."""
    out = copy.deepcopy(dict(schema))

    def close(node: Any) -> None:
        if isinstance(node, list):
            for item in node:
                close(item)
            return
        if not isinstance(node, dict):
            return
        is_object = node.get("type") == "object" or "properties" in node
        if is_object and "additionalProperties" not in node and not node.get("x-kubernetes-preserve-unknown-fields"):
            node["additionalProperties"] = False
        for key, child in node.items():
            if key in ("properties", "patternProperties"):
                for sub in child.values():
                    close(sub)
            elif key in ("items", "additionalProperties", "anyOf", "allOf", "oneOf", "not"):
                close(child)

    root_props = out.get("properties", {})
    metadata = root_props.pop("metadata", None)   # the apiserver checks metadata; the schema says only `object`
    close(out)
    if metadata is not None:
        root_props["metadata"] = metadata
    return out


@lru_cache(maxsize=1)
def _strict_v1beta1() -> dict[str, Any]:
    return strict_schema(version_schema("v1beta1"))


@lru_cache(maxsize=1)
def _validator() -> Any:
    from jsonschema import Draft202012Validator

    return Draft202012Validator(_strict_v1beta1())


# ---------------------------------------------------------------- 1. schema


def _schema_problems(doc: Mapping[str, Any]) -> list[str]:
    out = []
    errors = sorted(_validator().iter_errors(doc), key=lambda e: (list(map(str, e.absolute_path)), e.message))
    for error in errors:
        where = readable_path(doc, error.absolute_path)
        if error.validator == "additionalProperties" and error.validator_value is False:
            known = set((error.schema.get("properties") or {}))
            extra = sorted(k for k in error.instance if k not in known) if isinstance(error.instance, Mapping) else []
            if not known:
                text = f"no fields are allowed here (got {', '.join(map(repr, extra))})"
            else:
                text = (f"unknown field{'s' if len(extra) > 1 else ''} {', '.join(map(repr, extra))} "
                        f"(allowed: {', '.join(sorted(known))})")
            out.append(f"{where}: {text}")
        else:
            out.append(f"{where}: {error.message}")
    return out


# ---------------------------------------------------------------- 2. list-map keys and sets


def _list_key_problems(doc: Mapping[str, Any]) -> list[str]:
    out: list[str] = []
    _walk_lists(_strict_v1beta1(), doc, [], doc, out)
    return out


def _walk_lists(schema: Mapping[str, Any], value: Any, parts: list[Any], doc: Mapping[str, Any],
                out: list[str]) -> None:
    if isinstance(value, Mapping):
        props = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        for key, child in value.items():
            sub = props.get(key, extra if isinstance(extra, Mapping) else None)
            if isinstance(sub, Mapping):
                _walk_lists(sub, child, [*parts, key], doc, out)
    elif isinstance(value, list):
        items = schema.get("items") if isinstance(schema.get("items"), Mapping) else {}
        kind = schema.get("x-kubernetes-list-type")
        # spec.components: the CEL rule (names unique case-insensitively) reports duplicates
        if kind == "map" and parts != ["spec", "components"]:
            keys = list(schema.get("x-kubernetes-list-map-keys") or ())
            item_props = items.get("properties") or {}
            seen: dict[tuple[Any, ...], int] = {}
            for i, item in enumerate(value):
                if not isinstance(item, Mapping):
                    continue
                key = tuple(item.get(k, (item_props.get(k) or {}).get("default")) for k in keys)
                if key in seen:
                    shown = ", ".join(f"{k}={v!r}" for k, v in zip(keys, key))
                    out.append(f"{readable_path(doc, [*parts, i])}: duplicate entry ({shown}); this list is keyed by "
                               f"{', '.join(keys)} (entry {seen[key]} has the same key)")
                else:
                    seen[key] = i
        elif kind == "set":
            first: dict[str, int] = {}
            for i, item in enumerate(value):
                canon = _set_member(item)
                if canon in first:
                    out.append(f"{readable_path(doc, [*parts, i])}: duplicate value {item!r}; this list is a set, each value "
                               f"may appear once (entry {first[canon]} has the same value)")
                else:
                    first[canon] = i
        for i, item in enumerate(value):
            _walk_lists(items, item, [*parts, i], doc, out)


def _set_member(value: Any) -> str:
    """A set member's identity with ``uniqueItems`` equality: 1 and 1.0 are the same value, true and 1 are not."""

    def canonical(node: Any) -> Any:
        if isinstance(node, float) and node.is_integer():
            return int(node)
        if isinstance(node, list):
            return [canonical(v) for v in node]
        if isinstance(node, Mapping):
            return {str(k): canonical(v) for k, v in node.items()}
        return node

    return json.dumps(canonical(value), sort_keys=True, default=str)


__all__ = ["crd", "strict_schema", "version_schema"]

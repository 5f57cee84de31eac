"""Offline validation of a DynamoGraphDeployment against the v1beta1 CRD.

``check_manifest(doc)`` returns one message per problem ([] when the manifest is valid):

1. the CRD's v1beta1 ``openAPIV3Schema`` in **strict** mode: every object node that has no
   ``additionalProperties`` and is not ``x-kubernetes-preserve-unknown-fields`` gets
   ``additionalProperties: false`` (root ``metadata`` excepted), so typos and v1alpha1 keys fail
   instead of being pruned by the apiserver;
2. the list-map keys and list sets the schema declares but JSON Schema cannot enforce (a set-typed list
   rejects a repeated value, with ``uniqueItems`` equality);
3. every create-time CEL rule of the CRD, its own rule strings evaluated with a CEL library
   (``crd_cel``), and the operator's webhook rules, re-implemented;
4. cheap semantic checks: GPU limits as strings, per-pod GPUs × nodes = the instance's parallel size,
   the GPU total (``used_gpus``), equal prefill/decode KV block sizes, a KV router with an event
   publisher, and the planner ``--config`` against PlannerConfig's own rules.

The CRD is shipped as package data (``data/nvidia.com_dynamographdeployments.yaml``, byte-identical to
ai-dynamo/dynamo ``deploy/operator/config/crd/bases``); the validator is built once per process.
Steps 1 and 2 live in ``crd_schema.py``, the metadata and webhook rules in ``crd_webhook.py``, step 4 in
``crd_semantics.py``; ``crd_reading.py`` reads components and containers for all of them, and
``spica_core/engines`` each engine's flags.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from spica_core.emit.crd_cel import cel_problems
from spica_core.emit.crd_schema import _list_key_problems, _schema_problems, version_schema
from spica_core.emit.crd_semantics import _semantic_problems
from spica_core.emit.crd_webhook import _metadata_problems, _webhook_problems


API_GROUP = "nvidia.com"
API_VERSION = "nvidia.com/v1beta1"
KIND = "DynamoGraphDeployment"


def check_manifest(doc: Any, used_gpus: int | None = None) -> list[str]:
    """Every problem of a v1beta1 DynamoGraphDeployment, one message each; [] when it is valid.

    ``used_gpus``: when given, the GPUs of the worker components (replicas × per-pod GPUs × nodes)
    must add up to it (the candidate's ``used_gpus``).
    """
    if not isinstance(doc, Mapping):
        return [f"<root>: a manifest must be a mapping (got {type(doc).__name__})"]
    problems: list[str] = []
    if doc.get("apiVersion") != API_VERSION:
        problems.append(f"apiVersion: must be {API_VERSION!r} (got {doc.get('apiVersion')!r}); v1alpha1 is "
                        "deprecated and converted by a webhook, so emit and check v1beta1 directly")
        return problems
    if doc.get("kind") != KIND:
        problems.append(f"kind: must be {KIND!r} (got {doc.get('kind')!r})")
    problems += _schema_problems(doc)
    problems += _metadata_problems(doc.get("metadata"))
    spec = doc.get("spec")
    if not isinstance(spec, Mapping):
        problems.append("spec: the webhook requires a spec with at least one component")
        return problems
    components = spec.get("components")
    if not isinstance(components, list) or not components:
        problems.append("spec.components: the webhook requires at least one component")
        return problems
    comps = [(i, c) for i, c in enumerate(components) if isinstance(c, Mapping)]
    problems += _list_key_problems(doc)
    problems += cel_problems(doc, version_schema())
    problems += _webhook_problems(doc, spec, comps)
    problems += _semantic_problems(spec, comps, used_gpus)
    return _unique(problems)


def _unique(problems: list[str]) -> list[str]:
    seen: set[str] = set()
    return [p for p in problems if not (p in seen or seen.add(p))]


__all__ = ["check_manifest", "API_GROUP", "API_VERSION", "KIND"]

"""What the apiserver and the Dynamo operator's webhook check beyond the CRD's schema and CEL rules.

The metadata (DNS-1123 names, string label and annotation maps) and the webhook's rules, re-implemented:
one ``main`` container with a semver image tag or a runtime version override, Grove-only fields, epp
components, Service name lengths and one backend across the workers.
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from spica_core.emit.crd_reading import MAIN_CONTAINER, _comp, _dicts, _get, backend_of, image_tag


EXECUTOR_ANNOTATION = "nvidia.com/vllm-distributed-executor-backend"
GROVE_ANNOTATION = "nvidia.com/enable-grove"
MAX_SERVICE_NAME = 63

# metadata.name: a DNS-1123 label that starts with a letter (it prefixes Service names).
DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
# The operator's semver tag rule for the main image (webhook): [v]MAJOR.MINOR.PATCH[-pre][+build].
SEMVER_TAG = re.compile(r"^[vV]?(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
                        r"(-[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?(\+[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?$")
# Kubernetes qualified names (label and annotation keys): [prefix/]name.
# A DNS-1123 label without the leading-letter rule (namespaces), at most 63 characters.
NAMESPACE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
QUALIFIED_NAME = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                             r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")


# ---------------------------------------------------------------- metadata (not in the schema)


def _metadata_problems(metadata: Any) -> list[str]:
    if not isinstance(metadata, Mapping):
        return ["metadata: required, with a name"]
    out = []
    name = metadata.get("name")
    if not isinstance(name, str) or not name:
        out.append("metadata.name: required (a DNS-1123 label)")
    elif len(name) > 63 or not DNS_LABEL.match(name):
        out.append(f"metadata.name: {name!r} must be a DNS-1123 label: lower case letters, digits and '-', "
                   "starting with a letter, at most 63 characters")
    namespace = metadata.get("namespace")
    if namespace is not None and (not isinstance(namespace, str) or not NAMESPACE.match(namespace)):
        out.append(f"metadata.namespace: {namespace!r} must be a DNS-1123 label")
    for field in ("labels", "annotations"):
        out += _string_map_problems(metadata.get(field), f"metadata.{field}")
    return out


def _string_map_problems(values: Any, where: str) -> list[str]:
    if values is None:
        return []
    if not isinstance(values, Mapping):
        return [f"{where}: must be a map of strings"]
    out = []
    for key, value in values.items():
        if not isinstance(key, str) or not QUALIFIED_NAME.match(key) or len(key.rsplit("/", 1)[0]) > 253:
            out.append(f"{where}: key {key!r} is not a valid Kubernetes qualified name ([prefix/]name)")
        if not isinstance(value, str):
            out.append(f"{where}[{key!r}]: value must be a string (got {type(value).__name__} {value!r})")
    return out


# ---------------------------------------------------------------- 3. webhook rules (the CEL rules: crd_cel)


def _webhook_problems(doc: Mapping[str, Any], spec: Mapping[str, Any],
                      comps: list[tuple[int, Mapping[str, Any]]]) -> list[str]:
    out = []
    annotations = _get(doc, "metadata", "annotations")
    grove_off = isinstance(annotations, Mapping) and str(annotations.get(GROVE_ANNOTATION, "")).lower() == "false"
    if grove_off and "priorityClassName" in spec:
        out.append("spec.priorityClassName: only supported on the Grove pathway (nvidia.com/enable-grove is false)")
    dgd_name = _get(doc, "metadata", "name")
    detected: dict[str, list[str]] = {}
    for i, comp in comps:
        where = _comp(comp, i)
        containers = _dicts(_get(comp, "podTemplate", "spec", "containers"))
        mains = [c for c in containers if c.get("name") == MAIN_CONTAINER]
        if len(mains) != 1:
            out.append(f"{where}: needs exactly one container named 'main' in podTemplate.spec.containers "
                       f"(found {len(mains)})")
        else:
            image = mains[0].get("image")
            if not isinstance(image, str) or not image:
                out.append(f"{where}: the 'main' container needs a non-empty image")
            elif not SEMVER_TAG.match(image_tag(image) or "") and "runtimeVersionOverride" not in comp:
                out.append(f"{where}.runtimeVersionOverride: required because the main image tag of {image!r} is not "
                           "a semantic version; set it to the Dynamo runtime version, e.g. '1.6.1'")
            backend = backend_of(mains[0])
            if backend is not None:
                detected.setdefault(backend, []).append(str(comp.get("name")))
        if grove_off and "minAvailable" in comp:
            out.append(f"{where}.minAvailable: only supported on the Grove pathway")
        if comp.get("type") == "epp":
            if comp.get("replicas", 1) != 1:
                out.append(f"{where}.replicas: an epp component runs exactly 1 replica")
            if "multinode" in comp:
                out.append(f"{where}.multinode: an epp component is never multinode")
        sidecar = comp.get("frontendSidecar")
        if sidecar is not None and sidecar not in [c.get("name") for c in containers]:
            out.append(f"{where}.frontendSidecar: names no container of this component ({sidecar!r})")
        name = comp.get("name")
        if isinstance(dgd_name, str) and isinstance(name, str) and len(f"{dgd_name}-{name}") > MAX_SERVICE_NAME:
            out.append(f"{where}.name: '<dgd name>-<component name>' ({dgd_name}-{name.lower()}) is longer than "
                       f"{MAX_SERVICE_NAME} characters; shorten the DGD or component name")
    framework = spec.get("backendFramework")
    if len(detected) > 1:
        shown = "; ".join(f"dynamo.{b} in {', '.join(names)}" for b, names in detected.items())
        out.append(f"spec.components: workers run different backends ({shown})")
    elif detected and framework is not None and framework not in detected:
        backend, names = next(iter(detected.items()))
        out.append(f"spec.backendFramework: {framework!r} does not match the worker command "
                   f"(python3 -m dynamo.{backend} in {', '.join(names)})")
    return out


__all__ = ["DNS_LABEL", "NAMESPACE", "QUALIFIED_NAME", "SEMVER_TAG"]

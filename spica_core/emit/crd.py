"""Offline validation of a DynamoGraphDeployment against the v1beta1 CRD (manifests spec §8).

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
"""
from __future__ import annotations

import copy
import json
import math
import re
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from spica_core.emit.crd_cel import cel_problems, readable_path
from spica_core.planner import planner_config_problems

API_GROUP = "nvidia.com"
API_VERSION = "nvidia.com/v1beta1"
KIND = "DynamoGraphDeployment"
CRD_PATH = Path(__file__).with_name("data") / "nvidia.com_dynamographdeployments.yaml"
GPU_RESOURCE = "nvidia.com/gpu"
MAIN_CONTAINER = "main"
BACKENDS = ("vllm", "sglang", "trtllm")
WORKER_TYPES = ("worker", "prefill", "decode")
EXECUTOR_ANNOTATION = "nvidia.com/vllm-distributed-executor-backend"
GROVE_ANNOTATION = "nvidia.com/enable-grove"
MAX_SERVICE_NAME = 63

# metadata.name: a DNS-1123 label that starts with a letter (it prefixes Service names).
DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
# The operator's semver tag rule for the main image (webhook): [v]MAJOR.MINOR.PATCH[-pre][+build].
SEMVER_TAG = re.compile(r"^[vV]?(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
                        r"(-[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?(\+[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?$")
# Kubernetes qualified names (label and annotation keys): [prefix/]name.
_QUALIFIED_NAME = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                             r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")

# PlannerConfig (ai-dynamo 1.6.1) fields a generated --config may carry. PlannerConfig silently drops
# unknown keys, so a typo would deploy the default instead: check them here.
PLANNER_CONFIG_KEYS = frozenset({
    "environment", "backend", "mode", "optimization_target", "pre_deployment_sweeping_mode",
    "enable_throughput_scaling", "enable_load_scaling",
    "throughput_adjustment_interval_seconds", "load_adjustment_interval_seconds",
    "max_num_fpm_samples", "fpm_sample_bucket_size", "load_scaling_down_sensitivity", "load_min_observations",
    "load_metric_samples", "load_predictor", "load_predictor_log1p", "prophet_window_size",
    "kalman_q_level", "kalman_q_trend", "kalman_r", "kalman_min_points",
    "max_gpu_budget", "min_gpu_budget", "min_endpoint", "prefill_min_endpoint", "decode_min_endpoint",
    "prefill_engine_num_gpu", "decode_engine_num_gpu", "model_name", "speculative_nextn",
    "ttft_ms", "itl_ms", "report_interval_hours", "live_dashboard_port",
    "metric_pulling_prometheus_extra_query_params",
})

# Each backend's parallel-size flags: the spelling Spica's manifests write first, then the others the engine
# accepts (a hand-written manifest may use them). An instance's GPUs are the product of INSTANCE_SIZES: SGLang's
# TP size is the whole instance, its attention DP lives inside it.
PARALLEL_FLAGS: dict[str, dict[str, tuple[str, ...]]] = {
    "vllm": {"tp": ("--tensor-parallel-size", "-tp"), "pp": ("--pipeline-parallel-size", "-pp"),
             "dp": ("--data-parallel-size", "-dp")},
    "sglang": {"tp": ("--tp-size", "--tensor-parallel-size", "--tp"), "pp": ("--pp-size", "--pipeline-parallel-size"),
               "dp": ("--dp-size",), "ep": ("--ep-size",)},
    "trtllm": {"tp": ("--tensor-parallel-size",), "pp": ("--pipeline-parallel-size",),
               "ep": ("--expert-parallel-size",)},
}
INSTANCE_SIZES: dict[str, tuple[str, ...]] = {"vllm": ("tp", "pp", "dp"), "sglang": ("tp", "pp"),
                                              "trtllm": ("tp", "pp")}


def parallel_flag(backend: str, size: str) -> str:
    """The flag Spica writes for one parallel size of a backend (``tp``, ``pp``, ``dp``, ``ep``)."""
    return PARALLEL_FLAGS[backend][size][0]


_KV_EVENT_FLAGS = ("--kv-events-config", "--publish-events-and-metrics", "--publish-kv-events")

# Schema defaults the CEL rules below see: the apiserver applies defaults before it evaluates CEL.


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


# ---------------------------------------------------------------- entry point


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
    if namespace is not None and (not isinstance(namespace, str) or len(namespace) > 63
                                  or not re.match(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", namespace)):
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
        if not isinstance(key, str) or not _QUALIFIED_NAME.match(key) or len(key.rsplit("/", 1)[0]) > 253:
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


def image_tag(image: str) -> str | None:
    """The tag of an image reference (None for an untagged or digest-only reference)."""
    ref = image.split("@", 1)[0]
    last = ref.rsplit("/", 1)[-1]
    return last.split(":", 1)[1] if ":" in last else None


def backend_of(container: Mapping[str, Any]) -> str | None:
    """The backend a container launches (``python3 -m dynamo.<backend>``), or None."""
    tokens = _tokens(container)
    for a, b in zip(tokens, tokens[1:]):
        if a == "-m" and b.startswith("dynamo.") and b[len("dynamo."):] in BACKENDS:
            return b[len("dynamo."):]
    return None


# ---------------------------------------------------------------- 4. semantic checks


def _semantic_problems(spec: Mapping[str, Any], comps: list[tuple[int, Mapping[str, Any]]],
                       used_gpus: int | None) -> list[str]:
    out: list[str] = []
    total, total_known = 0, True
    block_sizes: dict[str, tuple[str, int]] = {}
    publishers: list[str] = []
    for i, comp in comps:
        where = _comp(comp, i)
        main = _main(comp)
        multinode = comp.get("multinode")
        nodes = 1
        if multinode is not None:
            count = multinode.get("nodeCount") if isinstance(multinode, Mapping) else None
            if count is None:
                out.append(f"{where}.multinode: set nodeCount explicitly (the apiserver defaults an empty multinode "
                           "to 2 nodes)")
                count = 2
            nodes = count if isinstance(count, int) else 1
        for c_index, ctr in enumerate(_dicts(_get(comp, "podTemplate", "spec", "containers"))):
            out += _quantity_problems(ctr, f"{where}.podTemplate.spec.containers[{ctr.get('name', c_index)}]")
        if main is None:
            continue
        pod_gpus = _pod_gpus(main)
        ctype = comp.get("type")
        if ctype in WORKER_TYPES:
            replicas = comp.get("replicas", 1)
            if pod_gpus is None:
                total_known = False
            elif isinstance(replicas, int):
                total += replicas * pod_gpus * nodes
            backend = backend_of(main)
            args = [a for a in main.get("args") or () if isinstance(a, str)]
            instance = instance_gpus(backend, args) if backend else None
            if instance is not None and pod_gpus is not None and pod_gpus * nodes != instance:
                out.append(f"{where}: a worker instance spans {instance} GPUs by its parallel flags, but the component "
                           f"gives it {pod_gpus} GPU(s) per pod × {nodes} node(s) = {pod_gpus * nodes}")
            size = block_size(backend, args) if backend else None
            if size is not None and ctype in ("prefill", "decode"):
                block_sizes[ctype] = (str(comp.get("name")), size)
            if backend == "trtllm":
                out += _trtllm_problems(where, args)
            if ctype in ("worker", "prefill") and any(flag in args for flag in _KV_EVENT_FLAGS):
                if backend == "vllm" and "--no-enable-prefix-caching" in args:
                    out.append(f"{where}: publishes KV events with prefix caching off (vLLM publishes none)")
                elif backend == "sglang" and "--disable-radix-cache" in args:
                    out.append(f"{where}: publishes KV events with the radix cache off (SGLang publishes none)")
                else:
                    publishers.append(str(comp.get("name")))
        elif ctype == "planner":
            out += _planner_problems(where, main)
    if len(block_sizes) == 2 and block_sizes["prefill"][1] != block_sizes["decode"][1]:
        (pn, ps), (dn, ds) = block_sizes["prefill"], block_sizes["decode"]
        out.append(f"spec.components: prefill ({pn}) and decode ({dn}) KV block sizes differ ({ps} vs {ds}); "
                   "KV transfer needs the same page size on both sides")
    if used_gpus is not None:
        if not total_known:
            out.append(f"spec.components: a worker component has no {GPU_RESOURCE} limit, so the GPU total cannot "
                       f"be checked against used_gpus ({used_gpus})")
        elif total != used_gpus:
            out.append(f"spec.components: the worker components use {total} GPUs (replicas × per-pod GPUs × nodes), "
                       f"but the candidate uses {used_gpus}")
    out += _router_problems(comps, publishers)
    return out


def _quantity_problems(container: Mapping[str, Any], where: str) -> list[str]:
    out = []
    resources = container.get("resources")
    if not isinstance(resources, Mapping):
        return out
    for part in ("limits", "requests"):
        values = resources.get(part)
        if not isinstance(values, Mapping):
            continue
        for key, value in values.items():
            if not isinstance(value, str):
                out.append(f"{where}.resources.{part}[{key!r}]: write the quantity as a string, e.g. {str(value)!r} "
                           f"(got {type(value).__name__} {value!r})")
    return out


def _pod_gpus(container: Mapping[str, Any]) -> int | None:
    resources = container.get("resources") if isinstance(container.get("resources"), Mapping) else {}
    for part in ("limits", "requests"):
        values = resources.get(part)
        if isinstance(values, Mapping) and GPU_RESOURCE in values:
            try:
                value = float(str(values[GPU_RESOURCE]))
            except ValueError:
                return None
            return int(value) if value.is_integer() else None
    return None


def _flag(args: list[str], *names: str) -> str | None:
    """The value of the last occurrence of any of ``names`` (``--x v`` or ``--x=v``)."""
    found = None
    for i, arg in enumerate(args):
        for name in names:
            if arg == name and i + 1 < len(args):
                found = args[i + 1]
            elif arg.startswith(name + "="):
                found = arg[len(name) + 1:]
    return found


def _int_flag(args: list[str], *names: str, default: int = 1) -> int | None:
    value = _flag(args, *names)
    if value is None:
        return default
    try:
        return int(value)
    except ValueError:
        return None


def instance_gpus(backend: str | None, args: list[str]) -> int | None:
    """GPUs of one worker instance from its global parallel flags (None when they cannot be read)."""
    flags = PARALLEL_FLAGS.get(backend or "")
    if flags is None:
        return None
    if backend == "trtllm" and _flag(args, *flags["tp"]) is None and "--extra-engine-args" in args:
        return None   # the parallel sizes live in a file we cannot read
    sizes = [_int_flag(args, *flags[size]) for size in INSTANCE_SIZES[backend or ""]]
    if any(s is None for s in sizes):
        return None
    return math.prod(s for s in sizes if s is not None)


def _override(args: list[str]) -> dict[str, Any] | None:
    raw = _flag(args, "--override-engine-args")
    if raw is None:
        return None
    try:
        parsed = json.loads(raw)
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict) else None


def block_size(backend: str | None, args: list[str]) -> int | None:
    """The KV block (page) size a worker's args set, or None."""
    if backend == "vllm":
        value = _flag(args, "--block-size")
    elif backend == "sglang":
        value = _flag(args, "--page-size")
    elif backend == "trtllm":
        override = _override(args) or {}
        cache = override.get("kv_cache_config") if isinstance(override.get("kv_cache_config"), dict) else {}
        value = cache.get("tokens_per_block", _flag(args, "--kv-block-size"))
    else:
        return None
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def _trtllm_problems(where: str, args: list[str]) -> list[str]:
    out = []
    raw = _flag(args, "--override-engine-args")
    if raw is not None and _override(args) is None:
        out.append(f"{where}: --override-engine-args is not a JSON object")
    tokens, size = _int_flag(args, "--max-num-tokens", default=0), block_size("trtllm", args)
    if tokens and size and tokens % size:
        out.append(f"{where}: TRT-LLM --max-num-tokens {tokens} is not a multiple of the KV block size {size}")
    return out


def _router_problems(comps: list[tuple[int, Mapping[str, Any]]], publishers: list[str]) -> list[str]:
    out = []
    for i, comp in comps:
        if comp.get("type") != "frontend":
            continue
        main = _main(comp)
        if main is None:
            continue
        env = {e.get("name"): e.get("value") for e in _dicts(main.get("env"))}
        args = [a for a in main.get("args") or () if isinstance(a, str)]
        mode = _flag(args, "--router-mode") or env.get("DYN_ROUTER_MODE")
        events_off = (str(env.get("DYN_ROUTER_USE_KV_EVENTS", "")).lower() in ("false", "0")
                      or "--no-kv-events" in args or "--no-router-kv-events" in args)
        if mode == "kv" and not events_off and not publishers:
            out.append(f"{_comp(comp, i)}: the KV router listens for KV events, but no agg or prefill worker "
                       "publishes them (add --kv-events-config / --publish-events-and-metrics, or set "
                       "DYN_ROUTER_USE_KV_EVENTS=false)")
    return out


def _planner_problems(where: str, main: Mapping[str, Any]) -> list[str]:
    args = [a for a in main.get("args") or () if isinstance(a, str)]
    raw = _flag(args, "--config")
    if raw is None or not raw.lstrip().startswith("{"):
        return []   # a path to a mounted file: nothing to check offline
    try:
        config = json.loads(raw)
    except ValueError as exc:
        return [f"{where}: the planner --config is not valid JSON ({exc})"]
    if not isinstance(config, dict):
        return [f"{where}: the planner --config must be a JSON object"]
    out = []
    unknown = sorted(set(config) - PLANNER_CONFIG_KEYS)
    if unknown:
        out.append(f"{where}: planner --config has keys PlannerConfig does not know (it drops them silently): "
                   f"{', '.join(unknown)}")
    throughput_on = bool(config.get("enable_throughput_scaling", True))
    load_on = bool(config.get("enable_load_scaling", False))
    if not (throughput_on or load_on):
        out.append(f"{where}: planner --config enables no scaling mode")
    def number(key: str, default: float | None = None) -> float | None:
        value = config.get(key, default)
        return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None

    bucket = config.get("fpm_sample_bucket_size")
    # PlannerConfig's easy modes run load scaling alone, so the interval order only binds the sla target.
    both = throughput_on and load_on and config.get("optimization_target", "sla") == "sla"
    out += [f"{where}: planner {p}" for p in planner_config_problems(
        load_on=both, throughput_on=both, load_interval_s=number("load_adjustment_interval_seconds", 5),
        throughput_interval_s=number("throughput_adjustment_interval_seconds", 180),
        bucket=bucket if isinstance(bucket, int) and not isinstance(bucket, bool) else None,
        sensitivity=number("load_scaling_down_sensitivity"))]
    if config.get("mode") == "agg" and ({"prefill_min_endpoint", "decode_min_endpoint"} & set(config)):
        out.append(f"{where}: planner prefill_/decode_min_endpoint are rejected in agg mode (use min_endpoint)")
    if config.get("optimization_target") == "load":
        out.append(f"{where}: planner optimization_target 'load' needs queue and KV thresholds; use throughput, "
                   "latency or sla")
    return out


# ---------------------------------------------------------------- helpers


def _get(value: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    return value


def _dicts(values: Any) -> list[Mapping[str, Any]]:
    return [v for v in values if isinstance(v, Mapping)] if isinstance(values, list) else []


def _main(comp: Mapping[str, Any]) -> Mapping[str, Any] | None:
    mains = [c for c in _dicts(_get(comp, "podTemplate", "spec", "containers")) if c.get("name") == MAIN_CONTAINER]
    return mains[0] if len(mains) == 1 else None


def _tokens(container: Mapping[str, Any]) -> list[str]:
    return [t for t in [*(container.get("command") or ()), *(container.get("args") or ())] if isinstance(t, str)]


def _comp(comp: Mapping[str, Any], index: int) -> str:
    name = comp.get("name")
    return f"spec.components[{name}]" if isinstance(name, str) and name else f"spec.components[{index}]"


def _unique(problems: list[str]) -> list[str]:
    seen: set[str] = set()
    return [p for p in problems if not (p in seen or seen.add(p))]


__all__ = ["check_manifest", "crd", "version_schema", "strict_schema", "image_tag", "backend_of", "instance_gpus",
           "block_size", "PLANNER_CONFIG_KEYS", "SEMVER_TAG", "DNS_LABEL", "API_VERSION",
           "KIND", "GPU_RESOURCE", "PARALLEL_FLAGS", "INSTANCE_SIZES", "parallel_flag"]

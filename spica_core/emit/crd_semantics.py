"""Cheap semantic checks of a DynamoGraphDeployment that neither the CRD nor the webhook makes.

GPU quantities as strings, per-pod GPUs × nodes = the instance's parallel size, the GPU total
(``used_gpus``), equal prefill/decode KV block sizes, each engine's own rules (``spica_core/engines``), a KV router
with an event publisher, and the planner ``--config`` against PlannerConfig's own rules.
"""
from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from spica_core.emit.crd_reading import GPU_RESOURCE, WORKER_TYPES, _comp, _dicts, _get, _main, backend_of
from spica_core.engines import engine, flag_value, instance_gpus, publishes_events
from spica_core.planner import PLANNER_CONFIG_KEYS, planner_config_problems


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
            if ctype in ("worker", "prefill") and publishes_events(backend, args):
                publishers.append(str(comp.get("name")))
            if backend is None:
                continue
            module = engine(backend)
            size = module.block_size(args)
            if size is not None and ctype in ("prefill", "decode"):
                block_sizes[ctype] = (str(comp.get("name")), size)
            out += [f"{where}: {problem}" for problem in module.problems(args)]
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
        mode = flag_value(args, "--router-mode") or env.get("DYN_ROUTER_MODE")
        events_off = (str(env.get("DYN_ROUTER_USE_KV_EVENTS", "")).lower() in ("false", "0")
                      or "--no-kv-events" in args or "--no-router-kv-events" in args)
        if mode == "kv" and not events_off and not publishers:
            out.append(f"{_comp(comp, i)}: the KV router listens for KV events, but no agg or prefill worker "
                       "publishes them (add --kv-events-config / --publish-events-and-metrics, or set "
                       "DYN_ROUTER_USE_KV_EVENTS=false)")
    return out


def _planner_problems(where: str, main: Mapping[str, Any]) -> list[str]:
    args = [a for a in main.get("args") or () if isinstance(a, str)]
    raw = flag_value(args, "--config")
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


__all__: list[str] = []

"""The flat unrolled sample (reference §9.1): one candidate as a plain dict a generator can read.

The sample carries exactly the keys that apply to the candidate's mode, router and planner state;
irrelevant knobs are absent (never a sentinel), so a downstream manifest generator never has to
re-decode presets or guess which values were live.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from spica_core.config.knobs import ENGINE_KNOBS, KV_ROUTER_KNOBS, decode_composite, predictor_fields
from spica_core.config.model import SearchSpace
from spica_core.errors import SpicaError
from spica_core.space.parallel import ParallelConfig

PINNED_CONTEXT = ("model_name", "hardware_sku", "gpu_budget", "min_gpu_budget", "min_endpoint",
                  "context_length", "startup_time", "aic_nextn")
KV_MANAGER_FIELDS = ("num_g2_blocks", "kv_bytes_per_token", "bandwidth_g1_to_g2_gbps",
                     "bandwidth_g2_to_g1_gbps", "offload_batch_size")
ADMISSION_FIELDS = ("active_decode_blocks_threshold", "active_prefill_tokens_threshold",
                    "active_prefill_tokens_threshold_frac", "no_admission_control")
ENGINE_PINNED = ("block_size", "gpu_memory_utilization", "enable_prefix_caching")
CACHE_HIT_FIELDS = ("host_cache_hit_weight", "disk_cache_hit_weight")
PLANNER_INTERVALS = ("throughput_adjustment_interval_seconds", "load_adjustment_interval_seconds")

# KV-load fields written by add_run_fields (§5.3)
KV_LOAD_FIELDS = ("kv_load_ratio", "kv_load_concurrency_capacity", "kv_load_capacity_tokens",
                  "prefill_kv_capacity_tokens", "decode_kv_capacity_tokens", "agg_kv_capacity_tokens")


def _pick(space: SearchSpace, selection: Mapping[str, Any], knob: str) -> Any:
    """The selection's value for a knob, or the knob's only value when the study did not declare it."""
    if knob in selection:
        return selection[knob]
    values = getattr(space, knob)
    if isinstance(values, list) and len(values) == 1:
        return values[0]
    raise SpicaError(f"selection has no value for '{knob}' and search_space.{knob} has {len(values)} values "
                     f"({values}); pin it or let the study choose it")


def _winner(load_predictor: Any, interval: Any) -> Any:
    """The predictor sub-sweep's winning entry for a throughput interval, or None."""
    if load_predictor is None or interval is None:
        return None
    table = getattr(load_predictor, "best_by_interval", load_predictor)
    if not isinstance(table, Mapping):
        return None
    for key in (interval, int(interval), str(int(interval)), float(interval), str(interval)):
        if key in table:
            return table[key]
    return None


def unroll_sample(space: SearchSpace, selection: Mapping[str, Any], parallel_config: ParallelConfig,
                  load_predictor: Any = None) -> dict[str, Any]:
    """Flatten a decoded selection plus its projected parallel config into the §9.1 sample.

    ``load_predictor`` is the sub-sweep result (an object with ``best_by_interval``, or that mapping
    itself, keyed by the throughput interval); None when no predictor was swept.
    """
    mode = selection.get("deployment_mode", parallel_config.mode)
    if mode != parallel_config.mode:
        raise SpicaError(f"selection deployment_mode {mode!r} does not match the parallel config ({parallel_config.mode})")
    out: dict[str, Any] = {"deployment_mode": mode, "backend": _pick(space, selection, "backend")}

    # 2. pinned context, None values included
    for key in PINNED_CONTEXT + KV_MANAGER_FIELDS:
        out[key] = getattr(space, key)

    # 3. parallel fields
    out.update(parallel_config.flat_fields())

    # 4. engine knobs of the active branch only
    roles = ("agg",) if mode == "agg" else ("prefill", "decode")
    for knob in ENGINE_KNOBS[mode]:
        out[knob] = int(_pick(space, selection, knob))
    for role in roles:
        for suffix in ENGINE_PINNED:
            out[f"{role}_{suffix}"] = getattr(space, f"{role}_{suffix}")

    # 5. router
    router = _pick(space, selection, "router_mode")
    out["router_mode"] = router
    if router == "kv_router":
        for knob in KV_ROUTER_KNOBS:
            out[knob] = float(_pick(space, selection, knob))
        if space.num_g2_blocks > 0:
            for knob in CACHE_HIT_FIELDS:
                out[knob] = float(_pick(space, selection, knob))
        for key in ADMISSION_FIELDS:
            out[key] = getattr(space, key)

    # 6. planner
    policy = _pick(space, selection, "planner_scaling_policy")
    flags = decode_composite("planner_scaling_policy", policy)
    out["planner_scaling_policy"] = policy
    out["enable_throughput_scaling"] = bool(flags["enable_throughput_scaling"])
    out["enable_load_scaling"] = bool(flags["enable_load_scaling"])
    if out["enable_throughput_scaling"] or out["enable_load_scaling"]:
        for key in PLANNER_INTERVALS:
            out[key] = flags[key]
        out.update(decode_composite("planner_fpm_sampling", _pick(space, selection, "planner_fpm_sampling")))
        out.update(decode_composite("planner_load_sensitivity",
                                    _pick(space, selection, "planner_load_sensitivity")))
        if out["enable_throughput_scaling"]:
            winner = _winner(load_predictor, flags["throughput_adjustment_interval_seconds"])
            if winner is not None:
                out.update(predictor_fields(winner))
    return out


def add_run_fields(sample: Mapping[str, Any], *, backend_version: str, concurrency: int | None = None,
                   kv_load: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Add what the search loop resolves after unrolling: backend_version, concurrency, KV-load fields."""
    out = dict(sample)
    out["backend_version"] = backend_version
    if concurrency is not None:
        out["concurrency"] = int(concurrency)
    if kv_load:
        for key in KV_LOAD_FIELDS:
            if key in kv_load and kv_load[key] is not None:
                out[key] = kv_load[key]
        if "concurrency" in kv_load and kv_load["concurrency"] is not None:
            out["concurrency"] = int(kv_load["concurrency"])
    return out


def roles_of(sample: Mapping[str, Any]) -> tuple[str, ...]:
    """The engine roles a sample deploys: ('agg',) or ('prefill', 'decode')."""
    return ("agg",) if sample["deployment_mode"] == "agg" else ("prefill", "decode")


def parallel_from_sample(sample: Mapping[str, Any]) -> ParallelConfig:
    """Rebuild the ParallelConfig from a flat sample (the inverse of flat_fields)."""
    keys = ("tp", "pp", "attention_dp", "moe_tp", "moe_ep", "replicas")
    if sample["deployment_mode"] == "agg":
        return ParallelConfig.from_dict("agg", {k: sample[k] for k in keys})
    return ParallelConfig.from_dict("disagg", {role: {k: sample[f"{role}_{k}"] for k in keys}
                                               for role in ("prefill", "decode")})


__all__ = ["unroll_sample", "add_run_fields", "roles_of", "parallel_from_sample", "KV_LOAD_FIELDS"]

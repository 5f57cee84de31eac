"""Traffic for one replay: load shape, request count and candidate-relative KV load.

Trace workloads replay a mooncake file open loop (timestamps scaled by arrival_speedup_ratio) or
closed loop (replay_concurrency). Synthetic workloads run at a fixed rate, a fixed concurrency,
or a concurrency derived from the candidate's own KV capacity (kv_load_ratio), so "the same load"
means the same KV pressure on every candidate.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spica_core.config.workload import Workload
from spica_core.errors import InfeasibleKVCapacityError
from spica_core.space.kv import kv_tokens_per_rank
from spica_core.deployment import Candidate, KVLoad
from spica_core.config.trace import TRACE_BLOCK_SIZE
from spica_core.evaluate.replay_traces import spread_trace, staggered_trace
from spica_core.space.facts import cache_dir


@dataclass(frozen=True)
class ReplayWorkload:
    """Exactly one replay entry point and its traffic kwargs (engine/router/SLA kwargs are added later)."""

    kind: str  # "trace" | "synthetic"
    kwargs: dict[str, Any]
    trace_path: str | None = None

    @property
    def num_requests(self) -> int | None:
        return self.kwargs.get("request_count")


def effective_in_flight_cap(workload: Workload, override: int | None = None) -> int | None:
    """Closed-loop cap: trace → replay_concurrency; synthetic → KV-load override, else concurrency; else None."""
    if workload.is_trace:
        return workload.replay_concurrency
    if override is not None:
        return int(override)
    return workload.concurrency


def synthetic_arrival_interval_ms(workload: Workload) -> float:
    return 1000.0 / workload.request_rate if workload.request_rate else 1.0


def request_count(workload: Workload, concurrency_override: int | None = None) -> int:
    """Requests per replay: max(1, round(num_request_ratio × load)); load = KV-load concurrency, else concurrency, else rate."""
    if workload.is_trace:
        raise ValueError("trace workloads take their request count from the trace")
    if workload.kv_load_ratio is not None and concurrency_override is None:
        raise ValueError("a kv_load_ratio workload needs the candidate's resolved concurrency")
    if concurrency_override is not None:
        load = float(concurrency_override)
    elif workload.concurrency is not None:
        load = float(workload.concurrency)
    else:
        load = float(workload.request_rate or 0.0)
    return max(1, round(float(workload.num_request_ratio or 0.0) * load))


def start_window_ms(workload: Workload) -> float:
    """The window a closed loop of identical requests starts over: the workload's own, else the shipped one
    (``data/serving.json``); 0 for any other load, whose lengths, rate or trace already spread it."""
    if not workload.staggers:
        return 0.0
    if workload.start_window_ms is not None:
        return float(workload.start_window_ms)
    from spica_core.evaluate.serving import load_serving

    return load_serving().start_window_ms


def replay_workload(workload: Workload, *, trace_file: str | None = None, concurrency: int | None = None,
                    directory: Path | None = None) -> ReplayWorkload:
    """The traffic kwargs of one replay. ``concurrency`` is the candidate's resolved KV-load concurrency;
    ``directory`` keeps a ``length_spread`` or staggered closed loop's generated trace."""
    if workload.is_trace:
        path = trace_file or workload.trace_path
        kwargs: dict[str, Any] = {"arrival_speedup_ratio": float(workload.arrival_speedup_ratio),
                                  "trace_block_size": TRACE_BLOCK_SIZE, "trace_format": "mooncake"}
        if workload.replay_concurrency is not None:
            kwargs["replay_concurrency"] = int(workload.replay_concurrency)
        return ReplayWorkload("trace", kwargs, str(path))
    cap = effective_in_flight_cap(workload, concurrency)
    count = request_count(workload, concurrency if workload.kv_load_ratio is not None else None)
    if workload.length_spread > 0:
        interval = 0.0 if cap is not None else synthetic_arrival_interval_ms(workload)
        path = spread_trace(int(workload.isl), int(workload.osl), count, float(workload.length_spread), interval,
                            directory or cache_dir())
        spread_kwargs: dict[str, Any] = {"arrival_speedup_ratio": 1.0, "trace_block_size": TRACE_BLOCK_SIZE,
                                         "trace_format": "mooncake"}
        if cap is not None:
            spread_kwargs["replay_concurrency"] = int(cap)
        return ReplayWorkload("trace", spread_kwargs, str(path))
    window = start_window_ms(workload)
    if cap is not None and window > 0:
        path = staggered_trace(int(workload.isl), int(workload.osl), count, int(cap), window, directory or cache_dir())
        return ReplayWorkload("trace", {"arrival_speedup_ratio": 1.0, "trace_block_size": TRACE_BLOCK_SIZE,
                                        "trace_format": "mooncake"}, str(path))
    kwargs = {"input_tokens": int(workload.isl), "output_tokens": int(workload.osl),
              "request_count": count,
              "turns_per_session": int(workload.turns_per_session),
              "shared_prefix_ratio": float(workload.shared_prefix_ratio),
              "num_prefix_groups": int(workload.num_prefix_groups),
              "inter_turn_delay_ms": float(workload.inter_turn_delay_ms),
              "arrival_speedup_ratio": 1.0}
    if cap is not None:
        kwargs["replay_concurrency"] = int(cap)
    else:
        kwargs["arrival_interval_ms"] = synthetic_arrival_interval_ms(workload)
    return ReplayWorkload("synthetic", kwargs)


def scaled_workload(workload: Workload, scale: float) -> Workload:
    """The workload with ``scale`` × today's traffic (rate for an open loop, requests in flight for a closed one)."""
    if scale == 1.0:
        return workload
    if workload.is_trace:
        if workload.replay_concurrency is not None:
            return workload.model_copy(update={"replay_concurrency": max(1, round(workload.replay_concurrency * scale))})
        return workload.model_copy(update={"arrival_speedup_ratio": workload.arrival_speedup_ratio * scale})
    if workload.request_rate is not None:
        return workload.model_copy(update={"request_rate": workload.request_rate * scale})
    if workload.concurrency is not None:
        return workload.model_copy(update={"concurrency": max(1, round(workload.concurrency * scale))})
    return workload.model_copy(update={"kv_load_ratio": float(workload.kv_load_ratio) * scale})


def role_kv_capacity_tokens(candidate: Candidate, role: str) -> int:
    """Usable per-rank tokens × attention_dp × replicas for one role."""
    rc = candidate.parallel.roles[role]
    knobs = candidate.engines[role]
    context = candidate.context
    block = int(knobs.block_size)
    if block <= 0:
        raise ValueError(f"{role}_block_size must be > 0")
    tokens = kv_tokens_per_rank(context.model_name, candidate.sku(role), candidate.backend, rc.shape,
                                precision=candidate.precision,
                                max_num_tokens=int(knobs.max_num_batched_tokens),
                                max_batch_size=int(knobs.max_num_seqs),
                                memory_fraction=float(knobs.gpu_memory_utilization), nextn=context.aic_nextn)
    if tokens is None:
        raise InfeasibleKVCapacityError(f"{role} shape has no KV budget for {context.model_name} on "
                                        f"{candidate.sku(role)} ({candidate.backend})")
    usable = (int(tokens) // block) * block
    return usable * rc.shape.attention_dp * rc.replicas


def resolve_kv_load(candidate: Candidate, workload: Workload, ratio: float) -> tuple[int, KVLoad]:
    """The candidate's concurrency for a KV-load ratio, and the capacity it was sized against."""
    if workload.isl is None or workload.osl is None:
        raise ValueError("kv_load_ratio needs isl and osl")
    tokens_per_request = int(workload.isl) + int(workload.osl) // 2
    if tokens_per_request <= 0:
        raise ValueError("isl + osl/2 must be > 0")
    caps = {role: role_kv_capacity_tokens(candidate, role) for role in candidate.roles}
    load_role = "agg" if candidate.mode == "agg" else "decode"
    capacity = caps[load_role]
    capacity_concurrency = capacity // tokens_per_request
    if capacity_concurrency < 1:
        raise InfeasibleKVCapacityError(f"{load_role} KV capacity {capacity} tokens cannot hold one request of "
                                        f"{tokens_per_request} tokens (isl + osl/2)")
    concurrency = max(1, math.floor(float(ratio) * capacity_concurrency))
    return concurrency, KVLoad(float(ratio), capacity, capacity_concurrency, caps)


__all__ = ["ReplayWorkload", "start_window_ms", "scaled_workload", "replay_workload", "request_count", "effective_in_flight_cap", "resolve_kv_load",
           "role_kv_capacity_tokens", "synthetic_arrival_interval_ms", "TRACE_BLOCK_SIZE"]

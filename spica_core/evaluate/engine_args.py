"""Per-role engine arguments in the replay runtime's nested schema.

One payload per role (aggregated, or prefill + decode). Timing comes from the shape's
aiconfigurator-core profile, KV capacity from AIC's memory model with the candidate's own
batching and memory fraction. Every payload is validated by the runtime's own normaliser, so a
candidate the runtime would reject fails here with the runtime's message, before any replay.
"""
from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from spica_core.errors import InfeasibleKVCapacityError, RejectedEngineArgsError
from spica_core.space.facts import model_facts, system_facts
from spica_core.space.parallel import Shape
from spica_core.space.profiles import EngineShape, kv_blocks_per_rank, profile_path, timing_model
from spica_core import engines
from spica_core.deployment import Candidate, HostOffload, Router

os.environ.setdefault("DYN_LOG", "error")

# Disaggregated KV hand-off bandwidth per GPU, decimal GB/s: the GPU type's inter-node bandwidth from
# aiconfigurator-core's system file (one 400 Gb/s NDR NIC per GPU = 50 GB/s on HGX H100 and H200, 800 Gb/s on
# B200, NVLink across a GB200 rack), unless SPICA_KV_TRANSFER_GBPS_PER_GPU says otherwise. Between two GPU
# types the slower side sets the pace. Each TP rank of a prefill worker ships its own shard of the KV over its
# own NIC, so a worker's hand-off bandwidth is this times its TP size (latent MLA KV is replicated, so it moves
# over one NIC's worth).
KV_TRANSFER_ENV = "SPICA_KV_TRANSFER_GBPS_PER_GPU"

WORKER_TYPES = {"agg": "aggregated", "prefill": "prefill", "decode": "decode"}



@dataclass(frozen=True)
class RoleArgs:
    """One role's payload plus what the planner and the report need to know about it."""

    role: str
    payload: dict[str, Any]
    replicas: int
    shape: Shape
    num_gpu_blocks: int
    block_size: int
    profile: str
    extras: dict[str, Any] = field(default_factory=dict)

    @property
    def gpus_per_replica(self) -> int:
        return self.shape.gpus

    @property
    def max_kv_tokens(self) -> int:
        """Tokens of KV across a worker's attention-DP ranks (the replay planner's max_kv_tokens)."""
        return self.num_gpu_blocks * self.block_size * self.shape.attention_dp


KV_DTYPE_BYTES = {"bf16": 2, "fp8": 1}


def kv_transfer_gbps_per_gpu(skus: Iterable[str]) -> float:
    """The per-GPU hand-off bandwidth between GPU types (GB/s): the slower side's, or the environment's override."""
    override = os.environ.get(KV_TRANSFER_ENV)
    if override:
        return float(override)
    return min(system_facts(sku).inter_node_gbps for sku in skus)


def kv_transfer_fields(model: str, shape: Shape, kv_cache_dtype: str, gbps_per_gpu: float) -> dict[str, float]:
    """kv_transfer_bytes_per_token (whole token, all layers, at the KV dtype) and the hand-off bandwidth in GB/s."""
    facts = model_facts(model)
    lanes = 1 if facts.is_mla else shape.tp
    per_token = facts.kv_bytes_per_token * KV_DTYPE_BYTES[kv_cache_dtype] // KV_DTYPE_BYTES["bf16"]
    return {"kv_transfer_bytes_per_token": int(per_token), "kv_transfer_bandwidth": gbps_per_gpu * lanes}


def host_offload_fields(offload: HostOffload, role: str) -> dict[str, Any]:
    """G2 host offload mapped onto the runtime's native_host_offload (agg and prefill, never decode).

    The runtime models host offload for vLLM only and rejects other backends in its normaliser,
    which turns such a candidate into a failed outcome carrying the runtime's reason.
    offload_batch_size has no counterpart in the runtime and is ignored.
    """
    if not offload.enabled or role == "decode":
        return {}
    native: dict[str, Any] = {"num_host_blocks": int(offload.num_g2_blocks)}
    if offload.bandwidth_g1_to_g2_gbps is not None:
        native["d2h_bandwidth_gbps"] = float(offload.bandwidth_g1_to_g2_gbps)
    if offload.bandwidth_g2_to_g1_gbps is not None:
        native["h2d_bandwidth_gbps"] = float(offload.bandwidth_g2_to_g1_gbps)
    assert offload.kv_bytes_per_token is not None  # the config requires it whenever num_g2_blocks > 0
    return {"native_host_offload": native, "kv_cache_bytes_per_token": int(offload.kv_bytes_per_token)}


def role_payload(candidate: Candidate, role: str, *, num_gpu_blocks: int, profile: str) -> dict[str, Any]:
    """The nested engine-args dict of one role (pure: no AIC call, no validation)."""
    knobs = candidate.engines[role]
    shape = candidate.parallel.roles[role].shape
    context = candidate.context
    engine: dict[str, Any] = {
        "backend": candidate.backend,
        "worker_type": WORKER_TYPES[role],
        "block_size": int(knobs.block_size),
        "num_gpu_blocks": int(num_gpu_blocks),
        "max_num_seqs": int(knobs.max_num_seqs),
        "max_num_batched_tokens": int(knobs.max_num_batched_tokens),
        "enable_prefix_caching": bool(knobs.enable_prefix_caching),
        "timing_model": timing_model(profile),
    }
    engine.update(engines.engine(candidate.backend).replay_settings(knobs))  # what the manifest's flags set too
    if context.aic_nextn:
        engine["aic_nextn"] = int(context.aic_nextn)
    if role == "prefill":
        engine.update(kv_transfer_fields(context.model_name, shape, candidate.precision.kv_cache_dtype,
                                         kv_transfer_gbps_per_gpu(candidate.hardware.values())))
    engine.update(host_offload_fields(candidate.offload, role))
    payload: dict[str, Any] = {"tensor_parallel_size": shape.tp, "dp_size": shape.attention_dp, "engine": engine}
    if context.startup_time is not None:
        payload["startup_time"] = float(context.startup_time)
    return payload


def validate_payload(payload: Mapping[str, Any]) -> dict[str, Any]:
    """The runtime's normalised form; RejectedEngineArgsError with the runtime's message on any schema error."""
    import dynamo._core as dc

    try:
        return dict(dc._normalize_mocker_config(dict(payload)))
    except (ValueError, TypeError, RuntimeError) as exc:
        raise RejectedEngineArgsError(f"engine arguments rejected by the runtime: {exc}") from None


def build_engine_args(candidate: Candidate, *, profile_dir: str | None = None,
                      validate: bool = True) -> dict[str, RoleArgs]:
    """Role → RoleArgs for a candidate whose ``backend_version`` is resolved.

    Builds (or reuses) each role's AIC profile and sizes its KV from the AIC memory model.
    Raises InfeasibleKVCapacityError when a role's shape has no KV budget, RejectedEngineArgsError
    when the runtime refuses a payload.
    """
    context = candidate.context
    if candidate.backend_version is None:
        raise ValueError("build_engine_args needs a candidate with its backend_version resolved")
    out: dict[str, RoleArgs] = {}
    for role in candidate.roles:
        rc = candidate.parallel.roles[role]
        knobs = candidate.engines[role]
        sku = candidate.sku(role)
        blocks = kv_blocks_per_rank(context.model_name, sku, candidate.backend, rc.shape,
                                    precision=candidate.precision, block_size=int(knobs.block_size),
                                    max_num_batched_tokens=int(knobs.max_num_batched_tokens),
                                    max_num_seqs=int(knobs.max_num_seqs),
                                    memory_fraction=float(knobs.gpu_memory_utilization), nextn=context.aic_nextn)
        if blocks is None or blocks < 1:
            raise InfeasibleKVCapacityError(f"{role} shape {rc.shape.strategy}{rc.shape.gpus} "
                                            f"(tp={rc.shape.tp}, dp={rc.shape.attention_dp}) leaves no KV cache for "
                                            f"{context.model_name} at {candidate.precision.label()} on "
                                            f"{sku}")
        es = EngineShape.of(context.model_name, sku, candidate.backend, candidate.backend_version,
                            rc.shape, candidate.precision, nextn=context.aic_nextn)
        prof = str(profile_path(es, profile_dir))
        payload = role_payload(candidate, role, num_gpu_blocks=blocks, profile=prof)
        if validate:
            validate_payload(payload)
        out[role] = RoleArgs(role, payload, rc.replicas, rc.shape, blocks, int(knobs.block_size), prof)
    return out


def router_kwargs(router: Router) -> dict[str, Any]:
    """router_mode and, for the KV router, a KvRouterConfig with the candidate's weights."""
    if not router.is_kv:
        return {"router_mode": "round_robin"}
    from dynamo.llm import KvRouterConfig

    return {"router_mode": "kv_router", "router_config": KvRouterConfig(**router.weights())}


__all__ = ["RoleArgs", "build_engine_args", "role_payload", "validate_payload", "router_kwargs",
           "kv_transfer_fields", "kv_transfer_gbps_per_gpu", "host_offload_fields", "KV_TRANSFER_ENV"]

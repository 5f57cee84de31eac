"""KVBM host offload in a manifest: the worker's environment and the pod's host memory.

The engine flags that turn it on are each engine's (``spica_core/engines``); this is what the pod around it needs.
"""
from __future__ import annotations

import math

from spica_core.deployment import EngineKnobs
from spica_core.emit.manifest_context import _Context, _env
from spica_core.space.parallel import Shape

HOST_MEMORY_HEADROOM_GIB = 64        # KVBM pods: the host cache plus this much for the process
HOST_MEMORY_LIMIT_FACTOR = 1.25      # memory limit = request × this


def _kvbm_env(ctx: _Context) -> list[dict[str, str]]:
    offload = ctx.candidate.offload
    env = [_env("DYN_KVBM_CPU_CACHE_OVERRIDE_NUM_BLOCKS", str(offload.num_g2_blocks))]
    if offload.offload_batch_size is not None:
        env.append(_env("DYN_KVBM_MAX_TRANSFER_BATCH_SIZE", str(offload.offload_batch_size)))
        note = "offload_batch_size: mapped to DYN_KVBM_MAX_TRANSFER_BATCH_SIZE (approximate; not replayed)"
        if note not in ctx.notes:
            ctx.notes.append(note)
    return env


def _host_memory(ctx: _Context, shape: Shape, knobs: EngineKnobs) -> tuple[str, str] | None:
    """(request, limit) of a KVBM pod: the host tier (one pool per attention-DP rank) plus headroom."""
    per_token = ctx.candidate.offload.kv_bytes_per_token
    if per_token is None:
        return None
    cache = ctx.candidate.offload.num_g2_blocks * knobs.block_size * per_token * shape.attention_dp
    request = math.ceil(cache / 2 ** 30) + HOST_MEMORY_HEADROOM_GIB
    return f"{request}Gi", f"{math.ceil(request * HOST_MEMORY_LIMIT_FACTOR)}Gi"

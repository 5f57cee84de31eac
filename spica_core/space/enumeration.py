"""Legal parallel configurations for one (model, budget, mode, backend).

Pure functions over facts: no AIC call happens here (KV feasibility, step 8, is ``kv.py``), so the
rules can be tested by hand and reused to check a user's pinned configs.
"""
from __future__ import annotations

from itertools import product
from typing import Iterable, Sequence

from spica_core.space.parallel import Mode, ParallelConfig, RoleConfig, Shape

# GPUs per worker.
GPU_LADDER: tuple[int, ...] = (1, 2, 4, 8, 16)
# The MoE scan values of tp, attention_dp, moe_tp, moe_ep.
MOE_SCAN: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128)
# SGLang MoE kernels that can only shard experts by EP.
SGLANG_EP_ONLY_KERNELS: frozenset[str] = frozenset({"wideep", "deepep_moe", "megamoe"})
# The four pure MoE patterns, in the order the docs list them.
MOE_PATTERNS: tuple[str, ...] = ("tep", "dep", "tp", "dtp")


def moe_pattern(shape: Shape) -> str | None:
    """Which pure MoE pattern a shape is (tep / dep / tp / dtp), or None for anything else."""
    tp, dp, mtp, mep = shape.tp, shape.attention_dp, shape.moe_tp, shape.moe_ep
    if tp > 1 and dp == 1 and mtp == 1 and mep > 1:
        return "tep"
    if tp == 1 and dp > 1 and mtp == 1 and mep > 1:
        return "dep"
    if tp > 1 and dp == 1 and mtp > 1 and mep == 1:
        return "tp"
    if tp == 1 and dp > 1 and mtp > 1 and mep == 1:
        return "dtp"
    return None


def backend_rejects(shape: Shape, backend: str, moe_kernel: str | None = None) -> str | None:
    """Why a backend cannot run a shape (mirrors AIC's enumerate_parallel_config), or None."""
    if backend == "trtllm" and shape.tp > 1 and shape.attention_dp > 1:
        return "trtllm forbids attention TP together with attention DP (tp > 1 and attention_dp > 1)"
    if backend == "vllm" and shape.moe_tp > 1 and shape.moe_ep > 1:
        return "vllm forbids MoE TP together with MoE EP (moe_tp > 1 and moe_ep > 1)"
    if backend == "sglang" and moe_kernel in SGLANG_EP_ONLY_KERNELS and shape.moe_tp > 1:
        return f"sglang MoE kernel {moe_kernel} is EP-only (moe_tp must be 1)"
    return None


def shape_rejection(shape: Shape, is_moe: bool, backend: str, gpu_budget: int,
                    moe_kernel: str | None = None) -> str | None:
    """Why a worker shape is not in the enumerated list for this backend (None = it is).

    The same rules the enumerator applies, phrased for a user who pinned the shape.
    """
    if shape.pp != 1:
        return "pp must be 1 (pipeline parallelism is never enumerated)"
    g = shape.gpus
    if g not in GPU_LADDER:
        return f"GPUs per worker tp × attention_dp = {g} is not in {list(GPU_LADDER)}"
    if g > gpu_budget:
        return f"one worker needs {g} GPUs, more than gpu_budget {gpu_budget}"
    if not is_moe:
        if shape.attention_dp != 1 or shape.moe_tp != 1 or shape.moe_ep != 1:
            return "a dense model uses plain TP only (attention_dp = moe_tp = moe_ep = 1)"
    else:
        if shape.tp * shape.attention_dp != shape.moe_tp * shape.moe_ep:
            return (f"MoE width: tp × attention_dp = {shape.tp * shape.attention_dp} must equal "
                    f"moe_tp × moe_ep = {shape.moe_tp * shape.moe_ep}")
        if moe_pattern(shape) is None:
            return "not one of the pure MoE patterns TEP / DEP / TP / DTP"
    return backend_rejects(shape, backend, moe_kernel)


def worker_shapes(is_moe: bool, gpu_budget: int, backend: str, moe_kernel: str | None = None) -> list[Shape]:
    """Every legal worker shape, sorted by (GPUs, sort key)."""
    ladder = [g for g in GPU_LADDER if g <= gpu_budget]
    shapes: list[Shape] = []
    if not is_moe:
        shapes = [Shape(tp=g) for g in ladder]
    else:
        for g in ladder:
            for tp, dp, mtp, mep in product(MOE_SCAN, repeat=4):
                if tp * dp != g or mtp * mep != g:
                    continue
                shape = Shape(tp=tp, attention_dp=dp, moe_tp=mtp, moe_ep=mep)
                if moe_pattern(shape) is not None:
                    shapes.append(shape)
    kept = [s for s in shapes if backend_rejects(s, backend, moe_kernel) is None]
    return sorted(set(kept), key=lambda s: (s.gpus, s.sort_key()))


def role_configs(shapes: Iterable[Shape], gpu_budget: int, min_gpu_budget: int | None = None) -> list[RoleConfig]:
    """Each shape with r = 1 … ⌊budget / g⌋ replicas, keeping g × r ≥ min_gpu_budget."""
    out: list[RoleConfig] = []
    for shape in shapes:
        for r in range(1, gpu_budget // shape.gpus + 1):
            if min_gpu_budget is not None and shape.gpus * r < min_gpu_budget:
                continue
            out.append(RoleConfig(shape, r))
    return out


def agg_configs(shapes: Iterable[Shape], gpu_budget: int, min_gpu_budget: int | None = None) -> list[ParallelConfig]:
    """Aggregated deployments: one role, replicas filling [min_gpu_budget, gpu_budget]."""
    return sort_configs(ParallelConfig("agg", agg=rc) for rc in role_configs(shapes, gpu_budget, min_gpu_budget))


def disagg_configs(prefill_shapes: Sequence[Shape], decode_shapes: Sequence[Shape], gpu_budget: int,
                   min_gpu_budget: int | None = None) -> list[ParallelConfig]:
    """Every prefill role × decode role with total GPUs in [min_gpu_budget, gpu_budget].

    Roles are enumerated without the min bound; a role larger than the budget minus the smallest
    footprint of the other role can never pair, so it is pruned first (it only saves work).
    """
    prefill = role_configs(prefill_shapes, gpu_budget)
    decode = role_configs(decode_shapes, gpu_budget)
    if not prefill or not decode:
        return []
    min_p, min_d = min(r.gpus for r in prefill), min(r.gpus for r in decode)
    prefill = [r for r in prefill if r.gpus <= gpu_budget - min_d]
    decode = [r for r in decode if r.gpus <= gpu_budget - min_p]
    out = []
    for p in prefill:
        for d in decode:
            total = p.gpus + d.gpus
            if total > gpu_budget or (min_gpu_budget is not None and total < min_gpu_budget):
                continue
            out.append(ParallelConfig("disagg", prefill=p, decode=d))
    return sort_configs(out)


def configs_from_shapes(mode: Mode, shapes: Sequence[Shape], gpu_budget: int,
                        min_gpu_budget: int | None = None) -> list[ParallelConfig]:
    """Steps 6–7 for either mode, the same shapes serving both disagg roles."""
    if mode == "agg":
        return agg_configs(shapes, gpu_budget, min_gpu_budget)
    return disagg_configs(shapes, shapes, gpu_budget, min_gpu_budget)


def config_rejection(config: ParallelConfig, is_moe: bool, backend: str, gpu_budget: int,
                     min_gpu_budget: int | None = None) -> str | None:
    """Why a (pinned) config is not in the enumerated list for this backend, ignoring KV (None = it is)."""
    for role, rc in config.roles.items():
        why = shape_rejection(rc.shape, is_moe, backend, gpu_budget)
        if why:
            return why if config.mode == "agg" else f"{role}: {why}"
    used = config.used_gpus
    if used > gpu_budget:
        return f"used_gpus {used} exceeds gpu_budget {gpu_budget}"
    if min_gpu_budget is not None and used < min_gpu_budget:
        return f"used_gpus {used} is below min_gpu_budget {min_gpu_budget}"
    return None


def sort_configs(configs: Iterable[ParallelConfig]) -> list[ParallelConfig]:
    """The deterministic order used everywhere: by used GPUs, then the tie-break key."""
    return sorted(set(configs), key=lambda c: (c.used_gpus, c.sort_key()))


def strategies(configs: Iterable[ParallelConfig]) -> list[str]:
    """Distinct shape strategies present (tp / tep / dep / dtp), in a fixed order."""
    order = {"tp": 0, "tep": 1, "dep": 2, "dtp": 3, "mixed": 4}
    return sorted({s.strategy for c in configs for s in c.shapes}, key=lambda s: order.get(s, 9))


__all__ = [
    "GPU_LADDER", "MOE_SCAN", "MOE_PATTERNS", "moe_pattern", "backend_rejects", "shape_rejection",
    "worker_shapes", "role_configs", "agg_configs", "disagg_configs", "configs_from_shapes",
    "config_rejection", "sort_configs", "strategies",
]

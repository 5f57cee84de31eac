"""The one candidate of a fully pinned config: what ``spica evaluate`` replays, and ``spica calibrate`` and the
accuracy benchmark replay for a measured row, so that all three take the same path."""
from __future__ import annotations

from pathlib import Path

from spica_core.config.model import SmartSearchConfig
from spica_core.errors import SpicaError
from spica_core.evaluate.calibration import Calibration
from spica_core.evaluate.evaluation import EvalRequest


def unpinned_knobs(config: SmartSearchConfig) -> list[str]:
    """Knobs that apply to the single candidate (after pruning) but still list several values."""
    from spica_core.config.pruning import branch_knob_choices
    from spica_core.config.policies import scaling_flags

    space = config.search_space
    multi: list[str] = []
    if len(space.deployment_mode) > 1:
        multi.append(f"deployment_mode ({len(space.deployment_mode)} values: {space.deployment_mode})")
    if len(space.parallel_configs) != 1:
        multi.append(f"parallel_configs ({len(space.parallel_configs) or 'none: derived'}; give exactly one entry)")
    for mode in space.deployment_mode:
        knobs, ranges = branch_knob_choices(config, mode, space.backend)
        for name, values in knobs.items():
            entry = f"{name} ({len(values)} values: {values})"
            if len(values) > 1 and entry not in multi:
                multi.append(entry)
        for name in ranges:
            multi.append(f"workload.{name} (a range {config.workload.kv_load_ratio}; give one ratio)")
    policies = space.planner_scaling_policy
    if len(policies) == 1 and scaling_flags(policies[0])[0] and len(space.load_predictor_candidates) > 1:
        multi.append(f"load_predictor_candidates ({len(space.load_predictor_candidates)} values: "
                     f"{space.load_predictor_candidates})")
    return multi


def pinned_request(config: SmartSearchConfig, base_dir: str | Path, calibration: Calibration | None = None,
                   eval_id: str = "evaluate") -> EvalRequest:
    """The single candidate of a fully pinned config as an EvalRequest (under ``calibration``, if any); its trace
    path resolves against ``base_dir``, the config file's folder. Raises SpicaError naming the knobs that still
    have several values."""
    from spica_core.config.knobs import decode_composite
    from spica_core.deployment import Candidate
    from spica_core.space import over_inventory
    from spica_core.space.parallel import ParallelConfig

    multi = unpinned_knobs(config)
    if multi:
        raise SpicaError("spica evaluate needs a fully pinned config; these knobs still have several values:\n  - "
                         + "\n  - ".join(multi))
    space = config.search_space
    mode = space.deployment_mode[0]
    pc = ParallelConfig.from_dict(mode, space.parallel_configs[0].model_dump())
    predictor = None
    flags = decode_composite("planner_scaling_policy", space.planner_scaling_policy[0])
    if flags["enable_throughput_scaling"]:
        predictor = {int(flags["throughput_adjustment_interval_seconds"]): space.load_predictor_candidates[0]}
    candidate = Candidate.unroll(space, {"deployment_mode": mode}, pc, predictor)
    over = over_inventory(pc, [candidate.sku(role) for role in pc.roles], space.gpu_inventory)
    if over:
        raise SpicaError("search_space.gpu_inventory: the pinned deployment needs "
                         + ", ".join(f"{n} × {sku}" for sku, n in over.items())
                         + f", more than the inventory {dict(space.gpu_inventory or {})} holds")
    trace = config.trace_file(base_dir)
    return EvalRequest.from_config(config, candidate, trace_file=str(trace) if trace else None, eval_id=eval_id,
                                   calibration=calibration)


__all__ = ["pinned_request", "unpinned_knobs"]

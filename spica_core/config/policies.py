"""Which planner scaling policies a goal can use (by the goal → planner target mapping), applied before the search."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from spica_core.config.knobs import decode_composite
from spica_core.config.goal import GOODPUT_TARGETS, OptimizationGoal, OptimizationTarget
from spica_core.config.model import SmartSearchConfig
from spica_core.errors import SpicaError

PolicyEntry = str | dict[str, Any]


def planner_target(goal: OptimizationGoal) -> str:
    """The planner's optimization_target for a sweep goal."""
    if goal.target is OptimizationTarget.e2e_latency:
        return "latency"
    if goal.target in GOODPUT_TARGETS or goal.target is OptimizationTarget.min_gpus:
        return "sla"   # scale to hold the SLA
    if goal.target is OptimizationTarget.cost_per_mtok and goal.sla is not None:
        return "sla"   # tokens within the SLA are what is paid for: hold it with as few GPUs as it takes
    return "throughput"


def scaling_flags(entry: PolicyEntry) -> tuple[bool, bool]:
    """(enable_throughput_scaling, enable_load_scaling) of a preset id or dict entry."""
    fields = decode_composite("planner_scaling_policy", entry)
    return bool(fields["enable_throughput_scaling"]), bool(fields["enable_load_scaling"])


def filter_scaling_policies(policies: list[PolicyEntry], allow_throughput: bool
                            ) -> tuple[list[PolicyEntry], list[PolicyEntry]]:
    """Split into (kept, dropped); throughput-enabled entries are dropped unless allowed."""
    kept: list[PolicyEntry] = []
    dropped: list[PolicyEntry] = []
    for entry in policies:
        (dropped if scaling_flags(entry)[0] and not allow_throughput else kept).append(entry)
    return kept, dropped


def throughput_intervals(policies: list[PolicyEntry]) -> list[int]:
    """Sorted distinct throughput intervals of throughput-enabled entries; [] ⇒ no predictor sweep."""
    out = set()
    for entry in policies:
        fields = decode_composite("planner_scaling_policy", entry)
        interval = fields["throughput_adjustment_interval_seconds"]
        if fields["enable_throughput_scaling"] and interval is not None:
            out.add(int(interval))
    return sorted(out)


@dataclass(frozen=True)
class PolicyFilter:
    kept: list[PolicyEntry]
    dropped: list[PolicyEntry]
    reason: str


def filter_for_goal(config: SmartSearchConfig) -> PolicyFilter:
    """Keep the scaling policies the goal's planner target can run (throughput scaling only under the sla target,
    and no scaling under it without ttft_ms and itl_ms); raises when no policy survives, naming the field to
    change."""
    goal = config.goal
    target = planner_target(goal)
    policies = list(config.search_space.planner_scaling_policy)
    kept, dropped = filter_scaling_policies(policies, allow_throughput=(target == "sla"))
    reason = ""
    if dropped:
        reason = (f"throughput-scaling policies need a goodput, min_gpus or (with an SLA) cost_per_mtok goal "
                  "(planner target 'sla'); "
                  f"goal {goal.target.value} maps to planner target '{target}'")
    sla = goal.sla
    missing = [] if sla is None else [name for name in ("ttft_ms", "itl_ms") if getattr(sla, name) is None]
    if target == "sla" and missing:
        scaling = [p for p in kept if any(scaling_flags(p))]
        kept = [p for p in kept if not any(scaling_flags(p))]
        dropped += scaling
        if scaling:
            reason = (f"the planner's SLA target needs ttft_ms and itl_ms, and goal.sla has no "
                      f"{' or '.join(missing)}; only static policies are kept")
    if not kept:
        raise SpicaError(f"search_space.planner_scaling_policy: no policy is usable with goal "
                         f"{goal.target.value} ({reason}); add 'disabled' or a compatible policy")
    return PolicyFilter(kept, dropped, reason)


def with_policies(config: SmartSearchConfig, kept: list[PolicyEntry]) -> SmartSearchConfig:
    """A copy of the config whose planner_scaling_policy is the kept list."""
    space = config.search_space.model_copy(update={"planner_scaling_policy": list(kept)})
    return config.model_copy(update={"search_space": space})


__all__ = ["planner_target", "scaling_flags", "filter_scaling_policies", "throughput_intervals",
           "filter_for_goal", "with_policies", "PolicyFilter"]

"""Dead-dimension pruning: which knobs one deployment mode actually searches.

A knob that cannot change the candidate (router weights under round robin, planner details
without a scaling policy, the other mode's engine knobs) is never a study dimension.
"""
from __future__ import annotations

from typing import Any, Sequence

from spica_core.config.knobs import CACHE_HIT_KNOBS, ENGINE_KNOBS, KV_ROUTER_KNOBS, PLANNER_DETAIL_KNOBS
from spica_core.config.model import SmartSearchConfig
from spica_core.config.policies import scaling_flags
from spica_core.config.search_space import sku_field


def branch_knob_choices(config: SmartSearchConfig, mode: str, backends: Sequence[str]
                        ) -> tuple[dict[str, list[Any]], dict[str, tuple[float, float]]]:
    """The knobs this branch searches (with their choices), and its float ranges."""
    ss = config.search_space
    knobs: dict[str, list[Any]] = {"backend": list(backends)}
    knobs.update({sku_field(mode, role): skus for role, skus in ss.role_skus(mode).items()})   # each role's GPU types
    for name in ENGINE_KNOBS[mode]:                                   # rule 4
        knobs[name] = list(getattr(ss, name))
    knobs["router_mode"] = list(ss.router_mode)
    if set(ss.router_mode) != {"round_robin"}:                        # rule 1
        for name in KV_ROUTER_KNOBS:
            knobs[name] = list(getattr(ss, name))
        if ss.num_g2_blocks > 0:                                      # rule 2
            for name in CACHE_HIT_KNOBS:
                knobs[name] = list(getattr(ss, name))
    policies = list(ss.planner_scaling_policy)
    knobs["planner_scaling_policy"] = policies
    if any(any(scaling_flags(entry)) for entry in policies):         # rule 3
        for name in PLANNER_DETAIL_KNOBS:
            knobs[name] = list(getattr(ss, name))
    ranges: dict[str, tuple[float, float]] = {}
    kv_range = config.workload.kv_load_range                          # rule 6
    if kv_range is not None:
        ranges["kv_load_ratio"] = (float(kv_range[0]), float(kv_range[1]))
    elif config.workload.kv_load_ratio is not None:
        knobs["kv_load_ratio"] = [float(config.workload.kv_load_ratio)]
    return knobs, ranges

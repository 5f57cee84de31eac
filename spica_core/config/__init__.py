"""The validate stage: the config model, the knob tables, goal policies and dead-dimension pruning.

The names below are imported on first use (PEP 562), so importing one submodule (say
``spica_core.config.issues``) does not load the others and their dependencies.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from spica_core.config.lazy import lazy_names

_FROM: dict[str, str] = {
    **dict.fromkeys(("issues_from",), "issues"),
    **dict.fromkeys((
        "BACKENDS", "COMPOSITE_PRESETS", "decode_composite", "DEFAULT_KV_CACHE_DTYPE", "ENGINE_KNOBS", "entry_label",
        "INT_KNOBS", "KV_ROUTER_KNOBS", "PREDICTOR_FAMILIES", "predictor_fields",
    ), "knobs"),
    **dict.fromkeys(("SmartSearchConfig",), "model"),
    **dict.fromkeys(("DisaggParallel", "ParallelShape", "roles_of", "SearchSpace", "sku_field"), "search_space"),
    **dict.fromkeys(("Workload",), "workload"),
    **dict.fromkeys((
        "GOODPUT_TARGETS", "MINIMIZED_TARGETS", "OptimizationGoal", "OptimizationTarget", "SLATarget",
    ), "goal"),
    **dict.fromkeys((
        "CLUSTER_FORMS", "parse_cluster_address", "SweepConfig", "SweepPolicy", "VizierAlgorithm",
    ), "sweep"),
    **dict.fromkeys((
        "filter_for_goal", "filter_scaling_policies", "planner_target", "PolicyEntry", "PolicyFilter",
        "scaling_flags", "throughput_intervals", "with_policies",
    ), "policies"),
    **dict.fromkeys(("branch_knob_choices",), "pruning"),
    **dict.fromkeys(("describe", "searched_knobs"), "describe"),
    **dict.fromkeys(("check_trace", "read_trace", "TRACE_BLOCK_SIZE", "trace_lines", "TraceSummary"), "trace"),
}


__getattr__, __dir__ = lazy_names(__name__, _FROM)


if TYPE_CHECKING:  # what type checkers and editors see
    from spica_core.config.issues import issues_from
    from spica_core.config.knobs import (
        BACKENDS, COMPOSITE_PRESETS, decode_composite, DEFAULT_KV_CACHE_DTYPE, ENGINE_KNOBS, entry_label, INT_KNOBS,
        KV_ROUTER_KNOBS, PREDICTOR_FAMILIES, predictor_fields
    )
    from spica_core.config.goal import (
        GOODPUT_TARGETS, MINIMIZED_TARGETS, OptimizationGoal, OptimizationTarget, SLATarget
    )
    from spica_core.config.model import SmartSearchConfig
    from spica_core.config.search_space import DisaggParallel, ParallelShape, roles_of, SearchSpace, sku_field
    from spica_core.config.sweep import CLUSTER_FORMS, parse_cluster_address, SweepConfig, SweepPolicy, VizierAlgorithm
    from spica_core.config.workload import Workload
    from spica_core.config.policies import (
        filter_for_goal, filter_scaling_policies, planner_target, PolicyEntry, PolicyFilter, scaling_flags,
        throughput_intervals, with_policies
    )
    from spica_core.config.pruning import branch_knob_choices
    from spica_core.config.describe import describe, searched_knobs
    from spica_core.config.trace import check_trace, read_trace, TRACE_BLOCK_SIZE, trace_lines, TraceSummary

__all__ = [
    "BACKENDS", "lazy_names", "branch_knob_choices", "check_trace", "CLUSTER_FORMS", "COMPOSITE_PRESETS",
    "decode_composite", "DEFAULT_KV_CACHE_DTYPE", "describe", "DisaggParallel", "ENGINE_KNOBS", "entry_label",
    "filter_for_goal", "filter_scaling_policies", "GOODPUT_TARGETS", "INT_KNOBS", "issues_from",
    "KV_ROUTER_KNOBS", "MINIMIZED_TARGETS", "OptimizationGoal", "OptimizationTarget", "ParallelShape",
    "parse_cluster_address", "planner_target", "PolicyEntry", "PolicyFilter", "PREDICTOR_FAMILIES", "roles_of",
    "sku_field",
    "predictor_fields", "read_trace", "scaling_flags", "searched_knobs", "SearchSpace", "SLATarget",
    "SmartSearchConfig", "SweepConfig", "SweepPolicy", "throughput_intervals", "TRACE_BLOCK_SIZE",
    "trace_lines", "TraceSummary", "VizierAlgorithm", "with_policies", "Workload",
]

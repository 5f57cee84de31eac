"""The validate stage (reference §1–§5): the config model, the knob tables, goal policies and §2.11 pruning.

The names below are imported on first use (PEP 562), so importing one submodule (say
``spica_core.config.issues``) does not load the others and their dependencies.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from spica_core.config.lazy import lazy_names

_FROM: dict[str, str] = {
    **dict.fromkeys(("issues_from",), "issues"),
    **dict.fromkeys((
        "COMPOSITE_PRESETS", "ENGINE_KNOBS", "INT_KNOBS", "KV_ROUTER_KNOBS", "PREDICTOR_FAMILIES",
        "decode_composite", "entry_label", "predictor_fields",
    ), "knobs"),
    **dict.fromkeys((
        "GOODPUT_TARGETS", "MINIMIZED_TARGETS", "DisaggParallel", "OptimizationGoal", "OptimizationTarget",
        "ParallelShape", "SearchSpace", "SLATarget", "SmartSearchConfig", "SweepConfig", "SweepPolicy",
        "VizierAlgorithm", "Workload",
    ), "model"),
    **dict.fromkeys((
        "PolicyEntry", "PolicyFilter", "filter_for_goal", "filter_scaling_policies", "planner_target",
        "scaling_flags", "throughput_intervals", "with_policies",
    ), "policies"),
    **dict.fromkeys(("branch_knob_choices",), "pruning"),
    **dict.fromkeys(("describe", "searched_knobs"), "summary"),
    **dict.fromkeys(("DEFAULT_KV_CACHE_DTYPE",), "knobs"),
    **dict.fromkeys(("CLUSTER_FORMS", "parse_cluster_address"), "model"),
    **dict.fromkeys(("TRACE_BLOCK_SIZE", "TraceSummary", "check_trace", "read_trace", "trace_lines"), "trace"),
}


__getattr__, __dir__ = lazy_names(__name__, _FROM)


if TYPE_CHECKING:  # what type checkers and editors see
    from spica_core.config.issues import issues_from
    from spica_core.config.knobs import (
        COMPOSITE_PRESETS, ENGINE_KNOBS, INT_KNOBS, KV_ROUTER_KNOBS, PREDICTOR_FAMILIES, decode_composite,
        entry_label, predictor_fields
    )
    from spica_core.config.model import (
        GOODPUT_TARGETS, MINIMIZED_TARGETS, DisaggParallel, OptimizationGoal, OptimizationTarget,
        ParallelShape, SearchSpace, SLATarget, SmartSearchConfig, SweepConfig, SweepPolicy, VizierAlgorithm,
        Workload
    )
    from spica_core.config.policies import (
        PolicyEntry, PolicyFilter, filter_for_goal, filter_scaling_policies, planner_target, scaling_flags,
        throughput_intervals, with_policies
    )
    from spica_core.config.pruning import branch_knob_choices
    from spica_core.config.summary import describe, searched_knobs
    from spica_core.config.knobs import DEFAULT_KV_CACHE_DTYPE
    from spica_core.config.model import CLUSTER_FORMS, parse_cluster_address
    from spica_core.config.trace import TRACE_BLOCK_SIZE, TraceSummary, check_trace, read_trace, trace_lines

__all__ = [
    "COMPOSITE_PRESETS", "ENGINE_KNOBS", "INT_KNOBS", "KV_ROUTER_KNOBS", "PREDICTOR_FAMILIES",
    "decode_composite", "entry_label", "predictor_fields", "GOODPUT_TARGETS", "MINIMIZED_TARGETS",
    "DisaggParallel", "OptimizationGoal", "OptimizationTarget", "ParallelShape", "SearchSpace", "SLATarget",
    "SmartSearchConfig", "SweepConfig", "SweepPolicy", "VizierAlgorithm", "Workload", "issues_from",
    "PolicyEntry", "PolicyFilter", "filter_for_goal", "filter_scaling_policies", "planner_target",
    "scaling_flags", "throughput_intervals", "with_policies", "branch_knob_choices", "describe",
    "searched_knobs",
    "CLUSTER_FORMS", "DEFAULT_KV_CACHE_DTYPE", "TRACE_BLOCK_SIZE", "TraceSummary", "check_trace", "lazy_names",
    "parse_cluster_address", "read_trace", "trace_lines",
]

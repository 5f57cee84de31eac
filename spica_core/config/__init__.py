"""The validate stage (reference §1–§5): the config model, the knob tables, goal policies and §2.11 pruning."""
from spica_core.config.issues import issues_from
from spica_core.config.knobs import (
    COMPOSITE_PRESETS,
    ENGINE_KNOBS,
    INT_KNOBS,
    KV_ROUTER_KNOBS,
    PREDICTOR_FAMILIES,
    decode_composite,
    entry_label,
    predictor_fields,
)
from spica_core.config.model import (
    GOODPUT_TARGETS,
    MINIMIZED_TARGETS,
    DisaggParallel,
    OptimizationGoal,
    OptimizationTarget,
    ParallelShape,
    SearchSpace,
    SLATarget,
    SmartSearchConfig,
    SweepConfig,
    SweepPolicy,
    VizierAlgorithm,
    Workload,
)
from spica_core.config.policies import (
    PolicyEntry,
    PolicyFilter,
    filter_for_goal,
    filter_scaling_policies,
    planner_target,
    scaling_flags,
    throughput_intervals,
    with_policies,
)
from spica_core.config.pruning import branch_knob_choices
from spica_core.config.summary import describe, searched_knobs

__all__ = [
    "COMPOSITE_PRESETS", "ENGINE_KNOBS", "INT_KNOBS", "KV_ROUTER_KNOBS", "PREDICTOR_FAMILIES",
    "decode_composite", "entry_label", "predictor_fields",
    "GOODPUT_TARGETS", "MINIMIZED_TARGETS", "DisaggParallel", "OptimizationGoal", "OptimizationTarget",
    "ParallelShape", "SearchSpace", "SLATarget", "SmartSearchConfig", "SweepConfig", "SweepPolicy",
    "VizierAlgorithm", "Workload", "issues_from",
    "PolicyEntry", "PolicyFilter", "filter_for_goal", "filter_scaling_policies", "planner_target", "scaling_flags",
    "throughput_intervals", "with_policies",
    "branch_knob_choices", "describe", "searched_knobs",
]

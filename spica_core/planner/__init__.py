"""The planner in the loop: Dynamo's planner rules as a replay scaling policy."""
from spica_core.planner.budget import Budget
from spica_core.planner.estimates import PassModel
from spica_core.planner.policy import PlannerPolicy, make_policy, merge_traffic
from spica_core.planner.settings import (
    PLANNER_CONFIG_KEYS, PlannerSettings, RoleCapability, planner_config, planner_config_problems,
)
from spica_core.planner.throughput import PredictorFactory

__all__ = ["PlannerSettings", "RoleCapability", "PlannerPolicy", "make_policy", "merge_traffic", "PassModel", "Budget",
           "PredictorFactory", "PLANNER_CONFIG_KEYS", "planner_config", "planner_config_problems"]

"""The deployment space: model and GPU facts, legal parallel configs, KV capacity, branches and projection.

The names below are imported on first use (PEP 562), so importing one submodule (say
``spica_core.space.branches``) does not load the others and their dependencies.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from spica_core.config.lazy import lazy_names

_FROM: dict[str, str] = {
    **dict.fromkeys((
        "BackendSpace", "Branch", "BranchSet", "config_strategy", "Dropped", "enumerate_branches",
        "estimate_shapes", "kv_filter", "legal_space", "LegalSpace", "over_inventory", "pinned_configs", "Variant",
        "VARIANT_KNOBS",
    ), "branches"),
    **dict.fromkeys(("config_rejection", "configs_from_shapes", "sort_configs", "worker_shapes"), "enumeration"),
    **dict.fromkeys((
        "aic_version", "backend_version", "bundled_models", "cache_dir", "known_systems", "model_facts", "ModelFacts",
        "quiet_aic", "shared_backend_version",
        "system_facts", "SystemFacts",
    ), "facts"),
    **dict.fromkeys(("kv_tokens_per_rank", "max_seq_len", "shape_kv", "ShapeKV"), "kv"),
    **dict.fromkeys(("Mode", "ParallelConfig", "RoleConfig", "Shape"), "parallel"),
    **dict.fromkeys(("Param",), "params"),
    **dict.fromkeys(("check_quantization", "Precision", "precision_of", "precision_problem", "WEIGHT_BITS"),
                    "precision"),
    **dict.fromkeys((
        "EngineShape", "kv_blocks_per_rank", "model_config", "ops_power", "power_grid", "profile_path",
        "step_engine", "step_power", "StepTimes", "timing_model", "timing_shape",
    ), "profiles"),
    **dict.fromkeys(("config_features", "has_moe_shape", "latent_params", "ProjectionRecord"), "projection"),
}


__getattr__, __dir__ = lazy_names(__name__, _FROM)


if TYPE_CHECKING:  # what type checkers and editors see
    from spica_core.space.branches import (
        BackendSpace, Branch, BranchSet, config_strategy, Dropped, enumerate_branches, estimate_shapes,
        kv_filter, legal_space, LegalSpace, over_inventory, pinned_configs, Variant, VARIANT_KNOBS
    )
    from spica_core.space.enumeration import config_rejection, configs_from_shapes, sort_configs, worker_shapes
    from spica_core.space.facts import (
        aic_version, backend_version, bundled_models, cache_dir, known_systems, model_facts, ModelFacts, quiet_aic,
        shared_backend_version, system_facts,
        SystemFacts
    )
    from spica_core.space.kv import kv_tokens_per_rank, max_seq_len, shape_kv, ShapeKV
    from spica_core.space.parallel import Mode, ParallelConfig, RoleConfig, Shape
    from spica_core.space.params import Param
    from spica_core.space.precision import check_quantization, Precision, precision_of, precision_problem, WEIGHT_BITS
    from spica_core.space.profiles import (
        EngineShape, kv_blocks_per_rank, model_config, ops_power, power_grid, profile_path, step_engine, step_power,
        StepTimes, timing_model, timing_shape
    )
    from spica_core.space.projection import config_features, has_moe_shape, latent_params, ProjectionRecord

__all__ = [
    "aic_version", "backend_version", "BackendSpace", "Branch", "BranchSet", "cache_dir", "check_quantization",
    "config_features", "config_rejection", "config_strategy", "configs_from_shapes", "Dropped", "EngineShape",
    "enumerate_branches", "estimate_shapes", "has_moe_shape", "kv_blocks_per_rank", "kv_filter",
    "kv_tokens_per_rank", "latent_params", "legal_space", "LegalSpace", "max_seq_len", "Mode", "model_config",
    "model_facts", "ModelFacts", "ParallelConfig", "Param", "pinned_configs", "Precision", "precision_of",
    "profile_path", "ProjectionRecord", "quiet_aic", "RoleConfig", "Shape", "shape_kv", "ShapeKV",
    "sort_configs", "step_engine", "StepTimes", "system_facts", "SystemFacts", "timing_model", "timing_shape",
    "Variant", "VARIANT_KNOBS", "worker_shapes", "bundled_models", "precision_problem", "WEIGHT_BITS",
    "known_systems", "ops_power", "power_grid", "step_power", "shared_backend_version", "over_inventory",
]

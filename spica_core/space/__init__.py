"""The deployment space: model and GPU facts, legal parallel configs, KV capacity, branches and projection.

The names below are imported on first use (PEP 562), so importing one submodule (say
``spica_core.space.branches``) does not load the others and their dependencies.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from spica_core.config.lazy import lazy_names

_FROM: dict[str, str] = {
    **dict.fromkeys((
        "BackendSpace", "Branch", "BranchSet", "Dropped", "LegalSpace", "enumerate_branches",
        "estimate_shapes", "kv_filter", "legal_space", "pinned_configs",
    ), "branches"),
    **dict.fromkeys(("config_rejection", "configs_from_shapes", "sort_configs", "worker_shapes"), "enumeration"),
    **dict.fromkeys(("ModelFacts", "SystemFacts", "backend_version", "model_facts", "system_facts"), "facts"),
    **dict.fromkeys(("ShapeKV", "kv_tokens_per_rank", "max_seq_len", "shape_kv"), "kv"),
    **dict.fromkeys(("Mode", "ParallelConfig", "RoleConfig", "Shape"), "parallel"),
    **dict.fromkeys(("Param",), "params"),
    **dict.fromkeys(("EngineShape", "StepTimes", "kv_blocks_per_rank", "profile_path", "step_engine", "timing_model",
                     "timing_shape"), "profiles"),
    **dict.fromkeys(("ProjectionRecord", "latent_params"), "projection"),
    **dict.fromkeys(("VARIANT_KNOBS", "Variant", "config_strategy"), "branches"),
    **dict.fromkeys(("aic_version", "cache_dir", "quiet_aic"), "facts"),
    **dict.fromkeys(("Precision", "check_quantization", "precision_of"), "precision"),
    **dict.fromkeys(("model_config",), "profiles"),
    **dict.fromkeys(("config_features", "has_moe_shape"), "projection"),
}


__getattr__, __dir__ = lazy_names(__name__, _FROM)


if TYPE_CHECKING:  # what type checkers and editors see
    from spica_core.space.branches import (
        BackendSpace, Branch, BranchSet, Dropped, LegalSpace, enumerate_branches, estimate_shapes,
        kv_filter, legal_space, pinned_configs
    )
    from spica_core.space.enumeration import config_rejection, configs_from_shapes, sort_configs, worker_shapes
    from spica_core.space.facts import ModelFacts, SystemFacts, backend_version, model_facts, system_facts
    from spica_core.space.kv import ShapeKV, kv_tokens_per_rank, max_seq_len, shape_kv
    from spica_core.space.parallel import Mode, ParallelConfig, RoleConfig, Shape
    from spica_core.space.params import Param
    from spica_core.space.profiles import (
        EngineShape, StepTimes, kv_blocks_per_rank, profile_path, step_engine, timing_model, timing_shape
    )
    from spica_core.space.projection import ProjectionRecord, latent_params
    from spica_core.space.branches import VARIANT_KNOBS, Variant, config_strategy
    from spica_core.space.facts import aic_version, cache_dir, quiet_aic
    from spica_core.space.precision import Precision, check_quantization, precision_of
    from spica_core.space.profiles import model_config
    from spica_core.space.projection import config_features, has_moe_shape

__all__ = [
    "BackendSpace", "Branch", "BranchSet", "Dropped", "EngineShape", "LegalSpace", "Mode", "ModelFacts", "Param",
    "ParallelConfig", "ProjectionRecord", "RoleConfig", "Shape", "ShapeKV", "SystemFacts", "backend_version",
    "config_rejection", "configs_from_shapes", "enumerate_branches", "estimate_shapes", "kv_filter",
    "kv_tokens_per_rank", "latent_params", "legal_space", "max_seq_len", "model_facts", "pinned_configs",
    "shape_kv", "sort_configs", "system_facts", "worker_shapes", "StepTimes", "kv_blocks_per_rank", "profile_path",
    "step_engine", "timing_model", "timing_shape",
    "Precision", "VARIANT_KNOBS", "Variant", "aic_version", "cache_dir", "check_quantization",
    "config_features", "config_strategy", "has_moe_shape", "model_config", "precision_of", "quiet_aic",
]

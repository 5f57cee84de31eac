"""The deployment space: model and GPU facts, legal parallel configs, KV capacity, branches and projection."""
from spica_core.space.branches import (
    BackendSpace, Branch, BranchSet, Dropped, LegalSpace, enumerate_branches, estimate_shapes, kv_filter,
    legal_space, pinned_configs,
)
from spica_core.space.enumeration import config_rejection, configs_from_shapes, sort_configs, worker_shapes
from spica_core.space.facts import ModelFacts, SystemFacts, backend_version, model_facts, system_facts
from spica_core.space.kv import ShapeKV, kv_tokens_per_rank, max_seq_len, shape_kv
from spica_core.space.parallel import Mode, ParallelConfig, RoleConfig, Shape
from spica_core.space.params import Param
from spica_core.space.projection import ProjectionRecord, latent_params

__all__ = [
    "BackendSpace", "Branch", "BranchSet", "Dropped", "LegalSpace", "Mode", "ModelFacts", "Param", "ParallelConfig",
    "ProjectionRecord", "RoleConfig", "Shape", "ShapeKV", "SystemFacts", "backend_version", "config_rejection",
    "configs_from_shapes", "enumerate_branches", "estimate_shapes", "kv_filter", "kv_tokens_per_rank",
    "latent_params", "legal_space", "max_seq_len", "model_facts", "pinned_configs", "shape_kv",
    "sort_configs", "system_facts", "worker_shapes",
]

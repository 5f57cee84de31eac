"""Structured parallel features of a branch's configs: the inputs of the search's latent-projection model.

The optimizer never sees a config index. It sees a few latent features (GPU share of the
budget, engine sizes, attention / FFN modes) whose ranges come from the branch's pool, so the
kernel sees TP4 as near TP2. Suggestions are legal configs picked by number
(``spica_core/search/candidates.py``); each trial still records its features as a
:class:`ProjectionRecord` (requested = actual, distance 0).
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Sequence

from spica_core.space.branches import Branch
from spica_core.space.params import Param
from spica_core.space.parallel import Mode, ParallelConfig

ATTENTION_ORDER: tuple[str, ...] = ("tp", "dp")
FFN_ORDER: tuple[str, ...] = ("ep", "tp")
_DISTANCE_DIGITS = 12  # distances equal to this many digits are ties (float noise must not break them)


def _roles(mode: str) -> tuple[str, ...]:
    return ("agg",) if mode == "agg" else ("prefill", "decode")


def has_moe_shape(pool: Sequence[ParallelConfig]) -> bool:
    """FFN-mode features exist only when some shape shards experts (moe_tp × moe_ep > 1)."""
    return any(s.is_moe_sharded for c in pool for s in c.shapes)


def numeric_features(mode: str) -> tuple[str, ...]:
    """Numeric latent names of a mode, in declaration order."""
    if mode == "agg":
        return ("used_gpu_ratio", "agg_num_gpus_per_engine_target")
    return ("used_gpu_ratio", "prefill_gpu_share", "prefill_num_gpus_per_engine_target",
            "decode_num_gpus_per_engine_target")


def categorical_features(mode: str, with_ffn: bool) -> tuple[str, ...]:
    """Categorical latent names (attention modes, then FFN modes when the pool has MoE shapes)."""
    roles = _roles(mode)
    names = tuple(f"{r}_attention_mode" for r in roles)
    if with_ffn:
        names += tuple(f"{r}_ffn_mode" for r in roles)
    return names


def is_engine_size(name: str) -> bool:
    return name.endswith("_num_gpus_per_engine_target")


def config_features(config: ParallelConfig, gpu_budget: int, with_ffn: bool) -> dict[str, Any]:
    """A config's actual features (the same names the optimizer requests)."""
    total = config.used_gpus
    out: dict[str, Any] = {"used_gpu_ratio": total / gpu_budget}
    if config.mode == "disagg":
        assert config.prefill is not None
        out["prefill_gpu_share"] = config.prefill.gpus / total
    roles = config.roles
    for role, rc in roles.items():
        out[f"{role}_num_gpus_per_engine_target"] = rc.shape.gpus
    for role, rc in roles.items():
        out[f"{role}_attention_mode"] = rc.shape.attention_mode
    if with_ffn:
        for role, rc in roles.items():
            out[f"{role}_ffn_mode"] = rc.shape.ffn_mode
    return out


def geometric_centre(values: Sequence[float]) -> float:
    """The value closest in log space to √(min × max); a tie picks the smaller (e.g. {1,2,4,8,16} → 4)."""
    vals = sorted(set(values))
    target = (math.log2(vals[0]) + math.log2(vals[-1])) / 2
    return min(vals, key=lambda v: (round(abs(math.log2(v) - target), _DISTANCE_DIGITS), v))


@dataclass(frozen=True)
class Feature:
    """One latent feature of a branch: its values or range, and its default."""

    name: str
    kind: str                      # float | discrete | categorical
    values: tuple[Any, ...]        # discrete / categorical: present values (categorical in canonical order)
    bounds: tuple[float, float] | None
    default: Any

    @property
    def single_valued(self) -> bool:
        if self.kind == "float":
            assert self.bounds is not None
            return self.bounds[0] == self.bounds[1]
        return len(self.values) <= 1

    def param(self) -> Param:
        if self.kind == "float":
            return Param(self.name, "float", bounds=self.bounds, default=self.default)
        if self.kind == "discrete":
            return Param(self.name, "discrete", self.values, log_scale=True, default=self.default, is_int=True)
        return Param(self.name, "categorical", self.values, default=self.default)


def branch_features(branch: Branch) -> list[Feature]:
    """Every latent feature of the branch (single-valued ones included), built from the union pool."""
    pool = branch.pool
    with_ffn = has_moe_shape(pool)
    feats = [config_features(c, branch.gpu_budget, with_ffn) for c in pool]
    out: list[Feature] = []
    for name in numeric_features(branch.mode):
        vals = [f[name] for f in feats]
        if is_engine_size(name):
            present = tuple(sorted(set(vals)))
            out.append(Feature(name, "discrete", present, None, int(geometric_centre(present))))
        else:
            lo, hi = min(vals), max(vals)
            centre = 1.0 if name == "used_gpu_ratio" else 0.5
            out.append(Feature(name, "float", (), (lo, hi), min(max(centre, lo), hi)))
    for name in categorical_features(branch.mode, with_ffn):
        order = FFN_ORDER if name.endswith("_ffn_mode") else ATTENTION_ORDER
        present = tuple(v for v in order if any(f[name] == v for f in feats))
        out.append(Feature(name, "categorical", present, None, present[0]))
    return out


def latent_params(branch: Branch) -> list[Param]:
    """The study dimensions for parallelism: multi-valued features only; none for a one-config pool."""
    if len(branch.pool) <= 1:
        return []
    return [f.param() for f in branch_features(branch) if not f.single_valued]


@dataclass(frozen=True)
class ProjectionRecord:
    """What one projection did: recorded on the trial as ``spica_projection``."""

    requested_features: dict[str, Any]
    actual_features: dict[str, Any]
    distance: float
    mode_projected: bool
    config: ParallelConfig

    def to_dict(self) -> dict[str, Any]:
        return {
            "requested_features": self.requested_features,
            "actual_features": self.actual_features,
            "projection_distance": self.distance,
            "mode_projected": self.mode_projected,
            "actual_parallel_config": self.config.to_dict(),
        }

    def to_json(self) -> str:
        """The trial metadata value (sorted keys)."""
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_json(cls, text: str, mode: Mode) -> ProjectionRecord:
        d = json.loads(text)
        return cls(d["requested_features"], d["actual_features"], float(d["projection_distance"]),
                   bool(d["mode_projected"]), ParallelConfig.from_dict(mode, d["actual_parallel_config"]))


__all__ = [
    "Feature", "ProjectionRecord", "branch_features", "latent_params", "config_features", "geometric_centre",
    "has_moe_shape", "numeric_features", "categorical_features",
]

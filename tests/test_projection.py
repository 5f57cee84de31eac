"""§7.4: latent features, their ranges and defaults (the GP's inputs for parallel configs)."""
from __future__ import annotations

import pytest

from spica_core.space.branches import Branch, enumerate_branches
from spica_core.config.model import SmartSearchConfig
from spica_core.space.parallel import ParallelConfig, RoleConfig, Shape
from spica_core.space.projection import (
    branch_features,
    config_features,
    geometric_centre,
    latent_params,
)

TEP4, TEP8, TP8 = Shape(tp=4, moe_ep=4), Shape(tp=8, moe_ep=8), Shape(tp=8, moe_tp=8)
DEP8 = Shape(tp=1, attention_dp=8, moe_ep=8)


def disagg(p: Shape, pr: int, d: Shape, dr: int) -> ParallelConfig:
    return ParallelConfig("disagg", prefill=RoleConfig(p, pr), decode=RoleConfig(d, dr))


def agg(shape: Shape, r: int = 1) -> ParallelConfig:
    return ParallelConfig("agg", agg=RoleConfig(shape, r))


def branch(mode: str, supported: dict[ParallelConfig, tuple[str, ...]], budget: int = 32) -> Branch:
    pool = tuple(sorted(supported, key=lambda c: (c.used_gpus, c.sort_key())))
    backends = tuple(dict.fromkeys(b for bs in supported.values() for b in bs))
    return Branch(mode, backends, pool, supported, {"backend": list(backends)}, {}, budget)  # type: ignore[arg-type]


# the seed's example: A = prefill 2×4 + decode 1×8 (decode FFN ep); B = prefill 1×4 + decode 3×8 (decode FFN tp)
A = disagg(TEP4, 2, TEP8, 1)
B = disagg(TEP4, 1, TP8, 3)


def test_geometric_centre() -> None:
    assert geometric_centre([1, 2, 4, 8, 16]) == 4
    assert geometric_centre([1, 2, 4, 8]) == 2      # √8 ≈ 2.83: 2 and 4 are equally far in log space → smaller
    assert geometric_centre([8, 16]) == 8
    assert geometric_centre([1, 16]) == 1           # centre 4 is absent; 1 and 16 tie → smaller
    assert geometric_centre([2, 4, 16]) == 4        # centre √32 ≈ 5.7 (log 2.5): 4 is nearest
    assert geometric_centre([4]) == 4


def test_seed_example_features() -> None:
    a, b = config_features(A, 32, True), config_features(B, 32, True)
    assert (a["used_gpu_ratio"], a["prefill_gpu_share"]) == (0.5, 0.5)
    assert b["used_gpu_ratio"] == 0.875 and b["prefill_gpu_share"] == pytest.approx(0.143, abs=5e-4)
    assert (a["decode_ffn_mode"], b["decode_ffn_mode"]) == ("ep", "tp")
    assert a["prefill_num_gpus_per_engine_target"] == b["prefill_num_gpus_per_engine_target"] == 4


def test_latent_params_ranges_defaults_and_omissions() -> None:
    br = branch("disagg", {A: ("vllm",), B: ("vllm",)})
    params = {p.name: p for p in latent_params(br)}
    # engine sizes (4 and 8) and attention modes (tp) and prefill FFN (ep) are single-valued → omitted
    assert set(params) == {"used_gpu_ratio", "prefill_gpu_share", "decode_ffn_mode"}
    assert params["used_gpu_ratio"].bounds == (0.5, 0.875) and params["used_gpu_ratio"].default == 0.875
    assert params["prefill_gpu_share"].default == 0.5  # 0.5 inside [1/7, 0.5]
    assert params["decode_ffn_mode"].values == ("ep", "tp") and params["decode_ffn_mode"].default == "ep"
    defaults = {f.name: f.default for f in branch_features(br)}
    assert defaults["prefill_num_gpus_per_engine_target"] == 4 and defaults["decode_attention_mode"] == "tp"


def test_dense_pool_has_no_ffn_feature_and_real_ranges() -> None:
    config = SmartSearchConfig.from_dict({
        "search_space": {"model_name": "Qwen/Qwen3-32B", "hardware_sku": "h200_sxm", "gpu_budget": 16,
                         "deployment_mode": ["agg"]},
        "workload": {"isl": 1000, "osl": 100, "num_request_ratio": 2, "concurrency": 8}})
    a = enumerate_branches(config).branch("agg")
    params = {p.name: p for p in latent_params(a)}
    assert set(params) == {"used_gpu_ratio", "agg_num_gpus_per_engine_target"}
    size = params["agg_num_gpus_per_engine_target"]
    assert size.values == (1, 2, 4, 8, 16) and size.default == 4 and size.log_scale
    assert params["used_gpu_ratio"].bounds == (1 / 16, 1.0) and params["used_gpu_ratio"].default == 1.0
    assert all(not f.name.endswith("ffn_mode") for f in branch_features(a))


def test_one_config_pool_has_no_parallel_dimensions() -> None:
    assert latent_params(branch("agg", {agg(TEP8, 2): ("vllm",)})) == []
"""§7.4: latent features, ranges and defaults, and deterministic projection onto the pool."""
from __future__ import annotations

import json
from typing import Any

import pytest

from spica_core.space.branches import Branch, enumerate_branches
from spica_core.config.model import SmartSearchConfig
from spica_core.space.parallel import ParallelConfig, RoleConfig, Shape
from spica_core.space.projection import (
    branch_features,
    config_features,
    geometric_centre,
    latent_defaults,
    latent_params,
    project,
    study_params,
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


def test_seed_example_mode_match_beats_numeric_closeness() -> None:
    br = branch("disagg", {A: ("vllm",), B: ("vllm",)})
    request = {"used_gpu_ratio": 0.5, "prefill_gpu_share": 0.5, "prefill_num_gpus_per_engine_target": 4,
               "decode_num_gpus_per_engine_target": 8, "prefill_attention_mode": "tp",
               "decode_attention_mode": "tp", "prefill_ffn_mode": "ep", "decode_ffn_mode": "tp"}
    rec = project(br, "vllm", request)
    assert rec.config == B
    assert rec.actual_features["used_gpu_ratio"] == 0.875
    assert rec.actual_features["prefill_gpu_share"] == pytest.approx(0.143, abs=5e-4)
    assert (rec.config.prefill.replicas, rec.config.decode.replicas) == (1, 3)  # type: ignore[union-attr]
    assert rec.mode_projected is False  # B realises every requested mode
    # spans over the backend's pool: ratio 0.875 − 0.5, share 0.5 − 1/7; engine sizes have zero span
    assert rec.distance == pytest.approx(((0.875 - 0.5) / 0.375) ** 2 + ((1 / 7 - 0.5) / (0.5 - 1 / 7)) ** 2)
    assert rec.distance == pytest.approx(2.0)
    # with A's own modes the request lands on A at distance 0
    back = project(br, "vllm", {**request, "decode_ffn_mode": "ep"})
    assert back.config == A and back.distance == 0.0


def test_mode_fallback_is_recorded() -> None:
    br = branch("disagg", {A: ("vllm",), B: ("vllm",), disagg(TEP4, 1, DEP8, 1): ("vllm",)})
    # decode attention dp only exists with decode FFN ep: no config realises (dp, tp)
    rec = project(br, "vllm", {"decode_attention_mode": "dp", "decode_ffn_mode": "tp", "used_gpu_ratio": 0.875})
    # A mismatches twice; B (attention) and C (FFN) once each. B: ratio exact, share 1/7 vs the default
    # 0.5 → distance 1.0; C: ratio 0.375 → (0.5/0.5)² + share (1/3 − 0.5)/(0.5 − 1/7) squared ≈ 1.22
    assert rec.mode_projected is True
    assert rec.config == B and rec.distance == pytest.approx(1.0)


def test_backend_filter_never_changes_backend() -> None:
    br = branch("agg", {agg(TEP8): ("vllm", "sglang"), agg(DEP8): ("vllm",)})
    rec = project(br, "sglang", {"agg_attention_mode": "dp"})
    assert rec.config == agg(TEP8) and rec.mode_projected
    assert project(br, "vllm", {"agg_attention_mode": "dp"}).config == agg(DEP8)
    with pytest.raises(ValueError, match="not viable"):
        project(br, "trtllm", {})


def test_tie_break_is_the_lexicographic_shape_key() -> None:
    br = branch("agg", {agg(Shape(2), 4): ("vllm",), agg(Shape(4), 2): ("vllm",), agg(Shape(8)): ("vllm",)},
                budget=8)
    # log2 sizes 1, 2, 3 (span 2); request size 2.828 (log 1.5) is equidistant from 2 and 4
    rec = project(br, "vllm", {"agg_num_gpus_per_engine_target": 2 ** 1.5, "used_gpu_ratio": 1.0})
    assert rec.config == agg(Shape(2), 4)  # (tp 2, …) < (tp 4, …)
    assert rec.distance == pytest.approx((0.5 / 2) ** 2)


def test_span_is_over_the_selected_backends_configs() -> None:
    # union sizes 8 and 16; the sglang pool only has 8-GPU engines → the size feature has zero span there
    br = branch("agg", {agg(TEP8): ("sglang", "vllm"), agg(TEP8, 2): ("sglang", "vllm"),
                        agg(Shape(tp=16, moe_ep=16)): ("vllm",)})
    rec = project(br, "sglang", {"agg_num_gpus_per_engine_target": 16, "used_gpu_ratio": 0.25})
    assert rec.config == agg(TEP8) and rec.distance == 0.0  # 16 requested, but size contributes nothing


def test_latent_params_ranges_defaults_and_omissions() -> None:
    br = branch("disagg", {A: ("vllm",), B: ("vllm",)})
    params = {p.name: p for p in latent_params(br)}
    # engine sizes (4 and 8) and attention modes (tp) and prefill FFN (ep) are single-valued → omitted
    assert set(params) == {"used_gpu_ratio", "prefill_gpu_share", "decode_ffn_mode"}
    assert params["used_gpu_ratio"].bounds == (0.5, 0.875) and params["used_gpu_ratio"].default == 0.875
    assert params["prefill_gpu_share"].default == 0.5  # 0.5 inside [1/7, 0.5]
    assert params["decode_ffn_mode"].values == ("ep", "tp") and params["decode_ffn_mode"].default == "ep"
    defaults = latent_defaults(br)
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
    rec = project(a, "vllm", {"agg_num_gpus_per_engine_target": 4, "used_gpu_ratio": 0.5})
    assert rec.config == agg(Shape(4), 2)


def test_one_config_pool_bypasses_projection() -> None:
    br = branch("agg", {agg(TEP8, 2): ("vllm",)})
    assert latent_params(br) == []
    rec = project(br, "vllm", {})
    assert rec.bypassed and rec.config == agg(TEP8, 2) and rec.distance == 0.0 and not rec.mode_projected
    assert study_params(br) == []  # nothing to search: the study declares its constant guard itself


def test_projection_record_json() -> None:
    rec = project(branch("disagg", {A: ("vllm",), B: ("vllm",)}), "vllm", {"decode_ffn_mode": "tp"})
    data: dict[str, Any] = json.loads(rec.to_json())
    assert list(data) == sorted(data)
    assert set(data) == {"requested_features", "actual_features", "projection_distance", "mode_projected",
                         "actual_parallel_config"}
    assert data["actual_parallel_config"] == {"prefill": {"tp": 4, "attention_dp": 1, "moe_tp": 1, "moe_ep": 4,
                                                          "pp": 1, "replicas": 1},
                                              "decode": {"tp": 8, "attention_dp": 1, "moe_tp": 8, "moe_ep": 1,
                                                         "pp": 1, "replicas": 3}}
    assert data["requested_features"]["decode_ffn_mode"] == "tp"
    with pytest.raises(ValueError, match="unknown latent feature"):
        project(branch("disagg", {A: ("vllm",), B: ("vllm",)}), "vllm", {"agg_ffn_mode": "tp"})


def test_projection_is_deterministic_and_stays_in_the_backend_pool() -> None:
    config = SmartSearchConfig.from_dict({
        "search_space": {"model_name": "deepseek-ai/DeepSeek-V3", "hardware_sku": "h200_sxm", "gpu_budget": 32,
                         "deployment_mode": ["disagg"], "backend": ["vllm", "sglang"]},
        "workload": {"isl": 1000, "osl": 100, "num_request_ratio": 2, "concurrency": 8}})
    d = enumerate_branches(config).branch("disagg")
    request = {"prefill_attention_mode": "dp", "prefill_ffn_mode": "tp", "used_gpu_ratio": 0.6,
               "prefill_num_gpus_per_engine_target": 16}
    on_vllm = project(d, "vllm", request)
    on_sglang = project(d, "sglang", request)
    assert on_vllm.config.prefill.shape == Shape(tp=1, attention_dp=16, moe_tp=16)  # type: ignore[union-attr]
    assert not on_vllm.mode_projected
    assert on_sglang.mode_projected and on_sglang.config in d.configs_for("sglang")  # no DTP on SGLang
    assert project(d, "vllm", request) == on_vllm

"""§2.12 steps 2–7 and 9 as pure rules; every count is derived by hand in the test."""
from __future__ import annotations

import pytest

from spica_core.space.enumeration import (
    agg_configs,
    backend_rejects,
    config_rejection,
    configs_from_shapes,
    disagg_configs,
    moe_pattern,
    role_configs,
    shape_rejection,
    worker_shapes,
)
from spica_core.space.parallel import ParallelConfig, RoleConfig, Shape


def test_dense_is_plain_tp_on_the_ladder_capped_by_budget() -> None:
    assert worker_shapes(False, 8, "vllm") == [Shape(1), Shape(2), Shape(4), Shape(8)]
    assert worker_shapes(False, 32, "sglang")[-1] == Shape(16)  # the ladder stops at 16
    assert [s.tp for s in worker_shapes(False, 6, "trtllm")] == [1, 2, 4]
    assert all(s.strategy == "tp" for s in worker_shapes(False, 32, "vllm"))


def test_moe_keeps_only_the_four_pure_patterns() -> None:
    shapes = worker_shapes(True, 32, "vllm")
    # g ∈ {2,4,8,16}: one shape per pattern (tp×dp = moe_tp×moe_ep = g); g = 1 matches no pattern
    assert len(shapes) == 4 * 4
    assert {s.gpus for s in shapes} == {2, 4, 8, 16}
    by_g8 = {s.strategy: s for s in shapes if s.gpus == 8}
    assert by_g8 == {
        "tep": Shape(tp=8, moe_ep=8),
        "dep": Shape(tp=1, attention_dp=8, moe_ep=8),
        "tp": Shape(tp=8, moe_tp=8),
        "dtp": Shape(tp=1, attention_dp=8, moe_tp=8),
    }
    assert all(s.tp * s.attention_dp == s.moe_tp * s.moe_ep for s in shapes)
    assert worker_shapes(True, 1, "vllm") == []


def test_backend_filter_drops_only_the_shapes_the_backend_cannot_run() -> None:
    every_pattern = worker_shapes(True, 16, "vllm")
    assert {s.strategy for s in every_pattern} == {"tep", "dep", "tp", "dtp"}
    # pure patterns never mix attention TP with DP (trtllm's rule) nor MoE TP with EP (vllm's rule)
    assert worker_shapes(True, 16, "trtllm") == worker_shapes(True, 16, "sglang") == every_pattern
    # an EP-only sglang kernel cannot shard experts by TP: the MoE-TP patterns go, the EP patterns stay
    ep_only = worker_shapes(True, 16, "sglang", "deepep_moe")
    assert ep_only == [s for s in every_pattern if s.moe_tp == 1]
    assert {s.strategy for s in ep_only} == {"tep", "dep"} and len(ep_only) == 2 * 4  # g ∈ {2, 4, 8, 16}
    assert all(backend_rejects(s, "sglang", "deepep_moe") for s in every_pattern if s not in ep_only)


def test_backend_filters() -> None:
    mixed_attention = Shape(tp=2, attention_dp=2, moe_ep=4)
    mixed_ffn = Shape(tp=4, moe_tp=2, moe_ep=2)
    assert backend_rejects(mixed_attention, "trtllm") is not None
    assert backend_rejects(mixed_attention, "vllm") is None
    assert backend_rejects(mixed_ffn, "vllm") is not None
    assert backend_rejects(mixed_ffn, "trtllm") is None
    assert backend_rejects(mixed_ffn, "sglang") is None                      # default kernel: any mix
    assert backend_rejects(Shape(tp=4, moe_tp=4), "sglang", "deepep_moe") is not None  # EP-only kernel
    assert moe_pattern(mixed_attention) is None and moe_pattern(Shape(tp=1)) is None


def test_replicas_fill_the_budget_window() -> None:
    assert [r.replicas for r in role_configs([Shape(4)], 32)] == list(range(1, 9))
    assert [r.replicas for r in role_configs([Shape(4)], 32, min_gpu_budget=16)] == [4, 5, 6, 7, 8]
    assert [r.replicas for r in role_configs([Shape(8)], 20)] == [1, 2]


def test_agg_count_and_derived_fields() -> None:
    shapes = worker_shapes(False, 8, "vllm")
    configs = configs_from_shapes("agg", shapes, 8)
    assert len(configs) == 8 + 4 + 2 + 1  # TP1×1..8, TP2×1..4, TP4×1..2, TP8×1
    c = ParallelConfig("agg", agg=RoleConfig(Shape(2), 3))
    assert c in configs and c.used_gpus == 6 and c.agg is not None and c.agg.shape.strategy == "tp"
    assert [c.used_gpus for c in configs] == sorted(c.used_gpus for c in configs)
    assert len(configs_from_shapes("agg", shapes, 8, min_gpu_budget=8)) == 4  # one per shape


def test_disagg_pairs_within_budget() -> None:
    """Dense, 8 GPUs. Role footprints n(f): 1→1, 2→2, 3→1, 4→3, 5→1, 6→2, 7→1, 8→4 (TP8×1, TP4×2,
    TP2×4, TP1×8). Pairs with p + d ≤ 8: Σ n(p)·N(8−p), N cumulative = 1,3,4,7,8,10,11 →
    1·11 + 2·10 + 1·8 + 3·7 + 1·4 + 2·3 + 1·1 = 71."""
    shapes = worker_shapes(False, 8, "vllm")
    configs = configs_from_shapes("disagg", shapes, 8)
    assert len(configs) == 71
    assert all(c.used_gpus <= 8 for c in configs)
    assert max(c.prefill.gpus for c in configs if c.prefill) == 7  # an 8-GPU role leaves nothing for the other
    at_least_8 = configs_from_shapes("disagg", shapes, 8, min_gpu_budget=8)
    # totals exactly 8: Σ n(p)·n(8−p) = 1·1 + 2·2 + 1·1 + 3·3 + 1·1 + 2·2 + 1·1 = 21
    assert len(at_least_8) == 21 and all(c.used_gpus == 8 for c in at_least_8)


def test_disagg_roles_are_independent() -> None:
    configs = disagg_configs([Shape(4)], [Shape(8)], 32)
    # prefill TP4 × r_p, decode TP8 × r_d with 4 r_p + 8 r_d ≤ 32: r_d=1 → r_p 1..6, 2 → 1..4, 3 → 1..2
    assert len(configs) == 6 + 4 + 2
    assert ParallelConfig("disagg", prefill=RoleConfig(Shape(4), 1), decode=RoleConfig(Shape(8), 3)) in configs
    assert disagg_configs([], [Shape(8)], 32) == []
    assert agg_configs([Shape(16)], 8) == []


@pytest.mark.parametrize("shape, is_moe, fragment", [
    (Shape(tp=3), False, "not in [1, 2, 4, 8, 16]"),
    (Shape(tp=2, pp=2), False, "pp must be 1"),
    (Shape(tp=32), False, "is not in [1, 2, 4, 8, 16]"),
    (Shape(tp=2, moe_ep=2), False, "dense model uses plain TP"),
    (Shape(tp=4, moe_ep=2), True, "MoE width"),
    (Shape(tp=2, attention_dp=2, moe_ep=4), True, "pure MoE patterns"),
    (Shape(tp=1), True, "pure MoE patterns"),
])
def test_pinned_shape_rejections_say_why(shape: Shape, is_moe: bool, fragment: str) -> None:
    why = shape_rejection(shape, is_moe, "vllm", 16)
    assert why is not None and fragment in why


def test_pinned_shape_larger_than_budget() -> None:
    assert "more than gpu_budget 8" in (shape_rejection(Shape(tp=16), False, "vllm", 8) or "")
    assert shape_rejection(Shape(tp=8), False, "vllm", 8) is None


def test_pinned_config_budget_rules() -> None:
    over = ParallelConfig("disagg", prefill=RoleConfig(Shape(8), 2), decode=RoleConfig(Shape(8), 3))
    assert "exceeds gpu_budget" in (config_rejection(over, False, "vllm", 32) or "")
    under = ParallelConfig("agg", agg=RoleConfig(Shape(2), 1))
    assert "below min_gpu_budget" in (config_rejection(under, False, "vllm", 8, min_gpu_budget=4) or "")
    bad_role = ParallelConfig("disagg", prefill=RoleConfig(Shape(3)), decode=RoleConfig(Shape(2)))
    assert (config_rejection(bad_role, False, "vllm", 8) or "").startswith("prefill:")
    ok = ParallelConfig("disagg", prefill=RoleConfig(Shape(4), 1), decode=RoleConfig(Shape(4), 1))
    assert config_rejection(ok, False, "vllm", 8) is None

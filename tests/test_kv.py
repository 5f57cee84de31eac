"""§2.12 step 8: a shape is kept iff one rank's KV pool holds one longest sequence (> max_seq_len)."""
from __future__ import annotations

from typing import Any

import pytest

from spica_core.space.precision import precision_of
from spica_core.config import SmartSearchConfig
from spica_core.errors import NoViableParallelConfigError
from spica_core.space.branches import estimate_shapes, kv_filter, legal_space
from spica_core.space.enumeration import worker_shapes
from spica_core.space.kv import max_seq_len, shape_kv
from spica_core.space.parallel import Shape

QWEN = "Qwen/Qwen3-32B"
DSV3 = "deepseek-ai/DeepSeek-V3"
GIB = 1 << 30


def agg_vllm(model: str, sku: str = "h200_sxm", budget: int = 8, **space: Any) -> SmartSearchConfig:
    """One agg branch on vLLM: the production path legal_space → estimate_shapes → kv_filter sees one backend."""
    return SmartSearchConfig.from_dict({
        "search_space": {"model_name": model, "hardware_sku": sku, "gpu_budget": budget, "deployment_mode": ["agg"],
                         "backend": ["vllm"], **space},
        "workload": {"trace_path": "t.jsonl"}})


def _tp1_vllm_tokens() -> int:
    """Qwen3-32B TP1 on H200, vLLM (of_total 0.9): weights 65,522,892,800 B, activations 1,476,395,008 B
    (8192 tokens), runtime 3.5 GiB, no NCCL; 262,144 B/token."""
    return int((141 * GIB * 0.9 - (65_522_892_800 + 1_476_395_008 + 3_758_096_384)) / 262_144)


def test_max_seq_len_defaults_to_model_context() -> None:
    assert max_seq_len(QWEN, None) == 40_960
    assert max_seq_len(QWEN, 8192) == 8192


def test_qwen3_32b_every_tp_holds_the_model_max_context() -> None:
    space = legal_space(agg_vllm(QWEN))
    records = estimate_shapes(space)
    bf16 = precision_of(QWEN, None, "bf16")
    assert list(records) == [("h200_sxm", "vllm", bf16, Shape(tp)) for tp in (1, 2, 4, 8)]
    assert all(r.feasible and r.max_seq_len == 40_960 for r in records.values())
    pool = kv_filter(space, records).branch("agg").pool
    assert {c.agg.shape for c in pool if c.agg} == {Shape(1), Shape(2), Shape(4), Shape(8)}
    tokens = [r.kv_tokens_per_rank for r in records.values()]
    assert tokens[0] == _tp1_vllm_tokens() == 249_864
    # KV heads shard with TP while weights shrink: capacity grows faster than linearly
    assert tokens == sorted(tokens) and tokens[1] > 2 * tokens[0]


def test_qwen3_32b_tp1_fails_a_250k_context_on_vllm_but_not_trtllm() -> None:
    """249,864 ≤ 250,000 on vLLM (fraction of total). TRT-LLM's fraction is of *free* memory:
    (141 GiB − non-KV) × 0.9 / 262,144 = 276,856 > 250,000."""
    vllm = shape_kv(QWEN, "h200_sxm", "vllm", Shape(1), 250_000, precision_of(QWEN, None, "bf16"))
    assert not vllm.feasible and vllm.kv_tokens_per_rank == 249_864 and "max_seq_len 250000" in vllm.reason
    trt = shape_kv(QWEN, "h200_sxm", "trtllm", Shape(1), 250_000, precision_of(QWEN, None, "bf16"))
    non_kv = 65_522_892_800 + 1_476_395_008 + 3_758_096_384
    assert trt.feasible and trt.kv_tokens_per_rank == int((141 * GIB - non_kv) * 0.9 / 262_144) == 276_856
    branch = kv_filter(legal_space(agg_vllm(QWEN, context_length=250_000))).branch("agg")
    configs = branch.configs_for("vllm")
    assert {c.agg.shape.tp for c in configs if c.agg} == {2, 4, 8}
    assert len(configs) == 4 + 2 + 1  # TP2×1..4, TP4×1..2, TP8×1


def test_deepseek_v3_small_shapes_have_no_kv_budget() -> None:
    """657 GiB of FP8 weights: 4 GPUs hold ≥ 164 GiB each, more than a 141 GiB H200."""
    for shape in worker_shapes(True, 4, "vllm"):
        r = shape_kv(DSV3, "h200_sxm", "vllm", shape, 163_840, precision_of(DSV3, None, "fp8"))
        assert not r.feasible and r.kv_tokens_per_rank is None and r.reason.startswith("no KV budget")


@pytest.mark.parametrize("backend, shape, feasible", [
    # DEP8: attention replicated per DP rank (97 GiB weights per GPU) but still > 163,840 tokens
    ("vllm", Shape(tp=1, attention_dp=8, moe_ep=8), True),
    # DTP8 on vLLM/SGLang: replicated attention + dense-sharded experts leave no KV budget ...
    ("vllm", Shape(tp=1, attention_dp=8, moe_tp=8), False),
    ("sglang", Shape(tp=1, attention_dp=8, moe_tp=8), False),
    # ... while TRT-LLM's fraction-of-free budget keeps it
    ("trtllm", Shape(tp=1, attention_dp=8, moe_tp=8), True),
    # DTP16: vLLM keeps it (249,681 tokens), SGLang's larger runtime reservation does not
    ("vllm", Shape(tp=1, attention_dp=16, moe_tp=16), True),
    ("sglang", Shape(tp=1, attention_dp=16, moe_tp=16), False),
    ("sglang", Shape(tp=8, moe_ep=8), True),
])
def test_deepseek_v3_pattern_feasibility_per_backend(backend: str, shape: Shape, feasible: bool) -> None:
    assert shape_kv(DSV3, "h200_sxm", backend, shape, 163_840, precision_of(DSV3, None, "fp8")).feasible is feasible


def test_no_perf_db_and_nothing_feasible() -> None:
    with pytest.raises(NoViableParallelConfigError, match="no perf database for vllm on h100_pcie"):
        kv_filter(legal_space(agg_vllm(QWEN, "h100_pcie")))
    space = legal_space(agg_vllm(DSV3, budget=4))
    records = estimate_shapes(space)
    assert records and not any(r.feasible for r in records.values())
    with pytest.raises(NoViableParallelConfigError) as err:
        kv_filter(space, records)
    text = str(err.value)
    assert "TEP4" in text and "no KV budget" in text and "gpu_budget" in text

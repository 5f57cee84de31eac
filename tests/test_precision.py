"""Precision as a deployment choice: quantization and KV dtype move step time, KV capacity, feasibility,
the sample, the engine flags and the manifests in the right direction."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from spica_cli.main import main as spica
from spica_core.config.knobs import QUANTIZATIONS
from spica_core.config.model import SmartSearchConfig
from spica_core.emit.crd import check_manifest
from spica_core.emit.manifests import manifest
from spica_core.deployment import Candidate
from spica_core.space.profiles import EngineShape, StepTimes, profile_path
from spica_core.search.candidates import CandidateSpace
from spica_core.space.branches import Variant, enumerate_branches
from spica_core.space.facts import backend_version
from spica_core.space.kv import kv_tokens_per_rank, shape_kv
from spica_core.space.parallel import ParallelConfig, Shape
from spica_core.space.precision import Precision, checkpoint_quantization, precision_of

QWEN, LLAMA, SKU = "Qwen/Qwen3-32B", "meta-llama/Meta-Llama-3.1-70B", "h200_sxm"
BF16 = Precision("bf16", "bf16", native=True)
FP8 = Precision("fp8", "bf16", native=False)
FP8_KV = Precision("bf16", "fp8", native=True)


def test_the_quantization_vocabulary_is_aics() -> None:
    from aiconfigurator_core.sdk.common import GEMMQuantMode, MoEQuantMode

    names = {"bf16" if m.name == "bfloat16" else m.name for m in [*GEMMQuantMode, *MoEQuantMode]}
    assert set(QUANTIZATIONS) == names


def test_every_quantization_has_its_weight_bits() -> None:
    from spica_core.space.precision import WEIGHT_BITS

    assert set(WEIGHT_BITS) == set(QUANTIZATIONS)


def test_a_pre_quantized_checkpoint_runs_from_fewer_bits_never_more() -> None:
    """DeepSeek-R1 ships as block FP8; NVIDIA's NVFP4 export of it is the same architecture at 4 bits."""
    from spica_core.space.facts import backend_version
    from spica_core.space.precision import precision_problem

    r1, sku = "deepseek-ai/DeepSeek-R1", "b200_sxm"
    version = backend_version(sku, "trtllm")
    assert precision_problem(r1, sku, "trtllm", version, "nvfp4") is None
    assert precision_problem(r1, sku, "trtllm", version, "fp8_block") is None          # its own
    for more_or_same in ("bf16", "fp8"):
        why = precision_problem(r1, sku, "trtllm", version, more_or_same)
        assert why is not None and "fewer weight bits" in why and "'fp8_block'" in why


def test_checkpoints_keep_their_own_precision() -> None:
    assert checkpoint_quantization(QWEN) == "bf16"
    assert checkpoint_quantization("Qwen/Qwen3-32B-FP8") == "fp8_block"
    assert checkpoint_quantization("openai/gpt-oss-120b") == "w4a16_mxfp4"  # named by its experts
    assert precision_of(QWEN, None, "bf16") == BF16 and precision_of(QWEN, "bf16", "bf16") == BF16
    assert precision_of(QWEN, "fp8", "bf16") == FP8


def test_fp8_kv_doubles_the_tokens_per_rank_at_tp2() -> None:
    bf16 = kv_tokens_per_rank(QWEN, SKU, "vllm", Shape(2), precision=BF16)
    fp8 = kv_tokens_per_rank(QWEN, SKU, "vllm", Shape(2), precision=FP8_KV)
    assert bf16 and fp8 and 1.95 < fp8 / bf16 < 2.05


def test_fp8_weights_leave_more_kv_and_step_faster() -> None:
    kv_bf16 = kv_tokens_per_rank(QWEN, SKU, "vllm", Shape(2), precision=BF16)
    kv_fp8 = kv_tokens_per_rank(QWEN, SKU, "vllm", Shape(2), precision=FP8)
    assert kv_bf16 and kv_fp8 and kv_fp8 > 1.1 * kv_bf16   # half the weight bytes, the same KV dtype
    version = backend_version(SKU, "vllm")
    slow = StepTimes(profile_path(EngineShape.of(QWEN, SKU, "vllm", version, Shape(2), BF16)))
    fast = StepTimes(profile_path(EngineShape.of(QWEN, SKU, "vllm", version, Shape(2), FP8)))
    assert fast.prefill_ms(4096) < 0.9 * slow.prefill_ms(4096)
    assert fast.decode_ms(64 * 2048, 64) < slow.decode_ms(64 * 2048, 64)


def test_llama_70b_fits_one_h200_only_in_fp8() -> None:
    bf16 = shape_kv(LLAMA, SKU, "vllm", Shape(1), 8192, precision_of(LLAMA, None, "bf16"))
    fp8 = shape_kv(LLAMA, SKU, "vllm", Shape(1), 8192, precision_of(LLAMA, "fp8", "bf16"))
    assert not bf16.feasible and "no KV budget" in bf16.reason
    assert fp8.feasible and fp8.weight_bytes_per_gpu is not None
    assert bf16.row()["quantization"] == "bf16" and fp8.row()["quantization"] == "fp8"


def _config(**space: Any) -> SmartSearchConfig:
    return SmartSearchConfig.from_dict({
        "search_space": {"model_name": LLAMA, "hardware_sku": SKU, "gpu_budget": 2, "deployment_mode": ["agg"],
                         "backend": ["vllm"], "router_mode": ["round_robin"], "planner_scaling_policy": ["disabled"],
                         "agg_max_num_seqs": [256], "agg_max_num_batched_tokens": [8192], **space},
        "workload": {"isl": 1024, "osl": 1024, "num_request_ratio": 10, "concurrency": 64}})


def test_the_search_pairs_each_config_with_the_precisions_it_fits() -> None:
    branch = enumerate_branches(_config(quantization=["bf16", "fp8"])).branch("agg")
    tp1 = ParallelConfig.from_dict("agg", {"tp": 1})
    tp2 = ParallelConfig.from_dict("agg", {"tp": 2})
    h200 = (("hardware_sku", "h200_sxm"),)
    bf16 = Variant("vllm", precision_of(LLAMA, None, "bf16"), h200)
    fp8 = Variant("vllm", precision_of(LLAMA, "fp8", "bf16"), h200)
    assert branch.knob_choices["quantization"] == ["bf16", "fp8"]
    assert not branch.runs(bf16, tp1) and branch.runs(fp8, tp1) and branch.runs(bf16, tp2)
    space = CandidateSpace(branch)
    pairs = {(v.precision.quantization, c.label()) for v, c in space.pairs}
    assert ("fp8", tp1.label()) in pairs and ("bf16", tp1.label()) not in pairs
    proposals = [space.proposal(i) for i in range(space.size)]
    assert {(p.selection["quantization"], p.parallel.label()) for p in proposals} == pairs


def test_the_sample_carries_the_precision_both_ways() -> None:
    config = _config(quantization="fp8", kv_cache_dtype="fp8")
    cand = Candidate.unroll(config.search_space, {"deployment_mode": "agg"}, ParallelConfig.from_dict("agg", {"tp": 2}))
    sample = cand.to_sample()
    assert (sample["quantization"], sample["kv_cache_dtype"]) == ("fp8", "fp8")
    assert Candidate.from_sample(sample).precision == Precision("fp8", "fp8", native=False)
    assert cand.knobs_label().startswith("fp8 kv-fp8 ")


@pytest.mark.parametrize("backend,flags", [
    ("vllm", ["--quantization", "fp8", "--kv-cache-dtype", "fp8"]),
    ("sglang", ["--quantization", "fp8", "--kv-cache-dtype", "fp8_e4m3"]),
])
def test_manifests_carry_each_backends_precision_flags(backend: str, flags: list[str]) -> None:
    config = _config(quantization="fp8", kv_cache_dtype="fp8", backend=[backend])
    cand = Candidate.unroll(config.search_space, {"deployment_mode": "agg"}, ParallelConfig.from_dict("agg", {"tp": 2}))
    doc = manifest(cand.resolved(backend_version=backend_version(SKU, backend)))
    assert check_manifest(doc, used_gpus=2) == []
    [worker] = [c for c in doc["spec"]["components"] if c["name"] == "worker"]
    args = worker["podTemplate"]["spec"]["containers"][0]["args"]
    for flag, value in zip(flags[::2], flags[1::2]):
        assert args[args.index(flag) + 1] == value
    assert doc["metadata"]["annotations"]["spica.dev/quantization"] == "fp8"


def test_trtllm_manifest_sets_the_kv_dtype_and_asks_for_a_quantized_checkpoint() -> None:
    config = _config(quantization="fp8", kv_cache_dtype="fp8", backend=["trtllm"])
    cand = Candidate.unroll(config.search_space, {"deployment_mode": "agg"}, ParallelConfig.from_dict("agg", {"tp": 2}))
    doc = manifest(cand.resolved(backend_version=backend_version(SKU, "trtllm")))
    assert check_manifest(doc, used_gpus=2) == []
    [worker] = [c for c in doc["spec"]["components"] if c["name"] == "worker"]
    args = worker["podTemplate"]["spec"]["containers"][0]["args"]
    override = json.loads(args[args.index("--override-engine-args") + 1])
    assert override["kv_cache_config"]["dtype"] == "fp8"
    assert "fp8 checkpoint" in doc["metadata"]["annotations"]["spica.dev/approximations"]


def test_bf16_has_no_precision_flags() -> None:
    config = _config()
    cand = Candidate.unroll(config.search_space, {"deployment_mode": "agg"}, ParallelConfig.from_dict("agg", {"tp": 2}))
    doc = manifest(cand.resolved(backend_version=backend_version(SKU, "vllm")))
    [worker] = [c for c in doc["spec"]["components"] if c["name"] == "worker"]
    args = worker["podTemplate"]["spec"]["containers"][0]["args"]
    assert "--quantization" not in args and "--kv-cache-dtype" not in args


@pytest.mark.parametrize("model,quant,needle", [
    (QWEN, "nvfp4", "no nvfp4 perf data for vllm"),               # nvfp4 on Hopper
    ("Qwen/Qwen3-32B-FP8", "bf16", "pre-quantized fp8_block checkpoint"),
])
def test_a_precision_that_cannot_run_exits_2_naming_the_field(tmp_path: Path, capsys: Any, model: str, quant: str,
                                                               needle: str) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(f"search_space: {{model_name: {model}, hardware_sku: {SKU}, gpu_budget: 8, quantization: {quant}}}\n"
                    "workload: {isl: 1000, osl: 100, num_request_ratio: 2, concurrency: 8}\n")
    assert spica(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert "search_space.quantization[0]" in err and needle in err and "Traceback" not in err
    if quant == "nvfp4":
        assert "values with data: ['bf16', 'fp8', 'fp8_block', 'fp8_static']" in err


def test_an_unknown_precision_name_lists_the_allowed_ones(tmp_path: Path, capsys: Any) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(f"search_space: {{model_name: {QWEN}, hardware_sku: {SKU}, kv_cache_dtype: fp16}}\n"
                    "workload: {isl: 1000, osl: 100, num_request_ratio: 2, concurrency: 8}\n")
    assert spica(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert "search_space.kv_cache_dtype[0]" in err and "['bf16', 'fp8']" in err


def test_a_precision_the_engine_cannot_quantize_to_asks_for_a_checkpoint_not_an_fp8_flag() -> None:
    config = _config(quantization="int4_wo", backend=["vllm"])
    cand = Candidate.unroll(config.search_space, {"deployment_mode": "agg"}, ParallelConfig.from_dict("agg", {"tp": 2}))
    doc = manifest(cand.resolved(backend_version=backend_version(SKU, "vllm")))
    [worker] = [c for c in doc["spec"]["components"] if c["name"] == "worker"]
    assert "--quantization" not in worker["podTemplate"]["spec"]["containers"][0]["args"]
    assert "int4_wo checkpoint" in doc["metadata"]["annotations"]["spica.dev/approximations"]


def test_a_host_bound_block_fp8_gemm_table_is_timed_as_per_tensor_fp8(tmp_path: Path) -> None:
    """vLLM's block-FP8 GEMM rows carry a flat host-side floor that CUDA-graph decode does not pay;
    SGLang's rows for the same kernels do not, so they keep their own table."""
    from spica_core.space.profiles import timing_shape

    model, own = "Qwen/Qwen3-32B-FP8", precision_of("Qwen/Qwen3-32B-FP8", None, "bf16")
    vllm = EngineShape.of(model, SKU, "vllm", backend_version(SKU, "vllm"), Shape(2), own)
    timed, why = timing_shape(vllm)
    assert timed.gemm_quant_mode == "fp8" and why and "host-bound" in why and "fp8_block" in why
    assert timed.moe_quant_mode == vllm.moe_quant_mode and timed.kvcache_quant_mode == vllm.kvcache_quant_mode
    sglang = EngineShape.of(model, SKU, "sglang", backend_version(SKU, "sglang"), Shape(2), own)
    assert timing_shape(sglang) == (sglang, None)
    assert timing_shape(EngineShape.of(QWEN, SKU, "vllm", vllm.backend_version, Shape(2), BF16))[1] is None
    # the replay's table is the per-tensor one: one request's decode step well under the raw block table's
    table = StepTimes(profile_path(vllm, tmp_path))
    meta = json.loads(profile_path(vllm, tmp_path).with_suffix(".json").read_text())
    assert meta["resolved_quant"]["gemm_quant_mode"] == "fp8_block" and meta["timed_quant"]["gemm_quant_mode"] == "fp8"
    from spica_core.space.profiles import step_engine
    raw = step_engine(vllm)[1].decode_step_latency(1, 1024, 0)
    assert table.decode_ms(1024, 1) < 0.8 * raw

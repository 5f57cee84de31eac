"""Model and GPU facts read from aiconfigurator-core; expected values derived by hand from the configs."""
from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest

from spica_core.space.precision import precision_of
from spica_core.errors import NoPerfDatabaseError, UnknownModelError, UnknownSystemError
from spica_core.space.facts import backend_version, model_facts, system_facts
from spica_core.space.kv import kv_estimate, kv_tokens_per_rank, memory_fraction_kind
from spica_core.space.parallel import Shape

GIB = 1 << 30


def test_qwen3_32b_facts_match_its_config() -> None:
    f = model_facts("Qwen/Qwen3-32B")
    assert (f.is_moe, f.is_mla, f.architecture) == (False, False, "Qwen3ForCausalLM")
    assert f.max_context == 40960  # max_position_embeddings
    # GQA: 2 (K,V) × 8 KV heads × 128 head_dim × 64 layers × 2 bytes (bf16)
    assert f.kv_bytes_per_token == 2 * 8 * 128 * 64 * 2 == 262_144
    # bf16 params: embeddings in+out 2·V·H, per layer q/o 2·H·n·d, k/v 2·H·n_kv·d, SwiGLU 3·H·I
    V, H, L, n, n_kv, d, inter = 151936, 5120, 64, 64, 8, 128, 25600
    params = 2 * V * H + L * (2 * H * n * d + 2 * H * n_kv * d + 3 * H * inter)
    assert f.weight_bytes == 2 * params == 65_522_892_800


def test_deepseek_v3_is_moe_with_latent_fp8_kv() -> None:
    f = model_facts("deepseek-ai/DeepSeek-V3")
    assert (f.is_moe, f.is_mla, f.architecture) == (True, True, "DeepseekV3ForCausalLM")
    assert f.max_context == 163_840
    # MLA: 61 layers × (kv_lora_rank 512 + qk_rope_head_dim 64) × 2 bytes (a bf16 KV cache; fp8 holds half)
    assert f.kv_bytes_per_token == 61 * (512 + 64) * 2 == 70_272
    assert (f.gemm_quant_mode, f.moe_quant_mode) == ("fp8_block", "fp8_block")  # the FP8 checkpoint
    # FP8 671B checkpoint: more than half of one H200 node (8 × 141 GiB), unlike Qwen3-32B
    assert 600 * GIB < f.weight_bytes < 700 * GIB
    node = system_facts("h200_sxm")
    assert 2 * f.weight_bytes > node.gpus_per_node * node.vram_bytes_per_gpu
    assert 2 * model_facts("Qwen/Qwen3-32B").weight_bytes < node.gpus_per_node * node.vram_bytes_per_gpu


def test_gqa_moe_is_not_mla() -> None:
    f = model_facts("openai/gpt-oss-120b")
    assert f.is_moe and not f.is_mla


def test_unknown_model_lists_ids_and_local_folder_hint() -> None:
    with pytest.raises(UnknownModelError) as err:
        model_facts("meta-llama/Llama-3.1-8B-Instruct")  # not bundled: would need a download
    text = str(err.value)
    assert "Qwen/Qwen3-32B" in text and "config.json" in text and "local folder" in text


def test_local_folder_with_config_json_works(tmp_path: Path) -> None:
    import aiconfigurator_core

    bundled = Path(aiconfigurator_core.__file__).parent / "model_configs" / "Qwen--Qwen3-32B_config.json"
    folder = tmp_path / "my-qwen"
    folder.mkdir()
    shutil.copy(bundled, folder / "config.json")
    f = model_facts(str(folder))
    ref = model_facts("Qwen/Qwen3-32B")
    assert (f.weight_bytes, f.kv_bytes_per_token, f.max_context) == (ref.weight_bytes, ref.kv_bytes_per_token,
                                                                     ref.max_context)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(UnknownModelError, match="no config.json"):
        model_facts(str(empty))
    assert json.loads((folder / "config.json").read_text())["num_hidden_layers"] == 64


def test_h200_system_facts() -> None:
    s = system_facts("h200_sxm")
    assert s.vram_bytes_per_gpu == 141 * GIB
    assert s.gpus_per_node == 8
    # the "current" slot of each backend (aic.md §2)
    assert s.backend_versions == {"trtllm": "1.3.0rc20", "sglang": "0.5.14", "vllm": "0.24.0"}
    assert system_facts("gb200").gpus_per_node == 4


def test_perf_db_coverage() -> None:
    assert system_facts("b60").backend_versions == {"vllm": "0.26.0"}
    assert system_facts("h100_pcie").backend_versions == {}  # spec yaml only: SOL mode
    with pytest.raises(NoPerfDatabaseError, match="h100_pcie"):
        backend_version("h100_pcie", "vllm")
    with pytest.raises(NoPerfDatabaseError, match="backends with data on b60: vllm"):
        backend_version("b60", "sglang")
    assert backend_version("a100_sxm", "trtllm") == "1.0.0"


def test_unknown_sku_lists_available() -> None:
    with pytest.raises(UnknownSystemError) as err:
        system_facts("h300_sxm")
    assert "h200_sxm" in str(err.value) and "gb200" in str(err.value)


def test_memory_fraction_kinds() -> None:
    assert memory_fraction_kind("trtllm") == "of_free"
    assert memory_fraction_kind("vllm") == memory_fraction_kind("sglang") == "of_total"


def test_kv_tokens_follow_the_budget_formula() -> None:
    """Qwen3-32B tp2 on H200, from AIC's breakdown: weights 32,761,446,400 B (half the checkpoint),
    activations 872,415,232 B (8192 tokens), runtime 3.5 GiB, NCCL 358,612,992 B; 131,072 B/token per rank."""
    cap = 141 * GIB
    non_kv = 32_761_446_400 + 872_415_232 + 3_758_096_384 + 358_612_992
    of_total = int((cap * 0.9 - non_kv) / 131_072)
    of_free = int((cap - non_kv) * 0.9 / 131_072)
    assert of_total == 751_550 and of_free == 780_352
    assert kv_tokens_per_rank("Qwen/Qwen3-32B", "h200_sxm", "vllm", Shape(tp=2), precision=precision_of("Qwen/Qwen3-32B", None, "bf16")) == of_total
    assert kv_tokens_per_rank("Qwen/Qwen3-32B", "h200_sxm", "trtllm", Shape(tp=2), precision=precision_of("Qwen/Qwen3-32B", None, "bf16")) == of_free


def test_shapes_that_cannot_hold_the_model_return_none() -> None:
    # DeepSeek-V3 on 2 GPUs: ~330 GiB of FP8 weights per GPU > 141 GiB
    tokens, why = kv_estimate("deepseek-ai/DeepSeek-V3", "h200_sxm", "vllm", Shape(tp=2, moe_ep=2), precision=precision_of("deepseek-ai/DeepSeek-V3", None, "fp8"))
    assert tokens is None and why.startswith("no KV budget")
    # FP8 block-quantised experts need moe_inter / moe_tp divisible by 128: 1536 / 8 = 192 is not
    tokens, why = kv_estimate("Qwen/Qwen3-235B-A22B-FP8", "h200_sxm", "vllm", Shape(tp=8, moe_tp=8), precision=precision_of("Qwen/Qwen3-235B-A22B-FP8", None, "fp8"))
    assert tokens is None and why.startswith("Invalid quantized MoE configuration")
    assert kv_tokens_per_rank("Qwen/Qwen3-235B-A22B-FP8", "h200_sxm", "vllm", Shape(tp=4, moe_tp=4), precision=precision_of("Qwen/Qwen3-235B-A22B-FP8", None, "fp8")) is not None


def test_aic_logging_is_silenced() -> None:
    assert logging.getLogger("aiconfigurator_core").getEffectiveLevel() >= logging.ERROR


def test_system_facts_are_kept_on_disk_and_read_back_without_the_perf_database(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Reading a SKU's facts parses AIC's whole perf-database index; a later process reads the cached file."""
    import aiconfigurator_core.sdk.perf_database as perf_database

    from spica_core.space import facts

    monkeypatch.setenv("SPICA_CACHE_DIR", str(tmp_path))
    system_facts.cache_clear()
    first = system_facts("h200_sxm")
    [kept] = tmp_path.glob("system-h200_sxm-aic*.json")
    assert json.loads(kept.read_text())["backend_versions"] == first.backend_versions

    def no_database(*_: object) -> None:
        raise AssertionError("the perf database was read again")

    system_facts.cache_clear()  # as a new process would start
    monkeypatch.setattr(perf_database, "get_supported_databases", no_database)
    monkeypatch.setattr(perf_database, "get_latest_database_version", no_database)
    assert system_facts("h200_sxm") == first and backend_version("h200_sxm", "vllm") == first.backend_versions["vllm"]

    kept.write_text("{not json")  # a damaged file is read from AIC again (and would be here)
    system_facts.cache_clear()
    with pytest.raises(AssertionError, match="read again"):
        system_facts("h200_sxm")
    assert facts.cache_dir() == tmp_path
    system_facts.cache_clear()

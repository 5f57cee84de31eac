"""The typed candidate and its wire format, the flat unrolled sample (§9.1): exactly the keys that apply."""
from __future__ import annotations

from typing import Any

import pytest

from spica_core.config.model import SmartSearchConfig
from spica_core.errors import SpicaError
from spica_core.space.parallel import ParallelConfig
from spica_core.deployment import Candidate, KVLoad, LoadPredictorChoice


def unroll_sample(space: Any, selection: dict[str, Any], parallel: ParallelConfig,
                  winners: dict[int, Any] | None = None) -> dict[str, Any]:
    """The wire format of an unrolled candidate; every sample must also read back into the same candidate."""
    candidate = Candidate.unroll(space, selection, parallel, winners)
    sample = candidate.to_sample()
    assert Candidate.from_sample(sample) == candidate
    return sample

PINNED = {"model_name", "hardware_sku", "gpu_budget", "min_gpu_budget", "min_endpoint", "context_length",
          "startup_time", "aic_nextn", "scheduler_recv_interval", "num_g2_blocks", "kv_bytes_per_token", "bandwidth_g1_to_g2_gbps",
          "bandwidth_g2_to_g1_gbps", "offload_batch_size"}
AGG_PARALLEL = {"tp", "pp", "attention_dp", "moe_tp", "moe_ep", "strategy", "replicas", "used_gpus"}
AGG_ENGINE = {"agg_max_num_batched_tokens", "agg_max_num_seqs", "agg_block_size", "agg_gpu_memory_utilization",
              "agg_enable_prefix_caching"}
PLANNER_BASE = {"planner_scaling_policy", "enable_throughput_scaling", "enable_load_scaling"}
PLANNER_ON = {"throughput_adjustment_interval_seconds", "load_adjustment_interval_seconds", "max_num_fpm_samples",
              "fpm_sample_bucket_size", "load_scaling_down_sensitivity", "load_min_observations"}


def space(**overrides: Any) -> Any:
    base = {"model_name": "Qwen/Qwen3-32B", "hardware_sku": "h200_sxm"}
    base.update(overrides)
    return SmartSearchConfig.from_dict({"search_space": base, "workload": {"trace_path": "t.jsonl"}}).search_space


AGG = ParallelConfig.from_dict("agg", {"tp": 2, "replicas": 3})
DISAGG = ParallelConfig.from_dict("disagg", {"prefill": {"tp": 1, "replicas": 2}, "decode": {"tp": 4}})


def test_agg_round_robin_static_has_exactly_the_applicable_keys() -> None:
    sel = {"deployment_mode": "agg", "backend": "vllm", "agg_max_num_batched_tokens": 16384, "agg_max_num_seqs": 512,
           "router_mode": "round_robin", "planner_scaling_policy": "disabled"}
    s = unroll_sample(space(), sel, AGG)
    assert set(s) == {"deployment_mode", "backend", "quantization", "kv_cache_dtype", "router_mode"} | PINNED | AGG_PARALLEL | AGG_ENGINE | PLANNER_BASE
    assert (s["tp"], s["replicas"], s["used_gpus"], s["strategy"]) == (2, 3, 6, "tp")
    assert (s["agg_max_num_batched_tokens"], s["agg_max_num_seqs"], s["agg_block_size"]) == (16384, 512, 64)
    assert s["enable_load_scaling"] is False and s["enable_throughput_scaling"] is False
    assert s["num_g2_blocks"] == 0 and s["kv_bytes_per_token"] is None  # pinned context: None included


def test_disagg_kv_router_with_host_offload_and_planner() -> None:
    sp = space(deployment_mode=["disagg"], num_g2_blocks=1000, kv_bytes_per_token=262144)
    sel = {"deployment_mode": "disagg", "backend": "vllm", "prefill_max_num_batched_tokens": 8192,
           "prefill_max_num_seqs": 4, "decode_max_num_batched_tokens": 8192, "decode_max_num_seqs": 256,
           "router_mode": "kv_router", "overlap_score_credit": 0.5, "prefill_load_scale": 2.0,
           "router_temperature": 0.2, "host_cache_hit_weight": 1.0, "disk_cache_hit_weight": 0.0,
           "planner_scaling_policy": "load_180_10", "planner_fpm_sampling": "fine",
           "planner_load_sensitivity": "conservative"}
    s = unroll_sample(sp, sel, DISAGG)
    assert "tp" not in s and "agg_max_num_seqs" not in s
    assert (s["prefill_tp"], s["prefill_replicas"], s["decode_tp"], s["decode_replicas"], s["used_gpus"]) == (1, 2, 4, 1, 6)
    assert {f"{r}_{k}" for r in ("prefill", "decode") for k in ("block_size", "gpu_memory_utilization",
                                                                  "enable_prefix_caching")} <= set(s)
    assert s["decode_enable_prefix_caching"] is False and s["prefill_enable_prefix_caching"] is True
    assert (s["overlap_score_credit"], s["prefill_load_scale"], s["router_temperature"]) == (0.5, 2.0, 0.2)
    assert (s["host_cache_hit_weight"], s["disk_cache_hit_weight"]) == (1.0, 0.0)
    assert s["no_admission_control"] is False and s["active_decode_blocks_threshold"] is None
    assert PLANNER_ON <= set(s)
    assert (s["load_adjustment_interval_seconds"], s["max_num_fpm_samples"], s["fpm_sample_bucket_size"],
            s["load_scaling_down_sensitivity"], s["load_min_observations"]) == (10, 128, 64, 90, 8)
    assert "load_predictor" not in s  # load-only: no predictor fields


def test_round_robin_drops_router_weights_even_if_selected() -> None:
    sel = {"deployment_mode": "agg", "router_mode": "round_robin", "overlap_score_credit": 1.0,
           "prefill_load_scale": 1.0, "router_temperature": 0.0, "planner_scaling_policy": "disabled",
           "agg_max_num_batched_tokens": 8192, "agg_max_num_seqs": 256}
    s = unroll_sample(space(), sel, AGG)
    assert not {"overlap_score_credit", "prefill_load_scale", "router_temperature", "no_admission_control"} & set(s)


def test_cache_hit_weights_absent_without_host_offload() -> None:
    sel = {"deployment_mode": "agg", "router_mode": "kv_router", "overlap_score_credit": 1.0,
           "prefill_load_scale": 1.0, "router_temperature": 0.0, "host_cache_hit_weight": 0.5,
           "planner_scaling_policy": "disabled", "agg_max_num_batched_tokens": 8192, "agg_max_num_seqs": 256}
    s = unroll_sample(space(), sel, AGG)
    assert "host_cache_hit_weight" not in s and "disk_cache_hit_weight" not in s
    assert s["overlap_score_credit"] == 1.0


def test_throughput_policy_gets_only_its_predictor_family_fields() -> None:
    sel = {"deployment_mode": "agg", "router_mode": "round_robin", "planner_scaling_policy": "hybrid_180_5",
           "planner_fpm_sampling": "default", "planner_load_sensitivity": "aggressive",
           "agg_max_num_batched_tokens": 8192, "agg_max_num_seqs": 256}
    s = unroll_sample(space(), sel, AGG, {180: "kalman_reactive_log1p", 600: "prophet_w20_raw"})
    assert (s["load_predictor"], s["load_predictor_log1p"]) == ("kalman", True)
    assert (s["kalman_q_level"], s["kalman_q_trend"], s["kalman_r"], s["kalman_min_points"]) == (10.0, 1.0, 5.0, 3)
    assert "prophet_window_size" not in s
    s600 = unroll_sample(space(), {**sel, "planner_scaling_policy": "throughput_600_5"}, AGG, {600: "prophet_w20_raw"})
    assert (s600["load_predictor"], s600["prophet_window_size"]) == ("prophet", 20)
    assert not any(k.startswith("kalman_") for k in s600)


def test_dict_scaling_entry_is_kept_raw_and_decoded() -> None:
    entry = {"enable_throughput_scaling": False, "enable_load_scaling": True,
             "throughput_adjustment_interval_seconds": 240, "load_adjustment_interval_seconds": 15}
    sp = space(planner_scaling_policy=[entry], planner_fpm_sampling=["small"], planner_load_sensitivity=["default"],
               router_mode=["round_robin"], agg_max_num_batched_tokens=[8192], agg_max_num_seqs=[256])
    s = unroll_sample(sp, {"deployment_mode": "agg"}, AGG)
    assert s["planner_scaling_policy"] == entry
    assert (s["load_adjustment_interval_seconds"], s["max_num_fpm_samples"]) == (15, 32)


def test_missing_multi_valued_knob_is_an_error_naming_it() -> None:
    with pytest.raises(SpicaError, match="agg_max_num_seqs"):
        unroll_sample(space(router_mode=["round_robin"], planner_scaling_policy=["disabled"],
                            agg_max_num_batched_tokens=[8192]), {"deployment_mode": "agg"}, AGG)


def test_mode_mismatch_is_an_error() -> None:
    with pytest.raises(SpicaError, match="does not match"):
        unroll_sample(space(), {"deployment_mode": "disagg"}, AGG)


def test_resolved_run_fields_and_round_trip() -> None:
    sel = {"deployment_mode": "disagg", "router_mode": "round_robin", "planner_scaling_policy": "disabled",
           "prefill_max_num_batched_tokens": 8192, "prefill_max_num_seqs": 4, "decode_max_num_batched_tokens": 8192,
           "decode_max_num_seqs": 256}
    c = Candidate.unroll(space(deployment_mode=["disagg"]), sel, DISAGG)
    assert c.parallel == DISAGG and c.roles == ("prefill", "decode") and c.used_gpus == 6
    s = c.to_sample()
    kv = KVLoad(0.5, 1000, 14, {"prefill": 10, "decode": 1000})
    s2 = c.resolved(backend_version="0.24.0", concurrency=7, kv_load=kv).to_sample()
    assert s2["backend_version"] == "0.24.0" and s2["concurrency"] == 7 and s2["kv_load_ratio"] == 0.5
    assert (s2["kv_load_capacity_tokens"], s2["kv_load_concurrency_capacity"]) == (1000, 14)
    assert (s2["prefill_kv_capacity_tokens"], s2["decode_kv_capacity_tokens"]) == (10, 1000)
    assert "agg_kv_capacity_tokens" not in s2 and "backend_version" not in s
    assert set(s2) - set(s) == {"backend_version", "concurrency", "kv_load_ratio", "kv_load_capacity_tokens",
                                "kv_load_concurrency_capacity", "prefill_kv_capacity_tokens",
                                "decode_kv_capacity_tokens"}
    assert c.resolved(backend_version="x", concurrency=32).to_sample()["concurrency"] == 32
    assert "concurrency" not in c.resolved(backend_version="x").to_sample()
    assert Candidate.from_sample(s2) == c.resolved(backend_version="0.24.0", concurrency=7, kv_load=kv)


def test_typed_fields_mirror_the_sample() -> None:
    sp = space(num_g2_blocks=1000, kv_bytes_per_token=262144)
    sel = {"deployment_mode": "agg", "router_mode": "kv_router", "overlap_score_credit": 0.5,
           "prefill_load_scale": 2.0, "router_temperature": 0.2, "host_cache_hit_weight": 1.0,
           "disk_cache_hit_weight": 0.0, "planner_scaling_policy": "throughput_180_5",
           "planner_fpm_sampling": "large", "planner_load_sensitivity": "default",
           "agg_max_num_batched_tokens": 16384, "agg_max_num_seqs": 512}
    c = Candidate.unroll(sp, sel, AGG, {180: "prophet_w50_log1p"})
    assert (c.engines["agg"].max_num_seqs, c.engines["agg"].max_num_batched_tokens) == (512, 16384)
    assert c.router.weights() == {"overlap_score_credit": 0.5, "prefill_load_scale": 2.0, "router_temperature": 0.2,
                                  "host_cache_hit_weight": 1.0, "disk_cache_hit_weight": 0.0}
    assert c.offload.enabled and c.offload.kv_bytes_per_token == 262144
    p = c.planner
    assert p.enable_throughput_scaling and not p.enable_load_scaling and p.max_num_fpm_samples == 128
    assert p.load_predictor == LoadPredictorChoice("prophet", True, prophet_window_size=50)
    assert Candidate.from_sample(c.to_sample()) == c

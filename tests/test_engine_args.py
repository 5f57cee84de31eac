"""AIC profiles, KV capacity, engine arguments, router and traffic arguments, checked against the engines."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from spica_core.space.precision import precision_of
from spica_core.config.model import SmartSearchConfig
from spica_core.config.workload import Workload
from spica_core.errors import InfeasibleKVCapacityError, RejectedEngineArgsError
from spica_core.evaluate.engine_args import build_engine_args, router_kwargs
from spica_core.space.facts import backend_version, model_facts
from spica_core.space.kv import kv_tokens_per_rank
from spica_core.space.parallel import ParallelConfig, Shape
from spica_core.space.profiles import PREFILL_DISPATCH_MS_PER_LAYER, EngineShape, StepTimes, profile_path, step_engine
from spica_core.space.facts import cache_dir
from spica_core.deployment import Candidate, Router
from spica_core.evaluate.workload import replay_workload, request_count, resolve_kv_load

MODEL, SKU = "Qwen/Qwen3-32B", "h200_sxm"


def make_candidate(mode: str = "agg", pc: dict[str, Any] | None = None, **space: Any) -> Candidate:
    base: dict[str, Any] = {"model_name": MODEL, "hardware_sku": SKU, "deployment_mode": [mode],
                            "router_mode": ["round_robin"], "planner_scaling_policy": ["disabled"],
                            "agg_max_num_batched_tokens": [8192], "agg_max_num_seqs": [256],
                            "prefill_max_num_batched_tokens": [8192], "prefill_max_num_seqs": [4],
                            "decode_max_num_seqs": [256]}
    base.update(space)
    cfg = SmartSearchConfig.from_dict({"search_space": base, "workload": {"trace_path": "t.jsonl"}})
    pc = pc or ({"tp": 2, "replicas": 2} if mode == "agg" else {"prefill": {"tp": 2}, "decode": {"tp": 4}})
    c = Candidate.unroll(cfg.search_space, {"deployment_mode": mode}, ParallelConfig.from_dict(mode, pc))
    return c.resolved(backend_version=backend_version(SKU, c.backend))


# ---------------------------------------------------------------- profiles


def test_profile_is_cached_under_spica_cache_dir_and_built_once() -> None:
    es = EngineShape.of(MODEL, SKU, "vllm", backend_version(SKU, "vllm"), Shape(2), precision_of(MODEL, None, "bf16"))
    p1 = profile_path(es)
    assert p1.parent == cache_dir().resolve() and Path(os.environ["SPICA_CACHE_DIR"]).resolve() == p1.parent
    mtime = p1.stat().st_mtime_ns
    assert profile_path(es) == p1 and p1.stat().st_mtime_ns == mtime
    with np.load(p1) as z:
        assert set(z.files) == {"prefill_isl", "prefill_ttft_ms", "decode_active_kv_tokens",
                                "decode_context_length", "decode_itl"}
        assert all(z[k].dtype == np.float64 for k in z.files)
        assert z["decode_itl"].shape == (len(z["decode_active_kv_tokens"]), len(z["decode_context_length"]))


def test_profile_values_are_aic_step_estimates() -> None:
    es2 = EngineShape.of(MODEL, SKU, "vllm", backend_version(SKU, "vllm"), Shape(2), precision_of(MODEL, None, "bf16"))
    es4 = EngineShape.of(MODEL, SKU, "vllm", backend_version(SKU, "vllm"), Shape(4), precision_of(MODEL, None, "bf16"))
    assert es2.key() != es4.key()
    st2, st4 = StepTimes(profile_path(es2)), StepTimes(profile_path(es4))
    _, h2 = step_engine(es2)
    x = st2.prefill_isl[30]
    dispatch = PREFILL_DISPATCH_MS_PER_LAYER["vllm"] * model_facts(MODEL).num_layers   # vLLM's eager prefill launch
    assert st2.prefill_ms(x) == pytest.approx(h2.predict_prefill_latency(1, int(x), 0) + dispatch, rel=1e-9)
    # a decode grid point where kv / ctx is an exact batch size
    i = next(i for i, k in enumerate(st2.kv) if k > 0 and any(abs(k / c - round(k / c)) < 1e-9 and k / c >= 1
                                                               for c in st2.ctx))
    j = next(j for j, c in enumerate(st2.ctx) if abs(st2.kv[i] / c - round(st2.kv[i] / c)) < 1e-9 and st2.kv[i] / c >= 1)
    bs, ctx = round(st2.kv[i] / st2.ctx[j]), int(st2.ctx[j])
    assert st2.itl[i, j] == pytest.approx(h2.decode_step_latency(bs, ctx, 0), rel=1e-9)
    # TP4 is faster than TP2 for both phases, by AIC's own ratio
    assert st4.prefill_ms(4096) - dispatch < 0.7 * (st2.prefill_ms(4096) - dispatch)
    assert st4.decode_ms(64 * 4096, 64) < 0.8 * st2.decode_ms(64 * 4096, 64)


def test_gpu_and_backend_change_the_profile() -> None:
    v = backend_version(SKU, "vllm")
    h200 = StepTimes(profile_path(EngineShape.of(MODEL, SKU, "vllm", v, Shape(2), precision_of(MODEL, None, "bf16"))))
    h100 = StepTimes(profile_path(EngineShape.of(MODEL, "h100_sxm", "vllm", backend_version("h100_sxm", "vllm"),
                                                 Shape(2), precision_of(MODEL, None, "bf16"))))
    sgl = StepTimes(profile_path(EngineShape.of(MODEL, SKU, "sglang", backend_version(SKU, "sglang"), Shape(2), precision_of(MODEL, None, "bf16"))))
    assert h100.decode_ms(4096, 1) > 1.15 * h200.decode_ms(4096, 1)  # memory-bound decode: less HBM bandwidth
    assert sgl.decode_ms(64 * 4096, 64) != pytest.approx(h200.decode_ms(64 * 4096, 64), rel=1e-3)


# ---------------------------------------------------------------- engine args


def test_agg_payload_schema_and_kv_blocks_from_the_memory_model() -> None:
    s = make_candidate(agg_max_num_batched_tokens=[16384], agg_max_num_seqs=[512], agg_gpu_memory_utilization=0.85,
                    startup_time=30.0, aic_nextn=2)
    roles = build_engine_args(s)
    assert list(roles) == ["agg"]
    ra = roles["agg"]
    tokens = kv_tokens_per_rank(MODEL, SKU, "vllm", Shape(2), precision=precision_of(MODEL, None, "bf16"), max_num_tokens=16384, max_batch_size=512,
                                memory_fraction=0.85, nextn=2)
    assert ra.num_gpu_blocks == tokens // 64 and ra.replicas == 2
    p = ra.payload
    assert (p["tensor_parallel_size"], p["dp_size"], p["startup_time"]) == (2, 1, 30.0)
    e = p["engine"]
    assert (e["backend"], e["worker_type"], e["block_size"], e["max_num_seqs"], e["max_num_batched_tokens"],
            e["enable_prefix_caching"], e["aic_nextn"]) == ("vllm", "aggregated", 64, 512, 16384, True, 2)
    assert e["timing_model"]["provider"] == "dynamo_profile" and Path(e["timing_model"]["config"]["path"]).is_file()
    assert "kv_transfer_bandwidth" not in e and "native_host_offload" not in e
    # a smaller memory fraction leaves fewer blocks
    less = build_engine_args(make_candidate(agg_gpu_memory_utilization=0.6))["agg"].num_gpu_blocks
    assert less < build_engine_args(make_candidate())["agg"].num_gpu_blocks


def test_sglang_prefill_budgets_follow_the_knob_as_in_the_manifest() -> None:
    """SGLang's --chunked-prefill-size / --max-prefill-tokens per rank are the candidate's batched tokens; the
    replay schedules with the same budgets, not the runtime's 8,192 / 16,384."""
    sgl = build_engine_args(make_candidate(backend=["sglang"], agg_max_num_batched_tokens=[16384]))["agg"]
    assert sgl.payload["engine"]["sglang"] == {"chunked_prefill_size": 16384, "max_prefill_tokens": 16384}
    vllm = build_engine_args(make_candidate(agg_max_num_batched_tokens=[16384]))["agg"]
    assert "sglang" not in vllm.payload["engine"] and vllm.payload["engine"]["max_num_batched_tokens"] == 16384


def test_disagg_roles_carry_kv_transfer_on_prefill_only() -> None:
    roles = build_engine_args(make_candidate("disagg"))
    p, d = roles["prefill"].payload["engine"], roles["decode"].payload["engine"]
    assert (p["worker_type"], d["worker_type"]) == ("prefill", "decode")
    assert p["kv_transfer_bytes_per_token"] == 2 * 8 * 128 * 64 * 2  # Qwen3-32B bf16 GQA KV
    assert p["kv_transfer_bandwidth"] == 50.0 * 2   # H200: one 400 Gb/s NIC per GPU (AIC's inter_node_bw) × TP 2
    assert "kv_transfer_bandwidth" not in d and d["enable_prefix_caching"] is False
    assert roles["decode"].payload["tensor_parallel_size"] == 4 and roles["prefill"].shape == Shape(2)


def test_host_offload_maps_to_native_host_offload() -> None:
    s = make_candidate(num_g2_blocks=5000, kv_bytes_per_token=262144, bandwidth_g1_to_g2_gbps=25.0)
    e = build_engine_args(s)["agg"].payload["engine"]
    assert e["native_host_offload"] == {"num_host_blocks": 5000, "d2h_bandwidth_gbps": 25.0}
    assert e["kv_cache_bytes_per_token"] == 262144
    roles = build_engine_args(make_candidate("disagg", num_g2_blocks=100, kv_bytes_per_token=262144))
    assert "native_host_offload" in roles["prefill"].payload["engine"]
    assert "native_host_offload" not in roles["decode"].payload["engine"]


def test_runtime_rejection_carries_the_runtime_message() -> None:
    s = make_candidate(backend=["sglang"], num_g2_blocks=100, kv_bytes_per_token=262144)
    with pytest.raises(RejectedEngineArgsError, match="native_host_offload is supported only for backend=vllm"):
        build_engine_args(s)


def test_shape_without_kv_budget_is_infeasible() -> None:
    with pytest.raises(InfeasibleKVCapacityError, match="no KV cache"):
        build_engine_args(make_candidate(pc={"tp": 1}, agg_gpu_memory_utilization=0.3))


def test_router_kwargs() -> None:
    assert router_kwargs(Router("round_robin", overlap_score_credit=1.0)) == {"router_mode": "round_robin"}
    kw = router_kwargs(Router("kv_router", overlap_score_credit=0.5, prefill_load_scale=4.0, router_temperature=0.2))
    cfg = kw["router_config"]
    assert kw["router_mode"] == "kv_router"
    assert (cfg.overlap_score_credit, cfg.prefill_load_scale) == (0.5, 4.0)


# ---------------------------------------------------------------- traffic (§5)


def wl(**kw: Any) -> Workload:
    return Workload.model_validate(kw)


def test_request_count_scaling() -> None:
    assert request_count(wl(isl=1, osl=1, concurrency=256, num_request_ratio=10)) == 2560
    assert request_count(wl(isl=1, osl=1, request_rate=25, num_request_ratio=4)) == 100
    assert request_count(wl(isl=1, osl=1, request_rate=0.01, num_request_ratio=1)) == 1
    assert request_count(wl(isl=1, osl=1, kv_load_ratio=0.5, num_request_ratio=2), 37) == 74
    with pytest.raises(ValueError):
        request_count(wl(isl=1, osl=1, kv_load_ratio=0.5, num_request_ratio=2))


def test_replay_workload_kwargs_per_load_shape(tmp_path: Path) -> None:
    t = replay_workload(wl(trace_path="x.jsonl", arrival_speedup_ratio=2.0), trace_file="/abs/x.jsonl")
    assert (t.kind, t.trace_path) == ("trace", "/abs/x.jsonl")
    assert t.kwargs == {"arrival_speedup_ratio": 2.0, "trace_block_size": 512, "trace_format": "mooncake"}
    c = replay_workload(wl(trace_path="x.jsonl", replay_concurrency=24))
    assert c.kwargs["replay_concurrency"] == 24
    r = replay_workload(wl(isl=100, osl=10, request_rate=4, num_request_ratio=5, shared_prefix_ratio=0.5,
                           num_prefix_groups=3))
    assert (r.kind, r.kwargs["arrival_interval_ms"], r.kwargs["request_count"]) == ("synthetic", 250.0, 20)
    assert "replay_concurrency" not in r.kwargs and r.kwargs["shared_prefix_ratio"] == 0.5
    f = replay_workload(wl(isl=100, osl=10, concurrency=8, num_request_ratio=2, start_window_ms=0))
    assert (f.kwargs["replay_concurrency"], f.kwargs["request_count"]) == (8, 16)
    k = replay_workload(wl(isl=100, osl=10, kv_load_ratio=1.0, num_request_ratio=2, start_window_ms=0), concurrency=50)
    assert (k.kwargs["replay_concurrency"], k.kwargs["request_count"]) == (50, 100)
    staggered = replay_workload(wl(isl=100, osl=10, kv_load_ratio=1.0, num_request_ratio=2), concurrency=50,
                                directory=tmp_path)   # the shipped start window: 50 sessions of 2 requests
    lines = [json.loads(x) for x in Path(staggered.trace_path).read_text().splitlines()]
    assert staggered.kind == "trace" and len(lines) == 100 and len({x["session_id"] for x in lines}) == 50


@pytest.mark.parametrize("mode", ["agg", "disagg"])
def test_kv_load_ratio_follows_the_capacity_formula(mode: str) -> None:
    pc = {"tp": 2, "replicas": 3} if mode == "agg" else {"prefill": {"tp": 2}, "decode": {"tp": 4, "replicas": 2}}
    s = make_candidate(mode, pc)
    w = wl(isl=4000, osl=1000, kv_load_ratio=1.0, num_request_ratio=1)
    concurrency, kv = resolve_kv_load(s, w, 1.0)
    role, shape, reps = ("agg", Shape(2), 3) if mode == "agg" else ("decode", Shape(4), 2)
    seqs = 256
    tokens = kv_tokens_per_rank(MODEL, SKU, "vllm", shape, precision=precision_of(MODEL, None, "bf16"), max_num_tokens=8192, max_batch_size=seqs, memory_fraction=0.9)
    capacity = (tokens // 64) * 64 * 1 * reps
    assert kv.role_capacity_tokens[role] == capacity == kv.capacity_tokens
    assert kv.concurrency_capacity == capacity // 4500
    assert concurrency == capacity // 4500 and kv.ratio == 1.0
    assert resolve_kv_load(s, w, 0.0)[0] == 1
    assert resolve_kv_load(s, w, 0.5)[0] == (capacity // 4500) // 2
    with pytest.raises(InfeasibleKVCapacityError):
        resolve_kv_load(s, wl(isl=10_000_000, osl=10, kv_load_ratio=1.0, num_request_ratio=1), 1.0)

"""The planner policy: Dynamo planner rules tick by tick, and a real sine-wave replay with scaling in the loop."""
from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import pytest

from spica_core.space.precision import precision_of
from spica_core.config.model import SmartSearchConfig
from spica_core.evaluate.evaluation import EvalRequest, evaluate_one
from spica_core.space.facts import backend_version
from spica_core.space.parallel import ParallelConfig, Shape
from spica_core.errors import PlannerConfigError
from spica_core.planner import Budget, PlannerPolicy, PlannerSettings, RoleCapability
from spica_core.space.profiles import EngineShape, profile_path
from spica_core.deployment import Candidate, Context, LoadPredictorChoice
from examples.make_traces import write_sine_trace

MODEL = "Qwen/Qwen3-32B"
# load_180_5 with the default FPM sampling and sensitivity: load scaling every 5 s, 64/16 samples, 80 %, 5 obs.
BASE = Candidate.unroll(SmartSearchConfig.from_dict({"search_space": {
    "model_name": MODEL, "hardware_sku": "h200_sxm", "gpu_budget": 64, "deployment_mode": ["agg"],
    "router_mode": ["round_robin"], "agg_max_num_batched_tokens": [8192], "agg_max_num_seqs": [256],
    "planner_scaling_policy": ["load_180_5"], "planner_fpm_sampling": ["default"],
    "planner_load_sensitivity": ["default"]}, "workload": {"trace_path": "t.jsonl"}}).search_space,
    {"deployment_mode": "agg"}, ParallelConfig.from_dict("agg", {"tp": 1}))
CONTEXT_FIELDS = {f.name for f in dataclasses.fields(Context)}


def planner_candidate(**fields: Any) -> Candidate:
    """BASE with some planner fields (or context fields such as gpu_budget, min_endpoint) changed."""
    context = {k: v for k, v in fields.items() if k in CONTEXT_FIELDS}
    planner = {k: v for k, v in fields.items() if k not in CONTEXT_FIELDS}
    return dataclasses.replace(BASE, planner=dataclasses.replace(BASE.planner, **planner),
                               context=dataclasses.replace(BASE.context, **context))


@pytest.fixture(scope="module")
def profile() -> str:
    return str(profile_path(EngineShape.of(MODEL, "h200_sxm", "vllm", backend_version("h200_sxm", "vllm"), Shape(2), precision_of(MODEL, None, "bf16"))))


def fpm(*, kv: int = 0, reqs: int = 0, qp_tokens: int = 0, qp: int = 0, ptok: int = 0, wall: float = 0.01) -> dict[str, Any]:
    return {"wall_time": wall, "num_prefill_requests": 1 if ptok else 0, "sum_prefill_tokens": ptok,
            "sum_prefill_kv_tokens": ptok, "var_prefill_length": 0.0, "num_decode_requests": reqs,
            "sum_decode_kv_tokens": kv, "var_decode_kv_tokens": 0.0, "num_queued_prefill": qp,
            "sum_queued_prefill_tokens": qp_tokens, "var_queued_prefill_length": 0.0, "num_queued_decode": 0,
            "sum_queued_decode_kv_tokens": 0, "var_queued_decode_kv_tokens": 0.0}


def snap(t_s: float, decode: list[dict[str, Any]] | None = None, *, starting: int = 0, prefill=None,
         traffic: dict[str, Any] | None = None, n_decode: int | None = None) -> dict[str, Any]:
    """A replay snapshot: one FPM per listed worker (ids 0..n-1), in the runtime's key layout."""
    out: dict[str, Any] = {"tick_ordinal": int(t_s), "now_ms": t_s * 1000.0}
    for role, fpms, n in (("decode", decode or [], n_decode), ("prefill", prefill or [], None)):
        active = n if n is not None else len(fpms)
        out[f"{role}_fpm_snapshots"] = [{"worker_id": i, "dp_rank": 0, **f} for i, f in enumerate(fpms)]
        out[f"active_{role}_ids"] = list(range(active))
        out[f"active_{role}_count"] = active
        st = starting if role == "decode" else 0
        out[f"starting_{role}_count"] = st
        out[f"starting_{role}_ids"] = list(range(100, 100 + st))
        out[f"non_draining_{role}_count"] = active + st
        out[f"draining_{role}_count"] = 0
    out["traffic"] = traffic or {"duration_s": 5.0, "num_req": 0, "avg_isl": 0.0, "avg_osl": 0.0, "shape_count": 0}
    return out


def agg_policy(target: str = "throughput", *, max_kv: int = 100_000, gpus: int = 1, profile: str | None = None,
               **sample: Any) -> PlannerPolicy:
    ttft_ms, itl_ms = sample.pop("ttft_ms", 1000.0), sample.pop("itl_ms", 30.0)
    s = PlannerSettings.from_candidate(planner_candidate(**sample), target, ttft_ms=ttft_ms, itl_ms=itl_ms)
    assert s is not None
    cap = RoleCapability(gpus_per_replica=gpus, max_kv_tokens=max_kv, max_num_batched_tokens=8192, max_num_seqs=256,
                         context_length=40960, profile=profile)
    return PlannerPolicy(s, {"agg": cap})


# ---------------------------------------------------------------- settings


def test_settings_follow_planner_config_rules() -> None:
    assert PlannerSettings.from_candidate(planner_candidate(enable_load_scaling=False), "throughput") is None
    easy = PlannerSettings.from_candidate(planner_candidate(enable_throughput_scaling=True, enable_load_scaling=False),
                                          "throughput")
    assert easy is not None and easy.enable_load_scaling and not easy.enable_throughput_scaling
    hybrid = PlannerSettings.from_candidate(planner_candidate(enable_throughput_scaling=True), "sla",
                                            ttft_ms=500, itl_ms=30)
    assert hybrid is not None and hybrid.scale_interval_s == 5.0 and hybrid.max_gpu_budget == 64
    odd = PlannerSettings.from_candidate(planner_candidate(enable_throughput_scaling=True,
                                                           load_adjustment_interval_seconds=10,
                                                           throughput_adjustment_interval_seconds=25),
                                         "sla", ttft_ms=1, itl_ms=1)
    assert odd is not None and odd.scale_interval_s == 5.0
    with pytest.raises(PlannerConfigError, match="perfect square"):
        PlannerSettings.from_candidate(planner_candidate(fpm_sample_bucket_size=8), "throughput")
    with pytest.raises(PlannerConfigError, match="shorter"):
        PlannerSettings.from_candidate(planner_candidate(enable_throughput_scaling=True,
                                                         load_adjustment_interval_seconds=180), "sla", ttft_ms=1, itl_ms=1)
    with pytest.raises(PlannerConfigError, match="ttft_ms and itl_ms"):
        PlannerSettings.from_candidate(BASE, "sla", ttft_ms=500)
    assert agg_policy().initial_tick_ms() == 5000.0


# ---------------------------------------------------------------- easy mode


def test_consolidation_guard_holds_two_workers_at_055_and_merges_at_045() -> None:
    hold = agg_policy().on_tick(snap(5, [fpm(kv=55_000), fpm(kv=55_000)]))
    assert hold["target_decode"] is None and hold["next_tick_ms"] == 10_000.0
    down = agg_policy().on_tick(snap(5, [fpm(kv=45_000), fpm(kv=45_000)]))
    assert down["target_decode"] == 1


def test_threshold_strictness_and_queued_prefill_counts_as_kv() -> None:
    assert agg_policy().on_tick(snap(5, [fpm(kv=100_000)]))["target_decode"] is None  # u == 1.0: not > 1.0
    assert agg_policy().on_tick(snap(5, [fpm(kv=90_000, qp_tokens=10_001)]))["target_decode"] == 2
    lat = agg_policy("latency")
    assert lat.on_tick(snap(5, [fpm(kv=40_001)]))["target_decode"] == 2  # latency: u > 0.4


def test_any_hot_worker_scales_up_and_starting_workers_block() -> None:
    p = agg_policy()
    assert p.on_tick(snap(5, [fpm(kv=10), fpm(kv=120_000)]))["target_decode"] == 3
    # while the new worker starts, the load loop makes no decision
    assert p.on_tick(snap(10, [fpm(kv=10), fpm(kv=130_000)], starting=1))["target_decode"] is None
    # it became ready but has not published an FPM yet: coverage mismatch, no decision
    assert p.on_tick(snap(15, [fpm(kv=10), fpm(kv=130_000)], n_decode=3))["target_decode"] is None
    assert p.on_tick(snap(20, [fpm(kv=10), fpm(kv=130_000), fpm(kv=0)]))["target_decode"] == 4


def test_first_tick_repairs_min_endpoint_and_gpu_ceiling() -> None:
    assert agg_policy(min_endpoint=3).on_tick(snap(5, [fpm(kv=10)]))["target_decode"] == 3
    ten = [fpm(kv=50_000)] * 10
    assert agg_policy(gpu_budget=8).on_tick(snap(5, ten))["target_decode"] == 8
    assert agg_policy(gpu_budget=8, gpus=2).on_tick(snap(5, [fpm(kv=150_000)] * 4))["target_decode"] is None


def test_budget_guards() -> None:
    b = Budget(hi=8, lo=-1)
    assert b.guard1(4, 5, 2, 1) == 4          # at the ceiling: hold a scale-up
    assert b.guard1(3, 6, 2, 1) == 4          # clamp to the ceiling, direction kept
    assert b.guard1(5, 6, 2, 1) == 4          # out of band: reconcile
    assert Budget(hi=-1, lo=6).guard1(3, 2, 2, 1) == 3  # at the floor: hold a scale-down
    assert b.guard2((2, 2), (3, 3), (2, 2), (1, 1)) == (2, 2)
    assert b.guard2((1, 3), (2, 2), (2, 2), (1, 1)) == (2, 2)  # opposing rebalance at the ceiling fits
    assert b.clamp2(4, 4, 2, 2, 1, 1) == (2, 2)


# ---------------------------------------------------------------- sla mode


def test_sla_mode_waits_for_min_observations(profile: str) -> None:
    p = agg_policy("sla", profile=profile, max_kv=1_000_000, load_min_observations=5, itl_ms=5.0)
    busy = [fpm(kv=200_000, reqs=50), fpm(kv=200_000, reqs=50)]
    assert p.on_tick(snap(5, busy))["target_decode"] is None       # 2 observations
    assert p.on_tick(snap(10, busy))["target_decode"] is None      # 4
    idle = [fpm(wall=0.0), fpm(wall=0.0)]
    assert p.on_tick(snap(15, idle))["target_decode"] is None      # idle heartbeats do not count
    assert p.on_tick(snap(20, busy))["target_decode"] == 3         # 6 ≥ 5: every engine misses 5 ms ITL


def test_sla_one_hot_engine_does_not_scale_up_but_all_hot_engines_do(profile: str) -> None:
    hot, cold = fpm(kv=400_000, reqs=100), fpm(kv=4_000, reqs=1)

    def decide(engines: list[dict[str, Any]]) -> tuple[int | None, list[float | None]]:
        p = agg_policy("sla", profile=profile, max_kv=1_000_000, load_min_observations=1, itl_ms=15.0)
        target = p.on_tick(snap(5, engines))["target_decode"]
        return target, [p.estimator.itl("decode", f, 1, False) for f in engines]

    target, itls = decide([hot, hot])
    assert all(itl is not None and itl > 15.0 for itl in itls)
    assert target == 3                                      # every engine misses the 15 ms ITL: one more
    target, (hot_itl, cold_itl) = decide([hot, cold])
    assert hot_itl is not None and cold_itl is not None and hot_itl > 15.0 > cold_itl
    assert target is None                                   # one engine still meets it: hold at 2
    assert decide([cold, cold])[0] == 1                     # both would meet it merged: consolidate


def test_higher_sensitivity_scales_down_more_readily(profile: str) -> None:
    state = [fpm(kv=60_000, reqs=20), fpm(kv=60_000, reqs=20)]
    probe = agg_policy("sla", profile=profile, max_kv=1_000_000, load_min_observations=1)
    probe.on_tick(snap(5, state))
    post = probe.estimator.itl("decode", state[0], 2.0, True)  # ITL if one engine took both loads
    assert post is not None
    itl_sla = post / 0.8  # post-consolidation ITL is 80 % of the SLA: 70 refuses, 90 allows
    decisions = {}
    for sens in (70, 90):
        p = agg_policy("sla", profile=profile, max_kv=1_000_000, load_min_observations=1,
                       load_scaling_down_sensitivity=sens, itl_ms=itl_sla)
        decisions[sens] = p.on_tick(snap(5, state))["target_decode"]
    assert decisions == {70: None, 90: 1}


def test_throughput_target_is_demand_over_engine_capacity(profile: str) -> None:
    p = agg_policy("sla", profile=profile, max_kv=1_000_000, load_min_observations=1, enable_load_scaling=False,
                   enable_throughput_scaling=True, throughput_adjustment_interval_seconds=60,
                   load_predictor=LoadPredictorChoice("constant"), ttft_ms=1000.0, itl_ms=25.0)
    busy = [fpm(kv=40_000, reqs=10)]
    for t in range(5, 60, 5):
        assert p.on_tick(snap(t, busy, traffic={"duration_s": 5.0, "num_req": 0}))["target_decode"] is None
    window = {"duration_s": 5.0, "num_req": 240, "avg_isl": 3000.0, "avg_osl": 300.0, "shape_count": 240}
    out = p.on_tick(snap(60, busy, traffic=window))
    assert p.throughput is not None
    rps = p.throughput.engine_rps("decode", 3000.0, 300.0)
    assert rps is not None and rps > 0
    assert out["target_decode"] == min(1 + 8, math.ceil(240 / 60.0 / rps))
    assert out["target_decode"] > 1


# ---------------------------------------------------------------- in the loop


def sine_config(tmp_path: Path, mode: str, *, duration_s: float, period_s: float, seed: int,
                **engines: list[int]) -> SmartSearchConfig:
    """A load-scaling (load_180_5) search over a sine-wave trace, 16 GPUs, SLA 1000 ms TTFT / 20 ms ITL."""
    trace = write_sine_trace(tmp_path / "sine.jsonl", duration_s=duration_s, base_rps=3.0, amplitude_rps=2.5,
                             period_s=period_s, isl=3000, osl=300, seed=seed)
    space = {"model_name": MODEL, "hardware_sku": "h200_sxm", "deployment_mode": [mode], "gpu_budget": 16,
             "router_mode": ["round_robin"], "planner_scaling_policy": ["load_180_5"],
             "planner_fpm_sampling": ["default"], "planner_load_sensitivity": ["default"], "startup_time": 30.0,
             **engines}
    return SmartSearchConfig.from_dict({"search_space": space, "workload": {"trace_path": str(trace)},
                                        "goal": {"target": "goodput_per_gpu", "sla": {"ttft_ms": 1000, "itl_ms": 20}}})


def test_sine_wave_load_scaling_scales_up_and_down_and_saves_gpu_hours(tmp_path: Path) -> None:
    cfg = sine_config(tmp_path, "agg", duration_s=900, period_s=450, seed=1,
                      agg_max_num_batched_tokens=[8192], agg_max_num_seqs=[256])
    scaled = Candidate.unroll(cfg.search_space, {"deployment_mode": "agg"}, ParallelConfig.from_dict("agg", {"tp": 2}))
    static = Candidate.unroll(cfg.search_space.model_copy(update={"planner_scaling_policy": ["disabled"]}),
                              {"deployment_mode": "agg"}, ParallelConfig.from_dict("agg", {"tp": 2, "replicas": 8}))
    dyn = evaluate_one(EvalRequest.from_config(cfg, scaled))
    fixed = evaluate_one(EvalRequest.from_config(cfg, static))
    assert dyn.status == fixed.status == "feasible", (dyn.reason, fixed.reason)
    moves = [(d["from"]["decode"], d["to"]["decode"]) for d in dyn.planner["decisions"]]
    assert any(b > a for a, b in moves) and any(b < a for a, b in moves)
    assert max(b for _, b in moves) >= 4
    assert dyn.report["planner_total_ticks"] == dyn.planner["ticks"] >= 900 / 5 - 1
    assert dyn.report["completed_requests"] == fixed.report["completed_requests"]
    assert dyn.report["gpu_hours"] < 0.7 * fixed.report["gpu_hours"]
    assert "planner_total_ticks" not in fixed.report


def test_disagg_load_scaling_moves_the_prefill_pool_in_a_real_replay(tmp_path: Path) -> None:
    cfg = sine_config(tmp_path, "disagg", duration_s=600, period_s=600, seed=2, prefill_max_num_batched_tokens=[8192],
                      prefill_max_num_seqs=[4], decode_max_num_seqs=[256])
    pc = ParallelConfig.from_dict("disagg", {"prefill": {"tp": 2}, "decode": {"tp": 2}})
    candidate = Candidate.unroll(cfg.search_space, {"deployment_mode": "disagg"}, pc)
    out = evaluate_one(EvalRequest.from_config(cfg, candidate))
    assert out.status == "feasible", out.reason
    prefill_moves = [(d["from"]["prefill"], d["to"]["prefill"]) for d in out.planner["decisions"]]
    assert any(b > a for a, b in prefill_moves)
    assert all(set(d["to"]) == {"prefill", "decode"} for d in out.planner["decisions"])
    assert out.report["planner_total_ticks"] == out.planner["ticks"]
    assert out.report["gpu_hours"] > 4 * out.report["duration_ms"] / 3.6e6 - 1e-9  # never below 1P + 1D of TP2

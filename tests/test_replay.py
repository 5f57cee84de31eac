"""Real replays through Dynamo's offline simulator with aiconfigurator-core timing: do they move the right way?"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from spica_core.space.precision import precision_of
from spica_core.config import SmartSearchConfig
from spica_core.deployment import Candidate
from spica_core.evaluate import EvalRequest, Outcome, evaluate_one, sla_kwargs
from spica_core.evaluate.engine_args import build_engine_args, router_kwargs
from spica_core.space.profiles import PREFILL_DISPATCH_MS_PER_LAYER, EngineShape, step_engine
from spica_core.evaluate.replay import ReplaySpec, run_replay
from examples.make_traces import write_poisson_trace
from spica_core.evaluate.workload import replay_workload
from spica_core.space.facts import backend_version, model_facts
from spica_core.space.parallel import ParallelConfig, Shape

MODEL = "Qwen/Qwen3-32B"


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("traces")
    return {
        # light load: one request at a time, so latencies are step times, not queueing
        "light": write_poisson_trace(d / "light.jsonl", num_requests=30, rate_rps=0.2, isl=4000, osl=200, seed=4),
        # 100 groups × 6144-token shared prefixes: more prefix working set than one worker's KV holds
        "prefix": write_poisson_trace(d / "prefix.jsonl", num_requests=600, rate_rps=4, isl=8000, osl=100,
                                      prefix_groups=100, prefix_blocks=12, seed=3),
        # sparse short requests: a finished prefill always finds its decode worker idle
        "sparse": write_poisson_trace(d / "sparse.jsonl", num_requests=20, rate_rps=0.1, isl=4000, osl=20, seed=6),
        "busy": write_poisson_trace(d / "busy.jsonl", num_requests=400, rate_rps=6, isl=3000, osl=300, seed=5),
    }


def config(trace: Path, goal: dict[str, Any] | None = None, mode: str = "agg", **space: Any) -> SmartSearchConfig:
    base: dict[str, Any] = {"model_name": MODEL, "hardware_sku": "h200_sxm", "deployment_mode": [mode],
                            "router_mode": ["round_robin"], "planner_scaling_policy": ["disabled"],
                            "agg_max_num_batched_tokens": [8192], "agg_max_num_seqs": [256],
                            "prefill_max_num_batched_tokens": [8192], "prefill_max_num_seqs": [4],
                            "decode_max_num_seqs": [256], "overlap_score_credit": [1.0], "prefill_load_scale": [1.0],
                            "router_temperature": [0.0]}
    base.update(space)
    return SmartSearchConfig.from_dict({"search_space": base, "workload": {"trace_path": str(trace)},
                                        "goal": goal or {"target": "throughput"}})


def evaluate(cfg: SmartSearchConfig, pc: dict[str, Any], **kw: Any) -> Outcome:
    mode = cfg.search_space.deployment_mode[0]
    candidate = Candidate.unroll(cfg.search_space, {"deployment_mode": mode}, ParallelConfig.from_dict(mode, pc))
    out = evaluate_one(EvalRequest.from_config(cfg, candidate, trace_file=cfg.workload.trace_path, **kw))
    assert out.status == "feasible", out.reason
    return out


def aic_steps(sku: str, tp: int) -> tuple[float, float]:
    """AIC's own prefill (4000 tokens, plus vLLM's per-layer dispatch) and single decode step (bs 1, ctx 4100)."""
    _, h = step_engine(EngineShape.of(MODEL, sku, "vllm", backend_version(sku, "vllm"), Shape(tp), precision_of(MODEL, None, "bf16")))
    dispatch = PREFILL_DISPATCH_MS_PER_LAYER["vllm"] * model_facts(MODEL).num_layers
    return h.predict_prefill_latency(1, 4000, 0) + dispatch, h.decode_step_latency(1, 4100, 0)


def test_tp4_vs_tp2_moves_ttft_and_itl_by_aics_ratio(traces: dict[str, Path]) -> None:
    cfg = config(traces["light"])
    r2 = evaluate(cfg, {"tp": 2}).report
    r4 = evaluate(cfg, {"tp": 4}).report
    (p2, d2), (p4, d4) = aic_steps("h200_sxm", 2), aic_steps("h200_sxm", 4)
    assert r4["median_ttft_ms"] < r2["median_ttft_ms"] and r4["median_itl_ms"] < r2["median_itl_ms"]
    assert r4["median_ttft_ms"] / r2["median_ttft_ms"] == pytest.approx(p4 / p2, rel=0.10)
    assert r4["median_itl_ms"] / r2["median_itl_ms"] == pytest.approx(d4 / d2, rel=0.10)
    # absolute: a lone request's TTFT is its prefill pass, its ITL one decode step
    assert r2["median_ttft_ms"] == pytest.approx(p2, rel=0.10)
    assert r2["median_itl_ms"] == pytest.approx(d2, rel=0.10)
    assert r4["gpu_hours"] / r2["gpu_hours"] == pytest.approx(2.0, rel=0.02)


def test_h100_decodes_slower_than_h200(traces: dict[str, Path]) -> None:
    h200 = evaluate(config(traces["light"]), {"tp": 2}).report
    h100 = evaluate(config(traces["light"], hardware_sku="h100_sxm"), {"tp": 2}).report
    (_, d200), (_, d100) = aic_steps("h200_sxm", 2), aic_steps("h100_sxm", 2)
    assert h100["median_itl_ms"] > 1.15 * h200["median_itl_ms"]
    assert h100["median_itl_ms"] / h200["median_itl_ms"] == pytest.approx(d100 / d200, rel=0.10)


def test_kv_router_raises_prefix_hit_rate_over_round_robin(traces: dict[str, Path]) -> None:
    kw = {"agg_gpu_memory_utilization": 0.5}
    rr = evaluate(config(traces["prefix"], **kw), {"tp": 2, "replicas": 4}).report
    kv = evaluate(config(traces["prefix"], router_mode=["kv_router"], **kw), {"tp": 2, "replicas": 4}).report
    assert kv["prefix_cache_reused_ratio"] > rr["prefix_cache_reused_ratio"] + 0.08
    assert kv["mean_ttft_ms"] < rr["mean_ttft_ms"]


def test_disagg_ttft_includes_the_kv_transfer(traces: dict[str, Path]) -> None:
    cfg = config(traces["sparse"], mode="disagg")
    pc = ParallelConfig.from_dict("disagg", {"prefill": {"tp": 2}, "decode": {"tp": 2}})
    candidate = Candidate.unroll(cfg.search_space, {"deployment_mode": "disagg"}, pc).resolved(
        backend_version=backend_version("h200_sxm", "vllm"))
    roles = build_engine_args(candidate)
    eng = roles["prefill"].payload["engine"]
    bpt, bw = eng["kv_transfer_bytes_per_token"], eng["kv_transfer_bandwidth"]

    def replay(roles_: dict[str, Any]) -> dict[str, Any]:
        spec = ReplaySpec(roles_, replay_workload(cfg.workload), router_kwargs(candidate.router),
                          capture_per_request=True)
        return run_replay(spec)

    with_transfer = replay(roles)
    fast = dict(roles)
    payload = {**roles["prefill"].payload, "engine": {**eng, "kv_transfer_bandwidth": 1e9}}
    fast["prefill"] = dataclasses.replace(roles["prefill"], payload=payload)
    no_transfer = replay(fast)
    rows, base = with_transfer["per_request"], no_transfer["per_request"]
    held = sorted(r["destination_activated_ms"] - r["source_held_ms"] - r["input_length"] * bpt / (bw * 1e9) * 1e3
                  for r in rows)
    # the hand-off lasts prompt bytes / bandwidth (longer only while the link still carries another request)
    assert held[0] > -1e-6 and held[len(held) // 2] == pytest.approx(0.0, abs=1e-6)
    # and it is part of TTFT: a request that met idle workers is later by exactly the transfer
    alone = [(a, b) for a, b in zip(rows, base) if not a.get("prefill_admit_ms")
             or a["prefill_admit_ms"] == pytest.approx(a["arrival_time_ms"], abs=1e-6)]
    assert len(alone) >= len(rows) - 4
    expected = [a["input_length"] * bpt / (bw * 1e9) * 1000.0 for a, _ in alone]
    got = sorted(a["ttft_ms"] - b["ttft_ms"] - e for (a, b), e in zip(alone, expected))
    assert got[len(got) // 2] == pytest.approx(0.0, abs=0.05)
    assert min(expected) > 5.0  # the transfer is a visible part of TTFT (4000 tokens × 256 KiB at 100 GB/s)


def test_goodput_equals_recomputation_from_per_request_data(traces: dict[str, Path]) -> None:
    goal = {"target": "goodput", "sla": {"ttft_ms": 400.0, "itl_ms": 32.0}}
    cfg = config(traces["busy"], goal=goal)
    out = evaluate(cfg, {"tp": 2, "replicas": 2}, capture_per_request=True)
    rep, rows = out.report, out.per_request
    assert rows is not None and len(rows) == rep["completed_requests"]
    good = [r for r in rows if r["terminal_status"] == "completed" and r["ttft_ms"] <= 400.0
            and (r["output_length"] <= 1 or r["itl_ms"] <= 32.0)]
    assert 0 < len(good) < len(rows)  # the SLA bites: some requests pass, some fail
    assert rep["goodput_completed_requests"] == len(good)
    tok_s = sum(r["output_length"] for r in good) / (rep["duration_ms"] / 1000.0)
    assert rep["goodput_output_throughput_tok_s"] == pytest.approx(tok_s, rel=1e-9)
    assert out.score == pytest.approx(tok_s, rel=1e-9)
    assert sla_kwargs(cfg.goal) == {"sla_ttft_ms": 400.0, "sla_itl_ms": 32.0}


def test_latency_means_come_from_exact_sums_whatever_order_the_requests_are_in() -> None:
    """A staggered closed loop replays as sessions, which the runtime sums in an order that varies between
    processes; the summary's means and deviations are recomputed from the per-request records exactly."""
    from spica_core.evaluate.replay import exact_moments

    records = [{"terminal_status": "completed", "ttft_ms": 0.1 * (i % 7) + 1e3 * (i % 3), "ttst_ms": 5.0 + i,
                "e2e_latency_ms": 2e3 + 0.3 * i, "output_length": 10} for i in range(200)]
    records.append({"terminal_status": "rejected", "ttft_ms": None, "e2e_latency_ms": None, "output_length": 0})
    summary = {f"{s}_{k}": 0.0 for s in ("mean", "std") for k in ("ttft_ms", "ttst_ms", "e2e_latency_ms", "tpot_ms")}
    summary.update(num_ttft_samples=200, num_e2e_latency_samples=200, num_tpot_samples=200)
    forward, backward = exact_moments(records, summary), exact_moments(records[::-1], summary)
    assert forward == backward and set(forward) == set(summary) - {"num_ttft_samples", "num_e2e_latency_samples",
                                                                   "num_tpot_samples"}
    ttfts = [r["ttft_ms"] for r in records[:200]]
    assert forward["mean_ttft_ms"] == pytest.approx(sum(ttfts) / 200, rel=1e-15)
    assert forward["std_ttft_ms"] == pytest.approx(float(np.std(ttfts)), rel=1e-12)      # population deviation
    assert forward["mean_tpot_ms"] == pytest.approx((2e3 + 0.3 * 99.5 - sum(ttfts) / 200) / 9, rel=1e-12)
    summary["num_tpot_samples"] = 150                      # the runtime counted otherwise: its value stands
    assert "mean_tpot_ms" not in exact_moments(records, summary)

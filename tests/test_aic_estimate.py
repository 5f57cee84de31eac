"""AI Configurator's own static agg estimate of a candidate (spica_core.emit.aic_estimate)."""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import pytest

from spica_core.config.model import SmartSearchConfig
from spica_core.emit.aic_estimate import AICEstimate, _aic_cannot, _point, aic_estimate
from spica_core.deployment import Candidate
from spica_core.space.parallel import ParallelConfig

SPACE: dict[str, Any] = {"model_name": "Qwen/Qwen3-32B", "hardware_sku": "h200_sxm", "gpu_budget": 8}
STATIC = {"router_mode": "round_robin", "planner_scaling_policy": "disabled"}


def candidate(mode: str, selection: dict[str, Any], parallel: dict[str, Any]) -> Candidate:
    cfg = SmartSearchConfig.from_dict({"search_space": {**SPACE, "deployment_mode": [mode]},
                                       "workload": {"isl": 4000, "osl": 500, "concurrency": 32,
                                                    "num_request_ratio": 4}})
    return Candidate.unroll(cfg.search_space, {"deployment_mode": mode, "backend": "vllm", **selection},
                            ParallelConfig.from_dict(mode, parallel))


def agg(tp: int, replicas: int, *, max_num_seqs: int = 256, max_num_batched_tokens: int = 8192,
        **selection: Any) -> Candidate:
    sel = {**STATIC, "agg_max_num_seqs": max_num_seqs, "agg_max_num_batched_tokens": max_num_batched_tokens,
           **selection}
    return candidate("agg", sel, {"tp": tp, "replicas": replicas})


QUICKSTART = agg(2, 4)   # examples/quickstart.yaml's agg candidate: Qwen3-32B, h200_sxm, vLLM, 4 × TP2


def direct_run_agg(tp: int, batch_size: int, ctx_tokens: int, isl: int = 4000, osl: int = 500) -> dict[str, Any]:
    """AIC's run_agg called straight through the core SDK (the CLI's _run_agg_estimate steps)."""
    from aiconfigurator_core.sdk.backends.factory import get_backend
    from aiconfigurator_core.sdk.config import RuntimeConfig
    from aiconfigurator_core.sdk.config_builders import build_model_config
    from aiconfigurator_core.sdk.models import get_model
    from aiconfigurator_core.sdk.models.helpers import resolve_context_fmha_by_data
    from aiconfigurator_core.sdk.perf_database import get_database_view

    mc = build_model_config(tp_size=tp, pp_size=1, attention_dp_size=1, moe_tp_size=1, moe_ep_size=1)
    db = get_database_view("h200_sxm", "vllm", "current")
    resolve_context_fmha_by_data(mc, "Qwen/Qwen3-32B", db, "vllm", is_context_role=True)
    model = get_model("Qwen/Qwen3-32B", mc, "vllm")
    summary = get_backend("vllm").run_agg(model, db, RuntimeConfig(isl=isl, osl=osl, batch_size=batch_size),
                                          ctx_tokens=ctx_tokens)
    return summary.get_result_dict()


@pytest.fixture(scope="module")
def quickstart_32() -> AICEstimate:
    est = aic_estimate(QUICKSTART, isl=4000, osl=500, concurrency=32)
    assert est is not None
    return est


def test_quickstart_estimate_is_positive_finite_and_per_gpu(quickstart_32: AICEstimate) -> None:
    est = quickstart_32
    numbers = (est.ttft_ms, est.tpot_ms, est.output_throughput_tok_s, est.output_throughput_tok_s_per_gpu)
    assert all(math.isfinite(x) and x > 0 for x in numbers)
    assert QUICKSTART.used_gpus == 8
    assert est.output_throughput_tok_s_per_gpu == pytest.approx(est.output_throughput_tok_s / 8, rel=1e-12)
    # the static point: 32 in flight over 4 replicas = batch 8 per replica, one 4000-token prompt per step
    assert (est.isl, est.osl, est.concurrency, est.requested_concurrency) == (4000, 500, 32, 32)
    assert (est.batch_size, est.ctx_tokens) == (8, 4000)
    assert est.source == "aiconfigurator-core 0.12.0 vllm 0.24.0 static agg"
    assert est.kv_cache_warning is None
    # plausible for Qwen3-32B TP2 on H200 at isl 4000: a prefill of a few hundred ms, decode steps of ~10-30 ms
    assert 100 < est.ttft_ms < 2000 and 5 < est.tpot_ms < 50 and est.ttft_ms > est.tpot_ms
    # Little's law holds: 32 users each producing osl-1 tokens per (ttft + tpot·(osl-1))
    request_ms = est.ttft_ms + est.tpot_ms * 499
    assert est.output_throughput_tok_s <= 32 * 499 * 1000 / request_ms * (1 + 1e-9)


def test_numbers_are_aics_own_run_agg(quickstart_32: AICEstimate) -> None:
    r = direct_run_agg(tp=2, batch_size=8, ctx_tokens=4000)
    assert quickstart_32.ttft_ms == pytest.approx(float(r["ttft"]), rel=1e-9)
    assert quickstart_32.tpot_ms == pytest.approx(float(r["tpot"]), rel=1e-9)
    assert quickstart_32.output_throughput_tok_s == pytest.approx(4 * float(r["tokens/s"]), rel=1e-9)
    assert quickstart_32.output_throughput_tok_s_per_gpu == pytest.approx(float(r["tokens/s/gpu"]), rel=1e-9)


def test_matches_the_cli_estimate_published_in_aic_md() -> None:
    # aic.md §7.4/§8: cli_estimate(Qwen3-32B, h200_sxm, agg, vllm, isl 4000, osl 500, batch 64, tp 4)
    # = TTFT 324.3 ms, TPOT 27.85 ms, 561.48 tok/s/gpu (the CLI default's agg top-1, 2 × TP4).
    est = aic_estimate(agg(4, 2), isl=4000, osl=500, concurrency=128)
    assert est is not None and est.batch_size == 64 and est.concurrency == 128
    assert est.ttft_ms == pytest.approx(324.3, abs=0.05)
    assert est.tpot_ms == pytest.approx(27.85, abs=0.005)
    assert est.output_throughput_tok_s_per_gpu == pytest.approx(561.48, abs=0.005)


def test_throughput_and_tpot_grow_with_concurrency(quickstart_32: AICEstimate) -> None:
    low = aic_estimate(QUICKSTART, isl=4000, osl=500, concurrency=8)
    assert low is not None and low.batch_size == 2 and low.concurrency == 8
    assert quickstart_32.output_throughput_tok_s > 2 * low.output_throughput_tok_s
    assert quickstart_32.tpot_ms > low.tpot_ms
    assert quickstart_32.ttft_ms > low.ttft_ms   # vLLM's queueing factor grows with the batch


def test_rounding_and_the_max_num_seqs_cap() -> None:
    # 30 over 4 replicas rounds up to 8 per replica: AIC estimated 32 in flight
    est = aic_estimate(QUICKSTART, isl=4000, osl=500, concurrency=30)
    assert est is not None and (est.batch_size, est.concurrency, est.requested_concurrency) == (8, 32, 30)
    # 4000 in flight against max_num_seqs 16: each replica runs 16
    capped = aic_estimate(agg(2, 4, max_num_seqs=16), isl=4000, osl=500, concurrency=4000)
    assert capped is not None and (capped.batch_size, capped.concurrency) == (16, 64)


def test_a_prompt_longer_than_the_token_budget_is_chunked() -> None:
    est = aic_estimate(agg(2, 4, max_num_batched_tokens=2048), isl=4000, osl=500, concurrency=32)
    assert est is not None and est.ctx_tokens == 2048
    r = direct_run_agg(tp=2, batch_size=8, ctx_tokens=2048)
    assert est.ttft_ms == pytest.approx(float(r["ttft"]), rel=1e-9)


def test_a_batch_over_the_kv_capacity_keeps_numbers_with_the_warning() -> None:
    # 180 × 4500 tokens is over a TP2 rank's ~0.75 M-token KV pool at gpu_memory_utilization 0.9,
    # but still inside the GPU: the CLI answers with a warning
    big = agg(2, 4, max_num_seqs=512)
    est = aic_estimate(big, isl=4000, osl=500, concurrency=4 * 180)
    assert est is not None and est.batch_size == 180
    assert est.kv_cache_warning is not None and "KV cache" in est.kv_cache_warning
    r = direct_run_agg(tp=2, batch_size=180, ctx_tokens=4000)
    assert est.output_throughput_tok_s == pytest.approx(4 * float(r["tokens/s"]), rel=1e-9)
    # 512 × 16500 tokens of KV do not fit in the GPU at all: the CLI's OOM error, so no estimate
    assert aic_estimate(big, isl=16000, osl=500, concurrency=4 * 512) is None


def test_repeated_points_are_cached(quickstart_32: AICEstimate) -> None:
    before = _point.cache_info().hits
    again = aic_estimate(QUICKSTART, isl=4000, osl=500, concurrency=32)
    assert again == quickstart_32
    assert _point.cache_info().hits == before + 1


def test_disagg_and_planner_candidates_have_no_estimate() -> None:
    disagg = candidate("disagg", {"prefill_max_num_seqs": 4, "prefill_max_num_batched_tokens": 16384,
                                  "decode_max_num_seqs": 512, "decode_max_num_batched_tokens": 8192, **STATIC},
                       {"prefill": {"tp": 1}, "decode": {"tp": 2}})
    assert aic_estimate(disagg, isl=4000, osl=500, concurrency=32) is None
    planned = agg(2, 4, planner_scaling_policy="load_180_5", planner_fpm_sampling="default",
                  planner_load_sensitivity="default")
    assert planned.planner.scales
    assert aic_estimate(planned, isl=4000, osl=500, concurrency=32) is None


def test_no_perf_data_gives_none() -> None:
    # h100_pcie has a system spec but no perf database (aic.md §2)
    no_data = replace(QUICKSTART, hardware={"agg": "h100_pcie"})
    assert aic_estimate(no_data, isl=4000, osl=500, concurrency=32) is None


def test_bad_arguments_raise() -> None:
    with pytest.raises(ValueError):
        aic_estimate(QUICKSTART, isl=4000, osl=500, concurrency=0)


def test_only_aics_expected_errors_mean_no_estimate() -> None:
    from aiconfigurator_core.sdk.errors import PerfDataNotAvailableError
    from aiconfigurator_core.sdk.rust_engine_step import RustEngineUnsupportedError

    assert _aic_cannot(PerfDataNotAvailableError("context MLA data missing for fmha fp8"))
    assert _aic_cannot(ValueError("Parallelism width mismatch"))
    assert _aic_cannot(RustEngineUnsupportedError("no engine"))
    assert not _aic_cannot(KeyError("tokens/s"))      # a bug: propagates
    assert not _aic_cannot(TypeError("bad call"))

"""What the replay leaves out of a served request: the serving path before the first token (a constant per
backend, fitted out of fold), SGLang's polling for new requests (``scheduler_recv_interval``) and the
per-layer dispatch time of a vLLM prefill pass. Each term moves the prediction the way its cause says, and an
SLA is held against the served latency."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from spica_core.config.model import SmartSearchConfig
from spica_core.deployment import Candidate
from spica_core.evaluate import EvalRequest, evaluate_one
from spica_core.evaluate.serving import (SERVING_FILE, load_serving, polling_delay_ms, served_report, served_requests,
                                        served_sla)
from spica_core.space.parallel import ParallelConfig

MODEL, SKU = "Qwen/Qwen3-32B", "h200_sxm"


def serving_file(tmp_path: Path, **ms: float) -> Path:
    """A serving file of its own name per content (files are read once per path and process)."""
    path = tmp_path / ("serving-" + "-".join(f"{b}{v:g}" for b, v in sorted(ms.items())) + ".json")
    path.write_text(json.dumps({"schema": 1, "request_overhead_ms": {b: {"ms": v} for b, v in ms.items()},
                                "start_window_ms": {"ms": 0.0}}))
    return path


def test_the_serving_path_delays_first_token_and_completion_not_tokens() -> None:
    report = {"mean_ttft_ms": 50.0, "p99_ttft_ms": 90.0, "std_ttft_ms": 7.0, "median_e2e_latency_ms": 900.0,
              "mean_itl_ms": 9.0, "output_throughput_tok_s": 1000.0, "max_ttft_ms": float("nan")}
    served = served_report(report, 120.0)
    assert served["mean_ttft_ms"] == 170.0 and served["p99_ttft_ms"] == 210.0
    assert served["median_e2e_latency_ms"] == 1020.0
    assert served["std_ttft_ms"] == 7.0 and served["mean_itl_ms"] == 9.0 and served["output_throughput_tok_s"] == 1000
    assert served["serving_overhead_ms"] == 120.0 and report["mean_ttft_ms"] == 50.0    # a copy
    [one] = served_requests([{"ttft_ms": 40.0, "e2e_latency_ms": 400.0, "first_token_ms": 40.0}], 10.0)
    assert one == {"ttft_ms": 50.0, "e2e_latency_ms": 410.0, "first_token_ms": 40.0}


def test_the_replay_is_held_to_the_sla_minus_the_serving_path() -> None:
    sla = {"sla_ttft_ms": 500.0, "sla_itl_ms": 30.0}
    assert served_sla(sla, 120.0) == {"sla_ttft_ms": 380.0, "sla_itl_ms": 30.0}
    assert served_sla({"sla_e2e_ms": 100.0}, 120.0)["sla_e2e_ms"] == pytest.approx(1e-3)   # nothing can meet it
    assert served_sla(sla, 0.0) == sla


def test_the_shipped_serving_file_covers_every_backend() -> None:
    table = load_serving(SERVING_FILE)
    assert set(table.request_overhead_ms) == {"sglang", "trtllm", "vllm"}
    assert all(v >= 0 for v in table.request_overhead_ms.values())
    assert table.overhead_ms("tgi") == 0.0


def test_sglang_polling_waits_half_the_interval_in_decode_steps_on_an_aggregated_worker_only() -> None:
    assert polling_delay_ms("sglang", "agg", 30, 12.0) == pytest.approx(29 / 2 * 12.0)
    assert polling_delay_ms("sglang", "agg", 1, 12.0) == 0.0                  # SGLang's default: every iteration
    assert polling_delay_ms("sglang", "disagg", 30, 12.0) == 0.0              # the prefill worker polls after each batch
    assert polling_delay_ms("vllm", "agg", 30, 12.0) == 0.0
    assert polling_delay_ms("sglang", "agg", 30, None) == 0.0                 # nothing decoded, nothing to wait for
    served = served_report({"mean_ttft_ms": 50.0, "p90_e2e_latency_ms": 900.0, "mean_itl_ms": 9.0}, 100.0, 40.0)
    assert served["mean_ttft_ms"] == 190.0 and served["p90_e2e_latency_ms"] == 1040.0 and served["mean_itl_ms"] == 9.0
    assert served["serving_overhead_ms"] == 100.0 and served["polling_delay_ms"] == 40.0


def _request(backend: str, sla: dict[str, float] | None = None, recv_interval: int = 1) -> EvalRequest:
    goal: dict[str, Any] = {"target": "goodput", "sla": sla} if sla else {"target": "throughput"}
    config = SmartSearchConfig.from_dict({
        "search_space": {"model_name": MODEL, "hardware_sku": SKU, "gpu_budget": 2, "deployment_mode": ["agg"],
                         "backend": [backend], "router_mode": ["round_robin"], "planner_scaling_policy": ["disabled"],
                         "agg_max_num_seqs": [256], "agg_max_num_batched_tokens": [8192],
                         "scheduler_recv_interval": recv_interval},
        "workload": {"isl": 1000, "osl": 50, "concurrency": 4, "num_request_ratio": 3},
        "goal": goal})
    cand = Candidate.unroll(config.search_space, {"deployment_mode": "agg"}, ParallelConfig.from_dict("agg", {"tp": 2}))
    return EvalRequest.from_config(config, cand)


def test_an_evaluation_adds_the_serving_path_to_ttft_and_holds_the_sla_against_it(tmp_path: Path,
                                                                                 monkeypatch: Any) -> None:
    monkeypatch.setenv("SPICA_SERVING_FILE", str(serving_file(tmp_path, sglang=0.0)))
    bare = evaluate_one(_request("sglang"))
    monkeypatch.setenv("SPICA_SERVING_FILE", str(serving_file(tmp_path, sglang=150.0)))
    served = evaluate_one(_request("sglang"))
    assert bare.feasible and served.feasible
    assert served.metrics["mean_ttft_ms"] == pytest.approx(bare.metrics["mean_ttft_ms"] + 150.0)
    assert served.metrics["mean_e2e_latency_ms"] == pytest.approx(bare.metrics["mean_e2e_latency_ms"] + 150.0)
    assert served.metrics["mean_itl_ms"] == bare.metrics["mean_itl_ms"]          # no GPU time
    assert served.metrics["output_throughput_tok_s"] == bare.metrics["output_throughput_tok_s"]
    # an SLA between the replay's TTFT and the served one: met by the bare replay, missed once served
    worst = bare.report["max_ttft_ms"]
    sla = {"ttft_ms": round(worst + 75.0, 3), "itl_ms": 10_000.0}
    monkeypatch.setenv("SPICA_SERVING_FILE", str(serving_file(tmp_path, sglang=0.0)))
    assert evaluate_one(_request("sglang", sla)).metrics["goodput_completed_requests"] == 12
    monkeypatch.setenv("SPICA_SERVING_FILE", str(serving_file(tmp_path, sglang=150.0)))
    assert evaluate_one(_request("sglang", sla)).metrics["goodput_completed_requests"] < 12


def test_an_sglang_scheduler_that_polls_every_n_iterations_delays_ttft_by_half_n_decode_steps(
        tmp_path: Path, monkeypatch: Any) -> None:
    """The same replay (the wait uses no GPU time), TTFT and E2E later by (N − 1)/2 of its mean decode gap, and an
    SLA between the two TTFTs counted again with the wait in it."""
    monkeypatch.setenv("SPICA_SERVING_FILE", str(serving_file(tmp_path, sglang=20.0)))
    every = evaluate_one(_request("sglang"))
    polled = evaluate_one(_request("sglang", recv_interval=21))
    assert every.feasible and polled.feasible
    wait = 10 * every.metrics["mean_itl_ms"]
    assert wait > 0 and polled.report["polling_delay_ms"] == pytest.approx(wait)
    assert polled.metrics["mean_ttft_ms"] == pytest.approx(every.metrics["mean_ttft_ms"] + wait)
    assert polled.metrics["mean_e2e_latency_ms"] == pytest.approx(every.metrics["mean_e2e_latency_ms"] + wait)
    assert polled.metrics["mean_itl_ms"] == every.metrics["mean_itl_ms"]
    sla = {"ttft_ms": round(every.report["max_ttft_ms"] + wait / 2, 3), "itl_ms": 10_000.0}
    assert evaluate_one(_request("sglang", sla)).metrics["goodput_completed_requests"] == 12
    assert evaluate_one(_request("sglang", sla, recv_interval=21)).metrics["goodput_completed_requests"] < 12


def test_a_vllm_prefill_pass_pays_its_layers_dispatch_time() -> None:
    """AIC's 0.8 ms per layer on every vLLM prefill pass (the table the replay and the planner read); none on
    SGLang, whose pass is AIC's kernel time alone."""
    from spica_core.space.facts import backend_version, model_facts
    from spica_core.space.precision import precision_of
    from spica_core.space.profiles import PREFILL_DISPATCH_MS_PER_LAYER, EngineShape, build_tables, step_engine
    from spica_core.space.parallel import Shape

    layers = model_facts(MODEL).num_layers
    assert layers == 64
    precision = precision_of(MODEL, None, "bf16")
    for backend, per_layer in (("vllm", PREFILL_DISPATCH_MS_PER_LAYER["vllm"]), ("sglang", 0.0)):
        es = EngineShape.of(MODEL, SKU, backend, backend_version(SKU, backend), Shape(tp=2), precision)
        tables = build_tables(es)
        _, handle = step_engine(es)
        kernel = np.array([handle.predict_prefill_latency(1, int(x), 0) for x in tables["prefill_isl"]])
        assert np.allclose(tables["prefill_ttft_ms"] - kernel, per_layer * layers)
    assert PREFILL_DISPATCH_MS_PER_LAYER["vllm"] * layers == pytest.approx(51.2)

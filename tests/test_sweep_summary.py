"""The summary ``spica sweep`` prints: knobs that tell same-shape rows apart, the tally, the predictor winners."""
from __future__ import annotations

from typing import Any

from spica_cli.sweep import render_summary
from spica_core.config.model import SmartSearchConfig
from spica_core.deployment import Candidate
from spica_core.emit import CandidateRecord
from spica_core.evaluate import Status
from spica_core.search import SweepSummary, Tally, Trial, rank_trials
from spica_core.space.parallel import ParallelConfig

SPACE: dict[str, Any] = {"model_name": "Qwen/Qwen3-32B", "hardware_sku": "h200_sxm", "gpu_budget": 8}


def candidate(mode: str, selection: dict[str, Any], parallel: dict[str, Any]) -> Candidate:
    cfg = SmartSearchConfig.from_dict({"search_space": {**SPACE, "deployment_mode": [mode]},
                                       "workload": {"trace_path": "t.jsonl"}})
    return Candidate.unroll(cfg.search_space, {"deployment_mode": mode, "backend": "vllm", **selection},
                            ParallelConfig.from_dict(mode, parallel))


AGG = candidate("agg", {"agg_max_num_seqs": 256, "agg_max_num_batched_tokens": 8192, "router_mode": "kv_router",
                        "overlap_score_credit": 1.0, "prefill_load_scale": 4.0, "router_temperature": 0.0,
                        "planner_scaling_policy": "load_180_5", "planner_fpm_sampling": "default",
                        "planner_load_sensitivity": "default"}, {"tp": 2})
DISAGG = candidate("disagg", {"prefill_max_num_seqs": 4, "prefill_max_num_batched_tokens": 16384,
                              "decode_max_num_seqs": 512, "decode_max_num_batched_tokens": 8192,
                              "router_mode": "round_robin", "planner_scaling_policy": "disabled"},
                   {"prefill": {"tp": 1}, "decode": {"tp": 2}})


def test_summary_knobs_tell_same_shape_rows_apart() -> None:
    assert AGG.knobs_label() == "bf16 A:256/8192 kv(1.0,4.0,0.0) load_180_5"
    assert DISAGG.knobs_label() == "bf16 P:4/16384 D:512/8192 rr"


def summary(**kw: Any) -> SweepSummary:
    base: dict[str, Any] = {"run_dir": "runs/x", "run_id": "x", "pareto": False, "objectives": ("goodput",),
                            "ranking": (), "tally": Tally()}
    return SweepSummary(**{**base, **kw})


def test_summary_reports_the_load_predictor_winners() -> None:
    text = render_summary(summary(load_predictor_reason="swept",
                                  load_predictor_winners={600: "kalman_default_raw", 180: "arima_raw"}))
    assert "load predictor (swept): 180 s → arima_raw, 600 s → kalman_default_raw" in text


def test_summary_table_rows_and_tally() -> None:
    config = SmartSearchConfig.from_dict({"search_space": SPACE, "workload": {"trace_path": "t.jsonl"}})
    trials = [Trial("agg", 0, 0, Status.feasible, AGG.parallel, {}, {"backend": "vllm"}, candidate=AGG, score=12.5,
                    metrics={"output_throughput_tok_s": 1234.0, "mean_ttft_ms": 80.0}),
              Trial("disagg", 0, 1, Status.feasible, DISAGG.parallel, {}, {"backend": "vllm"}, candidate=DISAGG,
                    score=20.0),
              Trial("agg", 0, 2, Status.infeasible, AGG.parallel, {}, {"backend": "vllm"}, reason="over budget: 9 > 8")]
    records = tuple(CandidateRecord.of(r, {}, None) for r in rank_trials(trials, config))  # type: ignore[arg-type]
    text = render_summary(summary(ranking=records, tally=Tally.of(trials)))
    lines = text.splitlines()
    assert lines[0] == "Top 2 of 2 candidate(s) (score: higher is better)"
    assert lines[2].split()[:6] == ["1", "20.00", "disagg", "vllm", "h200_sxm", "1×TP1"]  # 4 significant digits (emit/numbers.py)
    assert "A:256/8192 kv(1.0,4.0,0.0) load_180_5" in lines[3] and "1,234" in lines[3]
    assert "tally: 2 feasible of 3 attempts; 1 infeasible, 0 failed, 0 unsupported, 0 cache hits" in text
    assert "  1 × over budget" in text

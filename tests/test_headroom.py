"""Headroom: the traffic scale arithmetic, an honest bisection, and clear errors for its goal fields."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from spica_cli.main import main as spica
from spica_core.config.model import SmartSearchConfig
from spica_core.evaluate import EvalRequest, evaluate_one
from spica_core.deployment import Candidate
from spica_core.evaluate.headroom import find_headroom, outcome_attainment
from spica_core.evaluate.workload import scaled_workload
from spica_core.space.parallel import ParallelConfig

SPACE = {"model_name": "Qwen/Qwen3-32B", "hardware_sku": "h200_sxm", "gpu_budget": 2, "deployment_mode": ["agg"],
         "backend": ["vllm"], "router_mode": ["round_robin"], "planner_scaling_policy": ["disabled"],
         "agg_max_num_seqs": [256], "agg_max_num_batched_tokens": [8192]}


def _config(workload: dict[str, Any], goal: dict[str, Any] | None = None) -> SmartSearchConfig:
    return SmartSearchConfig.from_dict({"search_space": SPACE, "workload": workload,
                                        "goal": goal or {"target": "goodput", "sla": {"ttft_ms": 1000,
                                                                                       "itl_ms": 30}}})


def test_the_scale_multiplies_the_rate_or_the_requests_in_flight() -> None:
    rate = _config({"isl": 1000, "osl": 100, "request_rate": 4.0, "num_request_ratio": 50}).workload
    assert scaled_workload(rate, 2.5).request_rate == 10.0
    closed = _config({"isl": 1000, "osl": 100, "concurrency": 10, "num_request_ratio": 5}).workload
    assert scaled_workload(closed, 1.5).concurrency == 15 and scaled_workload(closed, 0.01).concurrency == 1
    trace = _config({"trace_path": "t.jsonl", "arrival_speedup_ratio": 2.0}).workload
    assert scaled_workload(trace, 3.0).arrival_speedup_ratio == 6.0
    capped = _config({"trace_path": "t.jsonl", "replay_concurrency": 8}).workload
    assert scaled_workload(capped, 2.0).replay_concurrency == 16 and scaled_workload(capped, 2.0).arrival_speedup_ratio == 1.0


def _request(config: SmartSearchConfig) -> EvalRequest:
    cand = Candidate.unroll(config.search_space, {"deployment_mode": "agg"}, ParallelConfig.from_dict("agg", {"tp": 2}))
    return EvalRequest.from_config(config, cand)


def test_no_sla_means_no_headroom() -> None:
    config = _config({"isl": 1000, "osl": 100, "request_rate": 4.0, "num_request_ratio": 20},
                     {"target": "throughput"})
    assert find_headroom(_request(config)) is None


@pytest.mark.slow
def test_headroom_is_honest_and_costs_at_most_8_replays() -> None:
    config = _config({"isl": 2000, "osl": 200, "request_rate": 4.0, "num_request_ratio": 60})
    req = _request(config)
    today = evaluate_one(req)
    h = find_headroom(req, outcome_attainment(today))
    assert h is not None and not h.capped and not h.below_floor
    assert 1 <= h.evaluations <= 8
    assert h.attainment >= 0.9 and dict(h.points)[h.scale] == h.attainment
    assert outcome_attainment(evaluate_one(req.scaled(0.95 * h.scale))) >= 0.9
    assert outcome_attainment(evaluate_one(req.scaled(1.1 * h.scale))) < 0.9


@pytest.mark.parametrize("field,value", [("headroom_attainment", 0), ("headroom_attainment", 1.5),
                                         ("headroom_max", 0.5), ("headroom_max", 100), ("headroom_max", True),
                                         ("robust_scale", 0.5), ("robust_scale", 65), ("robust_scale", True)])
def test_bad_traffic_scale_fields_exit_2_naming_them(tmp_path: Path, capsys: Any, field: str, value: Any) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("search_space: {model_name: Qwen/Qwen3-32B, hardware_sku: h200_sxm}\n"
                    "workload: {isl: 1000, osl: 100, num_request_ratio: 2, concurrency: 8}\n"
                    f"goal: {{target: goodput, sla: {{ttft_ms: 500, itl_ms: 30}}, {field}: {json.dumps(value)}}}\n")
    assert spica(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"goal.{field}" in err and "Traceback" not in err


def _robust(pc: dict[str, int], scale: float) -> Any:
    space = {**SPACE, "gpu_budget": 4}
    config = SmartSearchConfig.from_dict({
        "search_space": space, "workload": {"isl": 2000, "osl": 200, "request_rate": 3.0, "num_request_ratio": 60},
        "goal": {"target": "goodput_per_gpu", "sla": {"ttft_ms": 1000, "itl_ms": 30}, "robust_scale": scale}})
    cand = Candidate.unroll(config.search_space, {"deployment_mode": "agg"}, ParallelConfig.from_dict("agg", pc))
    return evaluate_one(EvalRequest.from_config(config, cand))


def test_robust_ranking_reorders_a_candidate_near_its_sla_edge() -> None:
    edge, roomy = {"tp": 2}, {"tp": 4}           # one TP2 is cheaper per GPU today, and breaks at twice the traffic
    assert _robust(edge, 1.0).score > _robust(roomy, 1.0).score
    e, r = _robust(edge, 2.0), _robust(roomy, 2.0)
    assert r.score > e.score
    assert e.score == min(e.metrics["plain_score"], e.metrics["robust_scale_score"])
    assert e.metrics["plain_score"] == _robust(edge, 1.0).score       # the plain score is kept beside it

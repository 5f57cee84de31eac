"""workload.length_spread: a closed loop of identical requests started together runs in lock-step waves; spread
lengths do not (tests/test_start_window.py: the other way out, a start window)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from spica_cli.main import main as spica
from spica_core.config.model import SmartSearchConfig
from spica_core.evaluate import EvalRequest, evaluate_one
from spica_core.deployment import Candidate
from spica_core.evaluate.workload import replay_workload
from spica_core.space.parallel import ParallelConfig

SPACE = {"model_name": "Qwen/Qwen3-32B", "hardware_sku": "h100_sxm", "gpu_budget": 2, "deployment_mode": ["agg"],
         "backend": ["vllm"], "router_mode": ["round_robin"], "planner_scaling_policy": ["disabled"],
         "agg_max_num_seqs": [256], "agg_max_num_batched_tokens": [8192], "agg_enable_prefix_caching": False}


def _config(**workload: Any) -> SmartSearchConfig:
    return SmartSearchConfig.from_dict({"search_space": SPACE, "workload": {"isl": 1024, "osl": 128,
                                                                             "num_request_ratio": 10, **workload}})


def test_an_open_loop_keeps_its_rate_and_a_closed_loop_its_cap(tmp_path: Path) -> None:
    rate = replay_workload(_config(request_rate=4.0, length_spread=0.2).workload, directory=tmp_path)
    rows = [json.loads(x) for x in Path(rate.trace_path).read_text().splitlines()]
    assert rate.kind == "trace" and "replay_concurrency" not in rate.kwargs and len(rows) == 40
    assert [r["timestamp"] for r in rows[:3]] == [0.0, 250.0, 500.0]
    closed = replay_workload(_config(concurrency=8, length_spread=0.2).workload, directory=tmp_path)
    assert closed.kwargs["replay_concurrency"] == 8
    assert replay_workload(_config(concurrency=8, start_window_ms=0).workload).kind == "synthetic"   # 0: as before


def test_spread_lengths_break_the_lock_step_waves_of_a_closed_loop() -> None:
    def ttft(spread: float) -> float:
        config = _config(concurrency=8, length_spread=spread, **({} if spread else {"start_window_ms": 0}))
        cand = Candidate.unroll(config.search_space, {"deployment_mode": "agg"},
                                ParallelConfig.from_dict("agg", {"tp": 2}))
        out = evaluate_one(EvalRequest.from_config(config, cand))
        assert out.feasible and out.report["num_requests"] == 80
        return out.metrics["mean_ttft_ms"]

    assert ttft(0.2) < 0.5 * ttft(0.0)    # every identical request waits for its whole wave's prefill


@pytest.mark.parametrize("extra", [{"shared_prefix_ratio": 0.5, "num_prefix_groups": 2}, {"turns_per_session": 2},
                                   {"length_spread": 1.0}])
def test_a_spread_that_cannot_apply_exits_2_naming_it(tmp_path: Path, capsys: Any, extra: dict[str, Any]) -> None:
    workload = {"isl": 1000, "osl": 100, "num_request_ratio": 2, "concurrency": 8, "length_spread": 0.2, **extra}
    path = tmp_path / "c.yaml"
    path.write_text(json.dumps({"search_space": {"model_name": "Qwen/Qwen3-32B", "hardware_sku": "h200_sxm"},
                                "workload": workload}))
    assert spica(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert "workload.length_spread" in err and "Traceback" not in err

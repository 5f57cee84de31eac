"""Cost: GPU prices in the goal, dollars per million output tokens within the SLA, the cost target."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from spica_cli.main import main as spica
from spica_core.config.goal import OptimizationGoal
from spica_core.config.policies import planner_target
from spica_core.evaluate import evaluate_one, pinned_request, score_report, search_value
from spica_core.evaluate.cost import cost_per_mtok, role_gpu_hours
from spica_core.run.inputs import load_inputs

SPACE = {"model_name": "Qwen/Qwen3-32B", "hardware_sku": "h200_sxm", "gpu_budget": 8, "deployment_mode": ["disagg"],
         "backend": ["vllm"], "parallel_configs": [{"prefill": {"tp": 2, "replicas": 1}, "decode": {"tp": 1,
                                                                                              "replicas": 2}}],
         "prefill_max_num_seqs": [4], "prefill_max_num_batched_tokens": [16384], "decode_max_num_seqs": [256],
         "decode_max_num_batched_tokens": [8192], "router_mode": ["round_robin"],
         "planner_scaling_policy": ["disabled"]}
WORKLOAD = {"isl": 2000, "osl": 200, "length_spread": 0.2, "concurrency": 16, "num_request_ratio": 4}


def _config(tmp_path: Path, goal: dict[str, Any], space: dict[str, Any] | None = None) -> Path:
    path = tmp_path / "cost.yaml"
    path.write_text(yaml.safe_dump({"search_space": {**SPACE, **(space or {})}, "workload": WORKLOAD, "goal": goal,
                                    "sweep": {"parallel_evals": 1}}))
    return path


def test_cost_per_mtok_is_the_gpu_hours_price_over_the_tokens_that_met_the_sla() -> None:
    report = {"prefill_worker_seconds": 3600.0, "prefill_gpus_per_worker": 2, "decode_worker_seconds": 7200.0,
              "decode_gpus_per_worker": 1, "duration_ms": 3_600_000.0, "goodput_output_throughput_tok_s": 100.0,
              "output_throughput_tok_s": 400.0}
    assert role_gpu_hours(report) == {"prefill": 2.0, "decode": 2.0}
    skus = {"prefill": "h100_sxm", "decode": "h200_sxm"}
    prices = {"h100_sxm": 2.0, "h200_sxm": 3.0}
    assert cost_per_mtok(report, prices, skus, sla=True) == pytest.approx((2 * 2.0 + 2 * 3.0) / 0.36)
    assert cost_per_mtok(report, prices, skus, sla=False) == pytest.approx(10.0 / 1.44)   # every token counts
    assert cost_per_mtok({**report, "goodput_output_throughput_tok_s": 0.0}, prices, skus, sla=True) is None


def test_an_evaluation_prices_its_replay_and_a_cost_goal_ranks_by_it(tmp_path: Path) -> None:
    goal = {"target": "cost_per_mtok", "sla": {"ttft_ms": 2000, "itl_ms": 40}, "gpu_hour_usd": {"h200_sxm": 3.5}}
    path = _config(tmp_path, goal)
    config = load_inputs(path).config
    out = evaluate_one(pinned_request(config, path.parent))
    m = out.metrics
    expected = m["gpu_hours"] * 3.5 / (m["goodput_output_throughput_tok_s"] * m["duration_ms"] / 1000 / 1e6)
    assert m["cost_per_mtok"] == pytest.approx(expected) and out.score == pytest.approx(-expected)
    assert m["prefill_gpus_per_worker"] == 2 and m["decode_gpus_per_worker"] == 1
    strict = _config(tmp_path, {**goal, "sla": {"ttft_ms": 0.01, "itl_ms": 0.01}})
    none = evaluate_one(pinned_request(load_inputs(strict).config, strict.parent))
    assert none.metrics["cost_per_mtok"] is None and none.metrics["goodput_completed_requests"] == 0


def test_the_cost_target_is_minimised_and_a_miss_looks_dearer() -> None:
    goal = OptimizationGoal.model_validate({"target": "cost_per_mtok", "sla": {"ttft_ms": 100},
                                            "gpu_hour_usd": {"h200_sxm": 3.0}})
    cheap = {"cost_per_mtok": 2.0, "num_requests": 10, "goodput_completed_requests": 10,
             "goodput_output_throughput_tok_s": 5.0}
    assert score_report(goal, cheap) == -2.0 > score_report(goal, {**cheap, "cost_per_mtok": 3.0})
    missing = {**cheap, "goodput_completed_requests": 4}
    assert search_value(goal, -2.0, missing, 8) < -2.0 * 1.5   # below every cost that meets the SLA ... nearly
    assert planner_target(goal) == "sla"
    assert planner_target(goal.model_copy(update={"sla": None, "sla_attainment": None})) == "throughput"


@pytest.mark.parametrize("goal, field", [
    ({"target": "cost_per_mtok"}, "goal.gpu_hour_usd"),
    ({"target": "throughput", "gpu_hour_usd": {"h200_sxm": 0}}, "goal.gpu_hour_usd.h200_sxm"),
    ({"target": "throughput", "gpu_hour_usd": {"h200_sxm": -2.5}}, "goal.gpu_hour_usd.h200_sxm"),
    ({"target": "cost_per_mtok", "gpu_hour_usd": {"h100_sxm": 2.0}}, "goal.gpu_hour_usd"),
    ({"target": "cost_per_mtok", "gpu_hour_usd": {"h200_sxm": 3.0, "h300_sxm": 9.0}}, "goal.gpu_hour_usd.h300_sxm"),
])
def test_prices_that_cannot_price_every_candidate_are_refused_with_the_field(tmp_path: Path, capsys: Any,
                                                                            goal: dict[str, Any], field: str) -> None:
    assert spica(["validate", str(_config(tmp_path, goal))]) == 2
    err = capsys.readouterr().err
    assert f"- {field}:" in err and "Traceback" not in err


def test_spica_evaluate_and_the_candidate_table_show_cost_when_prices_are_given(tmp_path: Path,
                                                                               capsys: Any) -> None:
    import json

    from spica_cli.sweep import candidate_table
    from dataclasses import replace

    from tests.test_report import SCALAR_GOAL, config, records_of, scalar_trials

    goal = {"target": "goodput", "sla": {"ttft_ms": 2000, "itl_ms": 40}, "gpu_hour_usd": {"h200_sxm": 3.5}}
    assert spica(["evaluate", str(_config(tmp_path, goal)), "--json"]) == 0
    body = json.loads(capsys.readouterr().out)
    assert body["metrics"]["cost_per_mtok"] > 0
    assert spica(["evaluate", str(_config(tmp_path, goal))]) == 0
    assert f"cost {body['metrics']['cost_per_mtok']:,.4g}"[:9] in " ".join(capsys.readouterr().out.split())
    records = records_of(scalar_trials(), config({"isl": 1000, "osl": 100, "concurrency": 8,
                                                   "num_request_ratio": 4}, SCALAR_GOAL))
    priced = [replace(r, metrics={**r.metrics, "cost_per_mtok": 1.5 + r.rank}) for r in records]
    assert "USD/Mtok" not in candidate_table(records, False, ["goodput"])[1]
    table = candidate_table(priced, False, ["goodput"])
    assert table[1].rstrip().endswith("USD/Mtok") and table[2].rstrip().endswith("2.500")


def test_the_report_draws_the_cost_front_and_a_cost_column_only_with_prices() -> None:
    from dataclasses import replace

    from spica_core.emit.report import render_markdown
    from spica_core.emit.report_plots import plot_cost
    from tests.test_report import SCALAR_GOAL, SYNTHETIC, config, scalar_inputs

    plain = scalar_inputs()
    assert plot_cost(plain) is None and "cost (USD/Mtok)" not in render_markdown(plain, {})
    priced_cfg = config(SYNTHETIC, {**SCALAR_GOAL, "gpu_hour_usd": {"h200_sxm": 4.0}})
    trials = [replace(t, metrics={**t.metrics, "cost_per_mtok": 10.0 / (1 + i)}) if t.metrics else t
              for i, t in enumerate(plain.trials)]
    records = [replace(r, metrics={**r.metrics, "cost_per_mtok": 2.0 * r.rank}) for r in plain.records]
    priced = replace(plain, config=priced_cfg, trials=trials, records=records)
    png = plot_cost(priced)
    assert png is not None and png[:8] == b"\x89PNG\r\n\x1a\n"
    md = render_markdown(priced, {"cost": "report/cost.png"})
    assert "cost (USD/Mtok)" in md and "![cost per million output tokens against goodput" in md
    assert "| 2.000 |" in md or "| 2 |" in md

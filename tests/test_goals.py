"""Goals and scores (§4): metric formulas, signs, fail-closed goodput, budget gate, rank, Pareto."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import pytest

from spica_core.config.goal import OptimizationGoal
from spica_core.errors import GoodputContractError
from spica_core.search import pareto_front, rank
from spica_core.evaluate.scoring import (
    avg_gpu,
    candidate_metrics,
    is_feasible,
    metric_value,
    objective_vector,
    score_report,
    sla_kwargs,
)

# 2 GPU-hours over 30 minutes = 4 GPUs on average
REPORT = {"output_throughput_tok_s": 1000.0, "mean_output_token_throughput_per_user": 55.0,
          "mean_e2e_latency_ms": 2500.0, "goodput_output_throughput_tok_s": 600.0, "gpu_hours": 2.0,
          "duration_ms": 1_800_000.0, "mean_ttft_ms": 120.0, "p99_ttft_ms": 900.0}


def goal(target: str, **kw: object) -> OptimizationGoal:
    return OptimizationGoal.model_validate({"target": target, **kw})


SLA = {"ttft_ms": 500, "itl_ms": 30}


def test_avg_gpu_is_gpu_hours_over_duration() -> None:
    assert avg_gpu(REPORT) == pytest.approx(4.0)
    assert avg_gpu({"gpu_hours": 0.0, "duration_ms": 10.0}) == 0.0
    assert avg_gpu({"gpu_hours": 1.0}) == 0.0


@pytest.mark.parametrize("target,value", [
    ("throughput", 1000.0), ("throughput_per_gpu", 250.0), ("throughput_per_user", 55.0),
    ("e2e_latency", 2500.0), ("goodput", 600.0), ("goodput_per_gpu", 150.0)])
def test_metric_formulas(target: str, value: float) -> None:
    assert metric_value(target, REPORT) == pytest.approx(value)


def test_per_gpu_is_zero_without_gpu_time_and_missing_latency_scores_worst() -> None:
    assert metric_value("throughput_per_gpu", {"output_throughput_tok_s": 10.0}) == 0.0
    assert metric_value("e2e_latency", {}) == math.inf
    assert score_report(goal("e2e_latency"), {}) == -math.inf


def test_scores_are_signed_higher_is_better() -> None:
    assert score_report(goal("throughput_per_gpu"), REPORT) == pytest.approx(250.0)
    assert score_report(goal("e2e_latency"), REPORT) == pytest.approx(-2500.0)
    assert score_report(goal("goodput_per_gpu", sla=SLA), REPORT) == pytest.approx(150.0)


def test_goodput_fails_closed_without_goodput_in_the_report() -> None:
    bad = {k: v for k, v in REPORT.items() if not k.startswith("goodput")}
    with pytest.raises(GoodputContractError, match="contract"):
        score_report(goal("goodput", sla=SLA), bad)
    pareto = goal("pareto", pareto_objectives=["throughput", "goodput_per_gpu"], sla=SLA)
    with pytest.raises(GoodputContractError):
        score_report(pareto, bad)
    assert score_report(goal("throughput"), bad) == 1000.0  # no goodput objective: fine


def test_pareto_score_is_raw_first_objective_and_vector_is_unsigned() -> None:
    g = goal("pareto", pareto_objectives=["e2e_latency", "throughput"])
    assert score_report(g, REPORT) == 2500.0
    assert objective_vector(g, REPORT) == {"e2e_latency": 2500.0, "throughput": 1000.0}
    assert objective_vector(goal("pareto"), REPORT) == {"throughput_per_gpu": 250.0, "throughput_per_user": 55.0}


def test_budget_gate_and_sla_kwargs() -> None:
    assert is_feasible(8, 8) and not is_feasible(9, 8)
    assert sla_kwargs(goal("throughput")) == {}
    assert sla_kwargs(goal("throughput", sla={"ttft_ms": 200})) == {"sla_ttft_ms": 200.0}
    assert sla_kwargs(goal("goodput", sla={"e2e_ms": 3000})) == {"sla_e2e_ms": 3000.0}
    pair = sla_kwargs(goal("goodput", sla={"ttft_ms": 500, "itl_ms": 30}))
    assert pair == {"sla_ttft_ms": 500.0, "sla_itl_ms": 30.0}  # e2e with ttft/itl is refused by validation


def test_candidate_metrics_keep_only_present_metric_keys() -> None:
    m = candidate_metrics({**REPORT, "planner_total_ticks": 12, "mean_tpot_ms": None})
    assert m["planner_total_ticks"] == 12.0 and "mean_tpot_ms" not in m and "p99_ttft_ms" not in m


@dataclass
class C:
    name: str
    score: float
    used_gpus: int
    objectives: dict[str, float] | None = field(default=None)
    metrics: dict[str, float] = field(default_factory=dict)


def test_rank_by_score_then_fewer_gpus_stable() -> None:
    cs = [C("a", 10, 8), C("b", 12, 8), C("c", 10, 4), C("d", 10, 4), C("e", -1, 1)]
    assert [c.name for c in rank(cs)] == ["b", "c", "d", "a", "e"]


def test_pareto_front_non_dominated_sorted_by_last_objective() -> None:
    objs = ["throughput_per_gpu", "throughput_per_user"]
    cs = [C("a", 0, 1, {"throughput_per_gpu": 100, "throughput_per_user": 10}),
          C("b", 0, 1, {"throughput_per_gpu": 80, "throughput_per_user": 30}),
          C("c", 0, 1, {"throughput_per_gpu": 70, "throughput_per_user": 20}),   # dominated by b
          C("d", 0, 1, {"throughput_per_gpu": 100, "throughput_per_user": 10}),  # equal to a: kept
          C("e", 0, 1, None)]
    assert [c.name for c in pareto_front(cs, objs)] == ["a", "d", "b"]


def test_pareto_front_respects_minimised_objectives() -> None:
    objs = ["throughput", "e2e_latency"]
    cs = [C("fast", 0, 1, {"throughput": 100, "e2e_latency": 500}),
          C("slow", 0, 1, {"throughput": 100, "e2e_latency": 900}),
          C("big", 0, 1, {"throughput": 300, "e2e_latency": 2000})]
    assert [c.name for c in pareto_front(cs, objs)] == ["fast", "big"]


def test_one_metric_registry_labels_and_falls_back() -> None:
    from spica_core.evaluate import METRICS, derived_metrics, metric_or_fallback, objective_metric

    assert metric_or_fallback({"mean_tpot_ms": 12.0}, "mean_itl_ms") == 12.0          # ITL falls back to TPOT
    assert metric_or_fallback({"mean_itl_ms": 11.0, "mean_tpot_ms": 12.0}, "mean_itl_ms") == 11.0
    assert metric_or_fallback({"mean_tpot_ms": 12.0}, "mean_ttft_ms") is None
    assert (objective_metric("min_gpus").unit, objective_metric("min_gpus").higher_is_better) == ("GPUs", False)
    assert objective_metric("goodput_per_gpu").label == "goodput per GPU"
    assert METRICS["mean_ttft_ms"].higher_is_better is False and METRICS["goodput_output_throughput_tok_s"].unit == "tok/s"
    d = derived_metrics({"gpu_hours": 2.0, "duration_ms": 3_600_000.0, "output_throughput_tok_s": 100.0}, 4)
    assert (d["avg_gpus"], d["output_throughput_tok_s_per_gpu"], d["used_gpus"]) == (2.0, 50.0, 4.0)

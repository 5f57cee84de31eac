"""The SLA as a requirement (``goal.sla_attainment``), target ``min_gpus`` and near-ties."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from spica_cli.main import main as spica
from spica_core.config.goal import OptimizationGoal
from spica_core.config.model import SmartSearchConfig
from spica_core.emit.rechecks import ConfidenceCheck
from spica_core.evaluate import attainment, meets_sla, metric_value, search_value
from spica_core.search import near_ties, pareto_front, rank

SLA = {"ttft_ms": 2000, "itl_ms": 40}


def goal(**kw: Any) -> OptimizationGoal:
    return OptimizationGoal.model_validate(kw)


def metrics(met: int, gpus: float = 1.0, goodput: float = 0.0, total: int = 100) -> dict[str, float]:
    """``met`` of ``total`` requests met the SLA, over one hour on ``gpus`` GPUs."""
    return {"num_requests": float(total), "goodput_completed_requests": float(met), "gpu_hours": gpus,
            "duration_ms": 3_600_000.0, "goodput_output_throughput_tok_s": goodput}


@dataclass
class C:
    name: str
    score: float
    used_gpus: int
    metrics: dict[str, float]
    objectives: dict[str, float] | None = None


@dataclass
class R:
    rank: int
    score: float
    meets_sla: bool | None = True
    score_spread: float | None = None
    tied_with: tuple[int, ...] = field(default=())


# ---------------------------------------------------------------- the goal's fields


def test_sla_attainment_defaults_to_0_9_with_an_sla_and_is_absent_without() -> None:
    assert goal(target="goodput", sla=SLA).sla_attainment == 0.9
    assert goal(target="goodput", sla=SLA, sla_attainment=0).required_attainment == 0.0
    assert goal(target="throughput").sla_attainment is None and goal().required_attainment == 0.0
    # the headroom's attainment follows the requirement unless it is set
    assert goal(target="goodput", sla=SLA, sla_attainment=0.95).headroom_share == 0.95
    assert goal(target="goodput", sla=SLA, sla_attainment=0).headroom_share == 0.9
    assert goal(target="goodput", sla=SLA, headroom_attainment=0.8).headroom_share == 0.8


def test_the_default_is_part_of_the_run_identity() -> None:
    base = {"search_space": {"model_name": "Qwen/Qwen3-32B", "hardware_sku": "h200_sxm"},
            "workload": {"isl": 1000, "osl": 100, "concurrency": 8, "num_request_ratio": 2}}
    implicit = SmartSearchConfig.from_dict({**base, "goal": {"target": "goodput", "sla": SLA}})
    explicit = SmartSearchConfig.from_dict({**base, "goal": {"target": "goodput", "sla": SLA, "sla_attainment": 0.9}})
    off = SmartSearchConfig.from_dict({**base, "goal": {"target": "goodput", "sla": SLA, "sla_attainment": 0}})
    assert implicit.normalised() == explicit.normalised() != off.normalised()


@pytest.mark.parametrize("goal_yaml,field_name,words", [
    ("{target: goodput, sla: {ttft_ms: 500, itl_ms: 30}, sla_attainment: 1.5}", "goal.sla_attainment", "1"),
    ("{target: goodput, sla: {ttft_ms: 500, itl_ms: 30}, sla_attainment: -0.1}", "goal.sla_attainment", "0"),
    ("{target: goodput, sla: {ttft_ms: 500, itl_ms: 30}, sla_attainment: true}", "goal.sla_attainment", ""),
    ("{target: throughput, sla_attainment: 0.9}", "goal.sla_attainment", "goal.sla is not set"),
    ("{target: throughput, sla_attainment: 0}", "goal.sla_attainment", "goal.sla is not set"),
    ("{target: min_gpus}", "goal.sla", "min_gpus"),
    ("{target: pareto, pareto_objectives: [throughput_per_gpu, min_gpus], sla: {ttft_ms: 500}}",
     "goal.pareto_objectives[1]", "min_gpus cannot be a Pareto objective"),
])
def test_bad_requirement_fields_exit_2_naming_them(tmp_path: Path, capsys: Any, goal_yaml: str, field_name: str,
                                                   words: str) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("search_space: {model_name: Qwen/Qwen3-32B, hardware_sku: h200_sxm}\n"
                    "workload: {isl: 1000, osl: 100, num_request_ratio: 2, concurrency: 8}\n"
                    f"goal: {goal_yaml}\n")
    assert spica(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert field_name in err and words in err and "Traceback" not in err


# ---------------------------------------------------------------- attainment, ranking and the study


def test_attainment_counts_rejected_requests_as_misses() -> None:
    assert attainment(metrics(90)) == 0.9
    assert attainment({"num_requests": 10, "goodput_completed_requests": 9, "rejected_requests": 2}) == 0.9
    assert attainment({"num_requests": 10}) is None
    g = goal(target="goodput", sla=SLA)
    assert meets_sla(g, metrics(90)) is True and meets_sla(g, metrics(89)) is False
    assert meets_sla(goal(target="throughput"), metrics(10)) is None


def test_candidates_that_miss_rank_after_every_one_that_meets_then_by_attainment() -> None:
    cs = [C("best-but-misses", 500, 2, metrics(84)), C("meets", 370, 4, metrics(93)),
          C("meets-less", 340, 3, metrics(91)), C("misses-less", 100, 2, metrics(89)),
          C("misses-more", 450, 2, metrics(60))]
    required = goal(target="goodput_per_gpu", sla=SLA)
    assert [c.name for c in rank(cs, required)] == ["meets", "meets-less", "misses-less", "best-but-misses",
                                                     "misses-more"]
    off = goal(target="goodput_per_gpu", sla=SLA, sla_attainment=0)
    assert [c.name for c in rank(cs, off)][:2] == ["best-but-misses", "misses-more"]


def test_min_gpus_ranks_the_fewest_gpus_that_meet_and_breaks_ties_by_goodput_per_gpu() -> None:
    g = goal(target="min_gpus", sla=SLA)
    cs = [C("two-misses", -2, 2, metrics(50, 2, 900.0)), C("four", -4, 4, metrics(95, 4, 1000.0)),
          C("three-low", -3, 3, metrics(95, 3, 600.0)), C("three-high", -3, 3, metrics(92, 3, 900.0))]
    assert metric_value("min_gpus", metrics(95, 3)) == 3.0
    assert [c.name for c in rank(cs, g)] == ["three-high", "three-low", "four", "two-misses"]


def test_the_study_sees_a_miss_below_every_candidate_that_meets() -> None:
    g = goal(target="goodput_per_gpu", sla=SLA)
    assert search_value(g, 450.0, metrics(95), 8) == 450.0
    assert search_value(g, 0.0, metrics(95), 8) > search_value(g, 900.0, metrics(89), 8)
    assert search_value(g, 900.0, metrics(89), 8) > search_value(g, 900.0, metrics(50), 8)
    m = goal(target="min_gpus", sla=SLA)
    assert search_value(m, -8.0, metrics(95, 8), 8) > search_value(m, -1.0, metrics(89, 1), 8)
    assert search_value(m, -1.0, metrics(89, 1), 8) > search_value(m, -1.0, metrics(10, 1), 8)
    off = goal(target="goodput_per_gpu", sla=SLA, sla_attainment=0)
    assert search_value(off, 900.0, metrics(10), 8) == 900.0


def test_a_front_keeps_only_candidates_that_meet_unless_none_does() -> None:
    objs = ["throughput_per_gpu", "throughput_per_user"]
    cs = [C("fast-misses", 0, 1, metrics(80), {"throughput_per_gpu": 100, "throughput_per_user": 50}),
          C("meets", 0, 1, metrics(95), {"throughput_per_gpu": 80, "throughput_per_user": 30}),
          C("meets-too", 0, 1, metrics(91), {"throughput_per_gpu": 60, "throughput_per_user": 40})]
    assert [c.name for c in pareto_front(cs, objs, 0.9)] == ["meets", "meets-too"]
    assert [c.name for c in pareto_front(cs, objs)] == ["fast-misses"]
    assert [c.name for c in pareto_front(cs, objs, 0.99)] == ["fast-misses"]   # none meets: all of them


def test_near_ties_chain_neighbours_within_the_replay_spread_and_never_cross_the_requirement() -> None:
    ranked = [R(1, 100.0, score_spread=0.5), R(2, 99.7), R(3, 99.0, score_spread=0.8), R(4, 95.0),
              R(5, 94.9, meets_sla=False, score_spread=1.0), R(6, 94.8, meets_sla=False, score_spread=1.0)]
    assert near_ties(ranked) == {1: (2, 3), 2: (1, 3), 3: (1, 2)}
    assert near_ties([R(1, 100.0), R(2, 100.0)]) == {}   # exact replays: equal scores are an order (fewer GPUs)


def test_the_confidence_check_reranks_by_the_requirement() -> None:
    check = ConfidenceCheck(0.9, {1: 300.0, 2: 280.0, 3: None, 4: 250.0}, {1: 0.85, 2: 0.95, 3: None, 4: 0.92}, 0.9)
    assert check.reranked() == [2, 4, 1, 3]
    assert ConfidenceCheck(0.9, {1: 300.0, 2: 280.0}, {1: 0.85, 2: 0.95}).reranked() == [1, 2]


# ---------------------------------------------------------------- end to end, exhaustive


SPACE_YAML = """
search_space:
  model_name: Qwen/Qwen3-32B
  hardware_sku: h200_sxm
  gpu_budget: 8
  deployment_mode: [agg]
  backend: [vllm]
  parallel_configs:
    - {tp: 1, replicas: 2}
    - {tp: 2}
    - {tp: 1, replicas: 3}
    - {tp: 2, replicas: 2}
    - {tp: 4}
  agg_max_num_seqs: [256]
  agg_max_num_batched_tokens: [8192]
  router_mode: [round_robin]
  planner_scaling_policy: [disabled]
workload: {isl: 4000, osl: 500, length_spread: 0.2, concurrency: 40, num_request_ratio: 10}
sweep: {policy: thorough, max_rounds: 1, parallel_evals: 2, candidates_per_round: 5, seed: 1}
"""


def sweep_candidates(tmp_path: Path, name: str, goal_: dict[str, Any]) -> list[dict[str, Any]]:
    config = {**yaml.safe_load(SPACE_YAML), "goal": goal_}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    assert spica(["sweep", str(path), "--run-dir", str(tmp_path / name)]) == 0
    return json.loads((tmp_path / name / "candidates.json").read_text())["candidates"]


def share(c: dict[str, Any]) -> float:
    return c["metrics"]["goodput_completed_requests"] / c["metrics"]["num_requests"]


@pytest.mark.slow
def test_an_exhaustive_sweep_ranks_first_a_candidate_that_meets_and_sla_attainment_0_brings_the_old_winner_back(
        tmp_path: Path, capfd: Any) -> None:
    default = sweep_candidates(tmp_path, "default", {"target": "goodput_per_gpu", "sla": SLA})
    out = capfd.readouterr().out   # (the flow's process prints the table: capfd, not capsys)
    assert "SLA attainment" in out and "meet the SLA requirement (90 % of requests within the SLA)" in out
    best = max(default, key=lambda c: c["score"])
    assert share(best) < 0.9                        # the goodput-per-GPU winner misses the requirement
    assert share(default[0]) >= 0.9 and default[0]["meets_sla"] is True
    for c in default:
        assert c["attainment"] == pytest.approx(share(c)) and c["meets_sla"] == (share(c) >= 0.9)
    meeting = [c for c in default if c["meets_sla"]]
    assert default[:len(meeting)] == meeting         # every candidate that meets comes before every one that misses
    assert default[0]["score"] == max(c["score"] for c in meeting)
    assert default[0]["headroom"]["scale"] >= 1.0    # it holds today's traffic
    report = (tmp_path / "default" / "report.md").read_text()
    assert f"rank {default[-1]['rank']} (agg vllm" in report.split("Missing the SLA requirement")[1]

    old = sweep_candidates(tmp_path, "off", {"target": "goodput_per_gpu", "sla": SLA, "sla_attainment": 0})
    assert old[0]["config"] == best["config"] and old[0]["meets_sla"] is True   # nothing is required
    assert [c["score"] for c in old] == sorted((c["score"] for c in old), reverse=True)

    fewest = sweep_candidates(tmp_path, "min_gpus", {"target": "min_gpus", "sla": SLA})
    assert fewest[0]["used_gpus"] == min(c["used_gpus"] for c in fewest if share(c) >= 0.9)
    assert fewest[0]["meets_sla"] is True and share(fewest[0]) >= 0.9


def test_near_ties_and_misses_show_in_the_cli_table_and_the_report() -> None:
    from dataclasses import replace

    from spica_cli.sweep import candidate_table
    from spica_core.emit.report import render_markdown
    from tests.test_report import scalar_inputs, section

    inputs = scalar_inputs()
    records = [replace(r, tied_with=(2,) if r.rank == 1 else (1,) if r.rank == 2 else ()) for r in inputs.records]
    table = candidate_table(records, False, ["goodput"], 0.9)
    rows = [line.split()[:3] for line in table[2:5]]
    assert rows == [["=1", "1,800", "0.95"], ["=2", "1,500", "0.95"], ["3", "900.0", "0.80"]]
    assert "2 of 3 candidate(s) meet the SLA requirement (90 % of requests within the SLA)" in "\n".join(table)
    assert any(line.startswith("=N: a near-tie") for line in table)
    results = section(render_markdown(replace(inputs, records=records), {}), "Results")
    assert "| =1 | disagg |" in results and "| =2 | agg |" in results and "| 3 | agg |" in results
    assert "Near-ties (`=` in the rank column): ranks 1, 2." in results
    winner = section(render_markdown(replace(inputs, records=records), {}), "The winner and why")
    assert "A near-tie with the runner-up" in winner


def test_a_front_where_none_meets_says_so() -> None:
    from dataclasses import replace

    from spica_cli.sweep import candidate_table
    from spica_core.emit.report import render_markdown
    from tests.test_report import scalar_inputs, section

    inputs = scalar_inputs()
    missing = [replace(r, meets_sla=False, attainment=0.5, objectives={"goodput": r.score}) for r in inputs.records]
    table = "\n".join(candidate_table(missing, True, ["goodput"], 0.9))
    assert "no candidate meets the SLA requirement (90 % of requests within the SLA): the front is over all" in table
    text = render_markdown(replace(inputs, records=missing, pareto=True), {})
    assert "**No candidate meets the SLA requirement** (90 % of requests within the SLA); the front is drawn over all" \
        in section(text, "Results")


def test_the_prefect_tables_show_attainment_and_the_itl_fallback() -> None:
    from tasks.ui import ui_row
    from tests.test_report import scalar_inputs

    inputs = scalar_inputs()
    winner = next(t for t in inputs.trials if t.mode == "disagg" and t.score == 1800.0)
    row = ui_row(inputs.config, 1, winner)
    assert row["SLA attainment"] == "0.95 (meets)"
    assert row["ITL (SLA)"] == "10.0 ms ≤ 50.0 ms"
    small = next(t for t in inputs.trials if t.score == 900.0)
    assert ui_row(inputs.config, 3, small)["SLA attainment"] == "0.80 (misses)"
    from dataclasses import replace

    tpot_only = replace(winner, metrics={k: v for k, v in winner.metrics.items() if k != "mean_itl_ms"}
                        | {"mean_tpot_ms": 12.0})
    assert ui_row(inputs.config, 1, tpot_only)["ITL (SLA)"] == "12.0 ms ≤ 50.0 ms"   # ITL falls back to TPOT


def test_one_row_builder_feeds_the_cli_the_report_and_the_ui() -> None:
    """The CLI table, the report's table and the Prefect table show the same cells for one candidate, because all
    three build them with ``spica_core.emit.rows.candidate_row``."""
    from dataclasses import replace

    from spica_cli.sweep import candidate_table
    from spica_core.emit.report import render_markdown
    from spica_core.emit.rows import candidate_row
    from tasks.ui import ui_row
    from tests.test_report import scalar_inputs

    inputs = scalar_inputs()
    record = replace(inputs.records[0], metrics={k: v for k, v in inputs.records[0].metrics.items()
                                                 if k != "mean_tpot_ms"} | {"mean_itl_ms": 11.5})
    row = candidate_row(record.candidate, record.used_gpus, record.metrics, record.bands, record.attainment,
                        record.meets_sla)
    assert (row.itl_ms, row.tpot_ms) == (11.5, 11.5)          # TPOT falls back to ITL, and ITL to TPOT
    assert row.attainment == f"{record.attainment:.2f} ({'meets' if record.meets_sla else 'misses'})"
    import re

    cells = re.split(r"\s{2,}", candidate_table([record], False, ["goodput"], 0.9)[2].strip())
    assert cells[2:9] == [row.attainment, row.mode, row.backend, row.gpu, row.parallel, str(row.gpus), row.knobs]
    assert cells[-1] == "11.50"
    report = render_markdown(replace(inputs, records=[record]), {})
    assert f"| {row.mode} | {row.backend} | {row.gpu} | {row.parallel} |" in report
    ui = ui_row(inputs.config, 1, record)
    assert (ui["GPU type"], ui["parallel"], ui["GPUs"], ui["batching / router / planner"]) == (
        row.gpu, row.parallel, row.gpus, row.knobs)

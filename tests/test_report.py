"""The run report: report.md / report.html with PNG plots, from real typed inputs (no replay)."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from spica_core.config.model import SmartSearchConfig
from spica_core.emit.aic_estimate import AICEstimate
from spica_core.emit.records import CandidateRecord, Provenance
from spica_core.emit.numbers import fmt
from spica_core.emit.report import ReportFiles, ReportInputs, render_markdown, write_report
from spica_core.emit.report_plots import backend_groups, progress_series
from spica_core.emit.report_workload import trace_profile
from spica_core.deployment import Candidate
from spica_core.evaluate import Status
from examples.make_traces import write_mooncake_trace, write_poisson_trace
from spica_core.search import Tally, Trial, rank_trials
from spica_core.space.parallel import ParallelConfig
from tests.report_parsing import (bold, bullets, cells, code, count, counts, fields, images, line_with, links,
                                  quantities, table)

SPACE: dict[str, Any] = {"model_name": "Qwen/Qwen3-32B", "hardware_sku": "h200_sxm", "gpu_budget": 8,
                         "deployment_mode": ["agg", "disagg"]}
SYNTHETIC = {"isl": 4000, "osl": 200, "concurrency": 64, "num_request_ratio": 10}
SCALAR_GOAL = {"target": "goodput", "sla": {"ttft_ms": 500, "itl_ms": 50}}
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def config(workload: dict[str, Any], goal: dict[str, Any]) -> SmartSearchConfig:
    return SmartSearchConfig.from_dict({"search_space": SPACE, "workload": workload, "goal": goal})


def candidate(mode: str, selection: dict[str, Any], parallel: dict[str, Any]) -> Candidate:
    cfg = SmartSearchConfig.from_dict({"search_space": {**SPACE, "deployment_mode": [mode]},
                                       "workload": {"trace_path": "t.jsonl"}})
    return Candidate.unroll(cfg.search_space, {"deployment_mode": mode, "backend": "vllm", **selection},
                            ParallelConfig.from_dict(mode, parallel))


ROUTER = {"router_mode": "kv_router", "overlap_score_credit": 1.0, "prefill_load_scale": 4.0,
          "router_temperature": 0.0}
AGG_TP2 = candidate("agg", {"agg_max_num_seqs": 256, "agg_max_num_batched_tokens": 8192, **ROUTER,
                            "planner_scaling_policy": "disabled"}, {"tp": 2})
AGG_TP1 = candidate("agg", {"agg_max_num_seqs": 128, "agg_max_num_batched_tokens": 8192, **ROUTER,
                            "planner_scaling_policy": "disabled"}, {"tp": 1})
DISAGG = candidate("disagg", {"prefill_max_num_seqs": 4, "prefill_max_num_batched_tokens": 16384,
                              "decode_max_num_seqs": 512, "decode_max_num_batched_tokens": 8192,
                              "router_mode": "round_robin", "planner_scaling_policy": "disabled"},
                   {"prefill": {"tp": 1}, "decode": {"tp": 2}})

PROVENANCE = Provenance(spica_version="0.3.0", replay_runtime="1.6.1", aiconfigurator_core="0.12.0",
                        perf_db_versions={"vllm": "0.24.0"}, config_fingerprint="cfg1234abcd",
                        trace_fingerprint=None, stage_fingerprints={"trials": "trialsfp99"},
                        timing_source="aiconfigurator-core perf database (h200_sxm) through Dynamo's offline replay")


def metrics(gpus: int, met: int = 95, **kw: float) -> dict[str, float]:
    """Replay metrics over one hour with ``gpus`` GPUs provisioned throughout; ``met`` of 100 requests met the SLA."""
    return {"gpu_hours": float(gpus), "duration_ms": 3_600_000.0, "num_requests": 100.0,
            "goodput_completed_requests": float(met), **kw}


def feasible(mode: str, trial: int, cand: Candidate, score: float, round_: int = 0, **kw: Any) -> Trial:
    return Trial(mode, round_, trial, Status.feasible, cand.parallel, {}, {"backend": "vllm"}, candidate=cand,
                 score=score, **kw)


def failed(mode: str, trial: int, status: Status, reason: str, cand: Candidate = AGG_TP2) -> Trial:
    return Trial(mode, 0, trial, status, cand.parallel, {}, {"backend": "vllm"}, reason=reason,
                 candidate=cand if status is not Status.unsupported else None)


def scalar_trials() -> list[Trial]:
    agg_best = metrics(2, output_throughput_tok_s=2000.0, goodput_output_throughput_tok_s=1500.0, mean_ttft_ms=80.0,
                       p99_ttft_ms=200.0, mean_itl_ms=12.0, p99_itl_ms=30.0, mean_tpot_ms=12.0,
                       mean_e2e_latency_ms=2500.0, p99_e2e_latency_ms=4000.0)
    disagg = metrics(3, output_throughput_tok_s=2400.0, goodput_output_throughput_tok_s=1800.0, mean_ttft_ms=100.0,
                     p99_ttft_ms=150.0, mean_itl_ms=10.0, p99_itl_ms=25.0, mean_e2e_latency_ms=2100.0,
                     p99_e2e_latency_ms=3500.0)
    small = metrics(1, met=80, output_throughput_tok_s=1000.0, goodput_output_throughput_tok_s=900.0,
                    mean_ttft_ms=90.0)
    return [
        feasible("agg", 0, AGG_TP1, 900.0, metrics=small),
        feasible("agg", 1, AGG_TP2, 1500.0, metrics=agg_best),
        failed("agg", 2, Status.infeasible, "over budget: 16 GPUs > 8"),
        failed("agg", 3, Status.infeasible, "over budget: 12 GPUs > 8"),
        feasible("agg", 4, AGG_TP2, 1500.0, round_=1, metrics=agg_best, cache_hit=True),
        failed("agg", 5, Status.unsupported, "unsupported: sglang cannot run 1×TP2"),
        feasible("disagg", 0, DISAGG, 1800.0, metrics=disagg),
        failed("disagg", 1, Status.failed, "replay crashed: worker died", DISAGG),
    ]


def records_of(trials: list[Trial], cfg: SmartSearchConfig, provenance: Provenance = PROVENANCE
               ) -> list[CandidateRecord]:
    tally = Tally.of(trials)
    counts = {"attempts": tally.attempts, "feasible": tally.feasible, "reasons": dict(tally.reasons)}
    return [CandidateRecord.of(r, counts, provenance) for r in rank_trials(trials, cfg)]


AIC_RANK2 = AICEstimate(isl=4000, osl=200, concurrency=64, ttft_ms=75.0, tpot_ms=11.0,
                        output_throughput_tok_s=2100.0, output_throughput_tok_s_per_gpu=1050.0,
                        source="aiconfigurator-core 0.12.0 vllm 0.24.0 static agg", requested_concurrency=64)


def scalar_inputs(**kw: Any) -> ReportInputs:
    cfg = config(SYNTHETIC, SCALAR_GOAL)
    trials = scalar_trials()
    base: dict[str, Any] = dict(
        config=cfg, records=records_of(trials, cfg), emitted=(1, 2),
        manifests={1: "manifests/rank-1.yaml", 2: "manifests/rank-2.yaml"}, trials=trials, tally=Tally.of(trials),
        provenance=PROVENANCE, trace_file=None, aic={2: AIC_RANK2, 3: None}, pareto=False, objectives=("goodput",))
    return ReportInputs(**{**base, **kw})


def assert_png(path: Path) -> None:
    from matplotlib.image import imread

    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE
    assert len(data) > 5_000
    assert imread(path).shape == (440, 660, 4)   # 6 × 4 in at 110 dpi, RGBA


def section(text: str, title: str) -> str:
    """One ``## title`` section of the Markdown."""
    start = text.index(f"## {title}\n")
    end = text.find("\n## ", start + 3)
    return text[start:end if end >= 0 else None]


def objective(goal: str) -> tuple[str | None, ...]:
    """The ``- goal:`` item as (target, what it measures, unit, higher/lower, tie-break or None)."""
    m = re.fullmatch(r"(\w+): (.+) \(([^,]+), (higher|lower) is better\)(?:; ties go to (.+))?", goal)
    assert m, goal
    return m.groups()


def compared(text: str) -> dict[str, tuple[str, ...]]:
    """The winner-vs-runner-up table: metric -> (winner, runner-up, difference)."""
    rows = table(text, "metric")
    assert rows.header == ["metric", "winner (rank 1)", "runner-up (rank 2)", "difference"]
    return {metric: tuple(row.values())[1:] for metric, row in rows.by("metric").items()}


def given_up(winner: str) -> list[tuple[str, list[str]]]:
    """The "What the winner gives up" items: (metric, [winner, runner-up, difference, relative difference])."""
    gives = winner[winner.index("**What the winner gives up**"):]
    return [(metric, quantities(values)) for metric, values in fields(gives).items()]


def per_rank(text: str) -> dict[int, tuple[str, str]]:
    """``- rank N (name): note`` items as {N: (name, note)}."""
    items = [re.fullmatch(r"rank (\d+) \((.+?)\): (.*)", item) for item in bullets(text)]
    return {int(m.group(1)): (m.group(2), m.group(3)) for m in items if m}


def no_estimate_reason(note: str) -> str:
    m = re.fullmatch(r"no AIC estimate \((.*)\)", note)
    assert m, note
    return m.group(1)


# ---------------------------------------------------------------- number formatting


def test_numbers_carry_units_and_about_three_significant_digits() -> None:
    assert fmt(1234.4, "tok/s") == "1,234 tok/s"
    assert fmt(80.0, "ms") == "80.0 ms"
    assert fmt(2.0) == "2.00"
    assert fmt(0.1234, "h") == "0.123 h"
    assert fmt(3) == "3"
    assert fmt(12000) == "12,000"
    assert fmt(None, "ms") == "—"
    assert fmt(float("nan"), "ms") == "—"


# ---------------------------------------------------------------- scalar run


def test_scalar_report_files_and_plots(tmp_path: Path) -> None:
    files = write_report(tmp_path, scalar_inputs())
    assert isinstance(files, ReportFiles)
    assert files.markdown == tmp_path / "report.md" and files.html == tmp_path / "report.html"
    assert [p.name for p in files.plots] == ["front.png", "progress.png", "by_backend.png"]
    for plot in files.plots:
        assert plot.parent == tmp_path / "report"
        assert_png(plot)
    assert not (tmp_path / "report" / "trace_rate.png").exists()   # synthetic workload: no trace plot
    assert not [p for p in tmp_path.rglob("*") if p.name.endswith(".tmp")]   # atomic writes left nothing behind
    text = files.markdown.read_text()
    for name in ("front", "progress", "by_backend"):
        assert f"](report/{name}.png)" in text
    html = files.html.read_text()
    assert html.startswith("<!DOCTYPE html>") and "<style>" in html and "<table>" in html
    for name in ("front", "progress", "by_backend"):
        assert re.search(rf'<img[^>]*src="report/{name}\.png"', html), name
    assert '<a href="manifests/rank-1.yaml">' in html


def test_scalar_report_goal_sla_and_workload() -> None:
    text = render_markdown(scalar_inputs(), {})
    goal = fields(section(text, "Goal and SLA"))
    assert objective(goal["goal"]) == ("goodput", "goodput", "tok/s", "higher", "fewer GPUs")
    assert dict(re.findall(r"(\w+) ≤ (\S+ ms)", goal["SLA"])) == {"TTFT": "500 ms", "ITL": "50 ms"}
    requirement = goal["SLA requirement"]
    assert re.match(r"at least (\d+) % of requests", requirement).group(1) == "90"
    assert "rejected ones included" in requirement
    work = section(text, "Workload")
    synthetic = fields(work)["synthetic"]
    assert dict(re.findall(r"(ISL|OSL) (\S+ tokens)", synthetic)) == {"ISL": "4,000 tokens", "OSL": "200 tokens"}
    load = fields(work)["load"]
    assert "closed loop" in load and count(load, "requests in flight") == 64
    ratio = line_with(work, "num_request_ratio")
    assert quantities(ratio) == ["10.0", "640"] and count(ratio, "requests") == 640
    assert "![" not in text   # no plots were given


def test_scalar_report_winner_next_to_runner_up_and_what_it_gives_up() -> None:
    text = render_markdown(scalar_inputs(), {})
    winner = section(text, "The winner and why")
    head = line_with(winner, "Rank 1:")
    assert bold(head) == ["disagg vllm 1×TP1 + 1×TP2 on h200_sxm"]
    assert count(head, "GPUs") == 3 and re.search(r"found in round (\d+)", head).group(1) == "1"
    best = line_with(winner, "Best goodput")   # winner, runner-up, difference, relative difference
    assert quantities(best)[:4] == ["1,800 tok/s", "1,500 tok/s", "+300 tok/s", "+20.0%"]
    assert "runner-up" in best and re.search(r"GPU budget \((\d+) of (\d+) GPUs\)", best).groups() == ("3", "8")
    rows = compared(winner)   # (winner, runner-up, difference)
    assert rows["TTFT mean"] == ("100 ms", "80.0 ms", "+20.0 ms (+25.0%)")
    assert rows["TTFT p99"] == ("150 ms", "200 ms", "-50.0 ms (-25.0%)")
    assert rows["ITL mean"] == ("10.0 ms", "12.0 ms", "-2.00 ms (-16.7%)")
    assert rows["ITL p99"] == ("25.0 ms", "30.0 ms", "-5.00 ms (-16.7%)")
    assert rows["E2E mean"] == ("2,100 ms", "2,500 ms", "-400 ms (-16.0%)")
    assert rows["E2E p99"] == ("3,500 ms", "4,000 ms", "-500 ms (-12.5%)")
    assert rows["throughput"] == ("2,400 tok/s", "2,000 tok/s", "+400 tok/s (+20.0%)")
    assert rows["throughput per GPU"] == ("800 tok/s/GPU", "1,000 tok/s/GPU", "-200 tok/s/GPU (-20.0%)")
    assert rows["goodput"] == ("1,800 tok/s", "1,500 tok/s", "+300 tok/s (+20.0%)")
    assert rows["GPUs"] == ("3", "2", "+1 (+50.0%)")
    assert "TPOT mean" in rows   # only the runner-up has it: shown, no difference
    assert rows["TPOT mean"] == ("—", "12.0 ms", "—")
    gives = line_with(winner, "**What the winner gives up**")
    assert re.search(r"runner-up, (.+?), is better", gives).group(1) == "agg vllm 1×TP2 on h200_sxm"
    assert given_up(winner) == [
        ("TTFT mean", ["100 ms", "80.0 ms", "+20.0 ms", "+25.0%"]),
        ("throughput per GPU", ["800 tok/s/GPU", "1,000 tok/s/GPU", "-200 tok/s/GPU", "-20.0%"]),
        ("goodput per GPU", ["600 tok/s/GPU", "750 tok/s/GPU", "-150 tok/s/GPU", "-20.0%"]),
        ("GPUs", ["3", "2", "+1", "+50.0%"]),
        ("avg GPUs", ["3.00", "2.00", "+1.00", "+50.0%"]),
        ("GPU-hours", ["3.00 h", "2.00 h", "+1.00 h", "+50.0%"])]


def test_scalar_report_ranked_table_and_manifest_links() -> None:
    text = render_markdown(scalar_inputs(), {})
    results = section(text, "Results")
    assert count(results, "ranked candidates") == 3
    assert count(results, "feasible evaluation") == 3
    assert count(results, "emitted") == 2
    rows = table(results)
    assert rows.column("rank") == ["1", "2", "3"]
    first, third = rows[0], rows[2]
    assert cells(first, "mode", "backend", "parallel", "strategy") == ("disagg", "vllm", "1×TP1 + 1×TP2", "tp+tp")
    assert first["GPUs"] == "3"
    assert first["precision / batching / router / planner"] == "bf16 P:4/16384 D:512/8192 rr"
    assert first["goodput (tok/s)"] == "1,800 tok/s"
    assert first["SLA attainment"] == "0.95 (meets)"
    assert cells(first, "throughput", "TTFT mean (band)", "ITL mean (band)") == ("2,400 tok/s", "100 ms", "10.0 ms")
    assert links(first["manifest"]) == [("manifests/rank-1.yaml", "manifests/rank-1.yaml")]
    assert cells(third, "mode", "backend", "parallel", "strategy") == ("agg", "vllm", "1×TP1", "tp")
    assert third["GPUs"] == "1"
    assert third["precision / batching / router / planner"] == "bf16 A:128/8192 kv(1.0,4.0,0.0)"
    assert third["goodput (tok/s)"] == "900 tok/s"
    assert third["SLA attainment"] == "0.80 (misses)"
    assert cells(third, "throughput", "TTFT mean (band)", "ITL mean (band)") == ("1,000 tok/s", "90.0 ms", "—")
    assert third["manifest"] == ""   # not emitted
    missing = line_with(results, "SLA requirement")
    assert "ranked after every candidate that meets it" in missing
    assert re.findall(r"rank (\d+) \(([^)]+)\): (\S+ %)", missing) == [("3", "agg vllm 1×TP1 on h200_sxm", "80 %")]
    files = section(text, "Files")
    assert links(fields(files)["candidates"]) == [("candidates.parquet", "candidates.parquet"),
                                                  ("candidates.json", "candidates.json"),
                                                  ("candidates.csv", "candidates.csv")]
    assert "manifests" in fields(files)   # the manifests are listed under it
    manifests = {item: links(target) for item, target in fields(files, indent=2).items()}
    assert manifests == {"rank 1": [("manifests/rank-1.yaml", "manifests/rank-1.yaml")],
                         "rank 2": [("manifests/rank-2.yaml", "manifests/rank-2.yaml")]}


def test_scalar_report_aic_estimate_next_to_the_replay() -> None:
    aic = section(render_markdown(scalar_inputs(), {}), "AI Configurator's estimate (static agg)")
    notes = per_rank(aic)
    name, note = notes[2]
    assert name == "agg vllm 1×TP2 on h200_sxm"
    point = dict(re.findall(r"(ISL|OSL|concurrency) (\d+(?:,\d{3})*)", note))
    assert point == {"ISL": "4,000", "OSL": "200", "concurrency": "64"}
    assert note.split("source: ", 1)[1] == "aiconfigurator-core 0.12.0 vllm 0.24.0 static agg"
    rows = table(aic)
    assert rows.header == ["metric", "AI Configurator", "replay", "replay − AIC"]
    rows = {metric: tuple(row.values())[1:] for metric, row in rows.by("metric").items()}   # (AIC, replay, difference)
    assert rows["TTFT mean"] == ("75.0 ms", "80.0 ms", "+5.00 ms (+6.7%)")
    assert rows["TPOT / ITL mean"] == ("11.0 ms", "12.0 ms", "+1.00 ms (+9.1%)")
    assert rows["throughput"] == ("2,100 tok/s", "2,000 tok/s", "-100 tok/s (-4.8%)")
    assert rows["throughput per GPU"] == ("1,050 tok/s/GPU", "1,000 tok/s/GPU", "-50.0 tok/s/GPU (-4.8%)")
    name, note = notes[1]
    assert name == "disagg vllm 1×TP1 + 1×TP2 on h200_sxm"
    reason = no_estimate_reason(note)
    assert reason.startswith("disagg:") and "static agg" in reason
    name, note = notes[3]
    assert name == "agg vllm 1×TP1 on h200_sxm"
    assert no_estimate_reason(note).startswith("AIC has no analytic answer")


def test_aic_estimate_reason_given_as_text_and_the_scaling_planner() -> None:
    cfg = config(SYNTHETIC, SCALAR_GOAL)
    scaling = candidate("agg", {"agg_max_num_seqs": 256, "agg_max_num_batched_tokens": 8192, **ROUTER,
                                "planner_scaling_policy": "load_180_5", "planner_fpm_sampling": "default",
                                "planner_load_sensitivity": "default"}, {"tp": 2})
    trials = [feasible("agg", 0, scaling, 10.0, metrics=metrics(2, goodput_output_throughput_tok_s=10.0)),
              feasible("agg", 1, AGG_TP1, 5.0, metrics=metrics(1, goodput_output_throughput_tok_s=5.0))]
    inputs = scalar_inputs(records=records_of(trials, cfg), trials=trials, tally=Tally.of(trials),
                           aic={2: "no perf database for (h200_sxm, vllm)"})
    notes = per_rank(section(render_markdown(inputs, {}), "AI Configurator's estimate (static agg)"))
    name, note = notes[1]
    assert name == "agg vllm 1×TP2 on h200_sxm" and "planner scales replicas" in no_estimate_reason(note)
    name, note = notes[2]
    assert name == "agg vllm 1×TP1 on h200_sxm" and no_estimate_reason(note) == "no perf database for (h200_sxm, vllm)"


def test_scalar_report_tally_reasons_and_provenance() -> None:
    text = render_markdown(scalar_inputs(), {})
    tally = section(text, "Outcome tally")
    assert counts(line_with(tally, "attempts")) == {"attempts": 8, "feasible": 3, "infeasible": 2, "failed": 1,
                                                    "unsupported": 1, "cache hits": 1}
    reasons = {row["reason"]: (row["outcome"], row["count"]) for row in table(tally, "reason")}
    assert reasons == {"over budget": ("infeasible", "2"), "replay crashed": ("failed", "1"),
                       "unsupported": ("unsupported", "1")}
    prov = {row["what"]: row["value"] for row in table(section(text, "Provenance"))}
    assert prov["spica"] == "0.3.0"
    assert prov["ai-dynamo-runtime (replay)"] == "1.6.1"
    assert prov["aiconfigurator-core"] == "0.12.0"
    assert prov["perf DB (vllm)"] == "0.24.0"
    assert code(prov["config fingerprint"]) == ["cfg1234abcd"]
    assert code(prov["stage trials"]) == ["trialsfp99"]
    assert prov["timing source"] == PROVENANCE.timing_source   # "... through Dynamo's offline replay"


def test_progress_and_backend_series() -> None:
    inputs = scalar_inputs()
    # cache hits and unsupported pairs ran no replay; infeasible and failed ones did
    assert progress_series(inputs) == {"agg": [(1, 900.0), (2, 1500.0), (3, 1500.0), (4, 1500.0)],
                                       "disagg": [(1, 1800.0), (2, 1800.0)]}
    assert backend_groups(inputs) == {"vllm\nagg tp": [900.0, 1500.0], "vllm\ndisagg tp+tp": [1800.0]}


def test_minimised_goal_reads_scores_as_latency() -> None:
    cfg = config(SYNTHETIC, {"target": "e2e_latency"})
    trials = [feasible("agg", 0, AGG_TP1, -3000.0, metrics=metrics(1, mean_e2e_latency_ms=3000.0)),
              feasible("agg", 1, AGG_TP2, -2000.0, metrics=metrics(2, mean_e2e_latency_ms=2000.0))]
    inputs = scalar_inputs(config=cfg, records=records_of(trials, cfg), trials=trials, tally=Tally.of(trials),
                           aic={}, objectives=("e2e_latency",))
    assert progress_series(inputs) == {"agg": [(1, 3000.0), (2, 2000.0)]}
    text = render_markdown(inputs, {})
    goal = objective(fields(section(text, "Goal and SLA"))["goal"])
    assert goal[:4] == ("e2e_latency", "mean E2E latency", "ms", "lower")
    best = line_with(section(text, "The winner and why"), "Best mean E2E latency")
    assert "runner-up" in best   # winner, runner-up, difference, relative difference
    assert quantities(best)[:4] == ["2,000 ms", "3,000 ms", "-1,000 ms", "-33.3%"]


def test_single_candidate_and_a_score_tie() -> None:
    cfg = config(SYNTHETIC, SCALAR_GOAL)
    one = [feasible("agg", 0, AGG_TP1, 5.0, metrics=metrics(1, goodput_output_throughput_tok_s=5.0))]
    text = render_markdown(scalar_inputs(records=records_of(one, cfg), trials=one, tally=Tally.of(one), aic={}), {})
    only = line_with(section(text, "The winner and why"), "only ranked candidate")
    assert count(only, "feasible evaluation") == 1
    tie = [*one, feasible("agg", 1, AGG_TP2, 5.0, metrics=metrics(2, goodput_output_throughput_tok_s=5.0))]
    text = render_markdown(scalar_inputs(records=records_of(tie, cfg), trials=tie, tally=Tally.of(tie), aic={}), {})
    tied = line_with(section(text, "The winner and why"), "Tied on")
    assert re.search(r"Tied on (\w+) \(([^)]+)\)", tied).groups() == ("goodput", "5.00 tok/s")
    assert re.search(r"fewer GPUs \((\d+) vs (\d+)\)", tied).groups() == ("1", "2")   # winner vs runner-up
    assert "breaks the tie" in tied


# ---------------------------------------------------------------- Pareto run on a trace


def pareto_trials() -> list[Trial]:
    def t(mode: str, n: int, cand: Candidate, per_gpu: float, per_user: float) -> Trial:
        objs = {"throughput_per_gpu": per_gpu, "throughput_per_user": per_user}
        return feasible(mode, n, cand, per_gpu, objectives=objs,
                        metrics=metrics(cand.used_gpus, output_throughput_tok_s=per_gpu * cand.used_gpus,
                                        mean_output_token_throughput_per_user=per_user, mean_ttft_ms=50.0 + n))
    return [t("agg", 0, AGG_TP1, 1200.0, 40.0), t("agg", 1, AGG_TP2, 900.0, 70.0),
            t("agg", 2, AGG_TP2, 800.0, 60.0),                         # dominated by the one before
            t("disagg", 0, DISAGG, 600.0, 95.0),
            failed("disagg", 1, Status.infeasible, "KV capacity: 10 blocks < 12", DISAGG)]


def test_pareto_report_on_a_trace_workload(tmp_path: Path) -> None:
    trace = write_poisson_trace(tmp_path / "trace.jsonl", num_requests=300, rate_rps=10.0, seed=3)
    cfg = config({"trace_path": str(trace), "arrival_speedup_ratio": 2.0}, {"target": "pareto"})
    trials = pareto_trials()
    records = records_of(trials, cfg)
    assert [r.objectives["throughput_per_user"] for r in records] == [40.0, 70.0, 95.0]   # the front, in rank order
    run = tmp_path / "run"
    files = write_report(run, ReportInputs(
        config=cfg, records=records, emitted=(1, 3), manifests={1: "manifests/rank-1.yaml",
                                                                3: "manifests/rank-3.yaml"},
        trials=trials, tally=Tally.of(trials), provenance=PROVENANCE, trace_file=trace, aic={},
        pareto=True, objectives=("throughput_per_gpu", "throughput_per_user")))
    assert [p.name for p in files.plots] == ["front.png", "progress.png", "by_backend.png", "trace_rate.png"]
    for plot in files.plots:
        assert_png(plot)
    text = files.markdown.read_text()
    goal = fields(section(text, "Goal and SLA"))
    assert goal["goal"].startswith("Pareto front")
    assert re.findall(r"(\w+) \(([^,]+), (higher|lower) is better\)", goal["goal"]) == [
        ("throughput_per_gpu", "tok/s/GPU", "higher"), ("throughput_per_user", "tok/s/user", "higher")]
    assert goal["SLA"] == "none"
    profile = trace_profile(trace)
    work = section(text, "Workload")
    source = fields(work)["trace"]
    assert code(source) == ["trace.jsonl"] and re.search(r"\((\w+)\)$", source).group(1) == "mooncake"
    assert re.search(r"replayed (\S+)× as fast", line_with(work, "arrivals replayed")).group(1) == "2.00"
    arrivals = line_with(work, "requests over")
    assert count(arrivals, "requests over") == 300
    assert re.search(r"requests over (\S+ s)\b", arrivals).group(1) == fmt(profile.duration_s, "s")
    assert dict(re.findall(r"(mean|peak) (\S+ req/s)", arrivals)) == {"mean": fmt(profile.mean_rps, "req/s"),
                                                                      "peak": fmt(profile.peak_rps, "req/s")}
    [(alt, path)] = images(work)
    assert path == "report/trace_rate.png" and "requests per second" in alt
    results = section(text, "Results")
    assert count(results, "points of the Pareto front") == 3
    assert count(results, "feasible evaluation") == 4
    assert count(results, "emitted") == 2
    second = table(results).by("rank")["2"]
    assert cells(second, "mode", "backend", "parallel", "strategy") == ("agg", "vllm", "1×TP2", "tp")
    assert second["GPUs"] == "2"
    assert second["precision / batching / router / planner"] == "bf16 A:256/8192 kv(1.0,4.0,0.0)"
    assert second["throughput_per_gpu (tok/s/GPU)"] == "900 tok/s/GPU"
    assert second["throughput_per_user (tok/s/user)"] == "70.0 tok/s/user"
    winner = section(text, "The winner and why")
    assert "A Pareto front has no single winner" in winner
    assert re.search(r"rank (\d+) is better on (\w+) and worse on (\w+)", winner).groups() == (
        "1", "throughput_per_gpu", "throughput_per_user")
    per_user = ("40.0 tok/s/user", "70.0 tok/s/user", "-30.0 tok/s/user (-42.9%)")   # (winner, runner-up, difference)
    assert compared(winner)["throughput per user"] == per_user
    assert ("throughput per user", ["40.0 tok/s/user", "70.0 tok/s/user", "-30.0 tok/s/user", "-42.9%"]) in \
        given_up(winner)
    reasons = table(section(text, "Outcome tally"), "reason").by("reason")
    assert cells(reasons["KV capacity"], "outcome", "count") == ("infeasible", "1")
    html = files.html.read_text()
    for name in ("front", "progress", "by_backend", "trace_rate"):
        assert re.search(rf'<img[^>]*src="report/{name}\.png"', html), name


def test_trace_profile_counts_arrivals_per_bin(tmp_path: Path) -> None:
    rows = [{"timestamp": ms, "input_length": 100, "output_length": 10, "hash_ids": [i]}
            for i, ms in enumerate([0, 100, 200, 1500, 2100, 2900, 59_000])]
    profile = trace_profile(write_mooncake_trace(tmp_path / "t.jsonl", rows))
    assert profile.requests == 7 and profile.duration_s == pytest.approx(59.0)
    assert profile.bin_s == 1.0 and len(profile.rates) == 60
    assert profile.rates[:3] == (3.0, 1.0, 2.0) and profile.rates[59] == 1.0 and sum(profile.rates) == 7.0
    assert profile.mean_isl == 100.0 and profile.mean_osl == 10.0


def test_the_report_and_aics_lengths_share_one_parse_of_the_trace(tmp_path: Path, monkeypatch) -> None:
    import spica_core.predictors.windows as windows
    from spica_core.emit import aic_estimates

    parses: list[Path] = []
    real = windows.read_arrivals
    monkeypatch.setattr(windows, "read_arrivals", lambda path: parses.append(Path(path)) or real(path))
    trace = write_poisson_trace(tmp_path / "trace.jsonl", num_requests=200, rate_rps=10.0, seed=5)
    cfg = config({"trace_path": str(trace)}, {"target": "throughput_per_gpu"})
    trials = pareto_trials()
    records = records_of(trials, cfg)
    aic_estimates(records, cfg, trace)
    write_report(tmp_path / "run", ReportInputs(
        config=cfg, records=records, emitted=(), manifests={}, trials=trials, tally=Tally.of(trials),
        provenance=PROVENANCE, trace_file=trace, aic={}, pareto=False, objectives=()))
    assert parses == [trace]
    first = trace_profile(trace)
    write_poisson_trace(trace, num_requests=50, rate_rps=10.0, seed=6)   # a changed file is parsed again
    assert trace_profile(trace).requests == 50 and first.requests == 200 and len(parses) == 2


# ---------------------------------------------------------------- nothing feasible


def test_no_feasible_candidate_still_renders_with_the_reasons(tmp_path: Path) -> None:
    trials = [failed("agg", 0, Status.infeasible, "over budget: 16 GPUs > 8"),
              failed("agg", 1, Status.infeasible, "over budget: 10 GPUs > 8"),
              failed("agg", 2, Status.infeasible, "KV capacity: 3 blocks < 4"),
              failed("disagg", 0, Status.failed, "replay crashed: worker died", DISAGG)]
    (tmp_path / "report").mkdir()
    (tmp_path / "report" / "front.png").write_bytes(b"stale")   # from an earlier emit
    files = write_report(tmp_path, scalar_inputs(records=(), emitted=(), manifests={}, trials=trials,
                                                 tally=Tally.of(trials), aic={}))
    assert files.plots == ()
    assert not (tmp_path / "report" / "front.png").exists()
    text = files.markdown.read_text()
    results = section(text, "Results")
    none = line_with(results, "No feasible candidate")
    assert bold(none) == ["No feasible candidate"]
    assert counts(none) == {"attempt": 4, "infeasible": 3, "failed": 1, "unsupported": 0}
    top = line_with(results, "Top reasons")
    assert re.findall(r"(\w[\w ]*?) \((\d+)×\)", top) == [("over budget", "2"), ("KV capacity", "1"),
                                                             ("replay crashed", "1")]   # most frequent first
    assert "## The winner and why" not in text
    assert fields(section(text, "Files"))["manifests"] == "none written"
    assert fields(section(text, "Files"), indent=2) == {}
    reasons = table(section(text, "Outcome tally"), "reason").by("reason")
    assert cells(reasons["over budget"], "outcome", "count") == ("infeasible", "2")
    assert "No feasible candidate" in files.html.read_text()


def test_the_report_shows_each_latency_with_its_band_and_the_confidence_check() -> None:
    from dataclasses import replace

    from spica_core.emit.rechecks import ConfidenceCheck
    from spica_core.evaluate.bands import Band

    base = scalar_inputs()
    first = replace(base.records[0], bands={"ttft_ms": Band(80.0, 95.0, 130.0, 60, "all"),
                                            "itl_ms": Band(9.0, 10.5, 12.0, 60, "all")})
    inputs = replace(base, records=(first, *base.records[1:]),
                     confidence=ConfidenceCheck(0.9, {1: 10.0, 2: 20.0, 3: None}))
    text = render_markdown(inputs, {})
    rank1 = table(section(text, "Results")).by("rank")["1"]
    band = r"(\S+ ms) \((\S+)–(\S+) on (.+), (\d+) rows\)"   # point (low–high on what, how many rows)
    assert re.fullmatch(band, rank1["TTFT mean (band)"]).groups() == ("100 ms", "80.0", "130", "measured GPUs", "60")
    assert re.fullmatch(band, rank1["ITL mean (band)"]).groups() == ("10.0 ms", "9.00", "12.0", "measured GPUs", "60")
    goal = section(text, "Goal and SLA")
    confidence = fields(goal)["SLA confidence"]
    assert quantities(confidence) == ["0.5"] and "point prediction" in confidence
    check = line_with(goal, "would rank")
    assert re.search(r"at confidence (\S+) the top (\d+)", check).groups() == ("0.9", "3")
    assert re.findall(r"rank (\d+) \(([^)]+)\)", check) == [("2", "20.0"), ("1", "10.0"), ("3", "failed")]
    assert "a different order" in check


def test_the_results_table_lists_the_top_20_and_points_at_the_csv() -> None:
    from dataclasses import replace

    base = scalar_inputs()
    many = tuple(replace(base.records[i % len(base.records)], rank=i + 1) for i in range(25))
    results = section(render_markdown(replace(base, records=many), {}), "Results")
    ranks = [int(m.group(1)) for m in re.finditer(r"^\| (\d+) \|", results, re.M)]
    assert ranks == list(range(1, 21))
    shown = line_with(results, "are shown")
    assert re.search(r"top (\d+) of (\d+)", shown).groups() == ("20", "25")
    assert links(shown) == [("candidates.csv", "candidates.csv")]


def test_the_html_report_shows_raw_html_from_reasons_and_names_as_text() -> None:
    from spica_core.emit.report import render_html

    page = render_html("| reason |\n|---|\n| failed: <script>alert(1)</script> |\n\nmodel `<img src=x onerror=y>` "
                       "<b>bold</b>\n\n<div onclick=z>block</div>", title="run <x>")
    assert "<script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<b>" not in page and "<div onclick" not in page and "&lt;div onclick=z&gt;block&lt;/div&gt;" in page
    assert "<code>&lt;img src=x onerror=y&gt;</code>" in page and "<title>run &lt;x&gt;</title>" in page
    assert "<table>" in page  # Markdown itself still renders


def test_the_cli_and_the_report_format_numbers_by_one_rule() -> None:
    """One rule (emit/numbers.py): the CLI's tables are the report's numbers with a fourth digit, and both mark a
    missing value the same way."""
    from spica_cli.evaluate import _fmt as evaluate_fmt
    from spica_cli.sweep import _fmt as sweep_fmt
    from spica_core.emit import MISSING, fmt

    for value, report, cli in [(12.345, "12.3", "12.35"), (20.0, "20.0", "20.00"), (12345.6, "12,346", "12,346"),
                               (0.01234, "0.0123", "0.01234"), (None, MISSING, MISSING), (float("nan"), MISSING, MISSING)]:
        assert fmt(value) == report
        assert sweep_fmt(value) == evaluate_fmt(value) == cli

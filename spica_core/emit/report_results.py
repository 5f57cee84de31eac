"""The report's "Results" section: the plots, the table of ranked candidates with its notes, and headroom."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from spica_core.emit.numbers import fmt
from spica_core.emit.records import CandidateRecord
from spica_core.emit.report_format import (
    _describe, _feasible, _Goal, _table, _target_label, _with_band, percent, rank_label,
)
from spica_core.emit.rows import candidate_row
from spica_core.search.trials import Tally
from spica_core.space.branches import config_strategy

if TYPE_CHECKING:
    from spica_core.emit.report import ReportInputs


def _results_section(inputs: ReportInputs, goal: _Goal, plots: Mapping[str, str]) -> list[str]:
    lines = ["## Results", ""]
    feasible = _feasible(inputs.trials)
    if not inputs.records:
        lines += _no_candidate(inputs.tally)
    else:
        what = "points of the Pareto front" if goal.pareto else "ranked candidates"
        lines.append(f"{len(inputs.records)} {what} from {fmt(len(feasible))} feasible evaluation(s); "
                     f"{len(inputs.emitted)} emitted as manifests.")
        lines.append("")
    captions = {"front": "Pareto front (emitted points marked)" if goal.pareto
                else f"{goal.axis_label()} against GPUs used (ranked and emitted candidates marked)",
                "cost": "cost per million output tokens against goodput; the line is the cost front: no candidate "
                        "meeting the SLA requirement is cheaper for as much goodput",
                "progress": "best score so far against evaluations, per branch",
                "by_backend": "scores by backend and parallel strategy"}
    for name, caption in captions.items():
        if name in plots:
            lines += [f"![{caption}]({plots[name]})", ""]
    if inputs.records:
        lines += _candidates_table(inputs, goal)
        lines += _headroom_lines(inputs, plots)
    return lines


def _headroom_lines(inputs: ReportInputs, plots: Mapping[str, str]) -> list[str]:
    """How much more traffic the emitted candidates take before their SLA breaks."""
    goal = inputs.config.goal
    lines = ["### Headroom", ""]
    if goal.sla is None:
        return [*lines, "No SLA, so no headroom: nothing breaks as traffic grows.", ""]
    measured = [r for r in inputs.records if r.headroom is not None]
    if not measured:
        return [*lines, "Not measured for these candidates (`spica emit` replays nothing).", ""]
    lines.append(f"The largest traffic scale (up to {fmt(goal.headroom_max)}×) at which at least "
                 f"{percent(goal.headroom_share)} of requests meet the SLA, found by bisection to 5 %:")
    lines.append("")
    for r in measured:
        assert r.headroom is not None
        lines.append(f"- rank {r.rank} ({_describe(r)}): {r.headroom.text()}, {r.headroom.evaluations} extra replays")
    if "headroom" in plots:
        lines += ["", f"![SLA attainment against traffic scale]({plots['headroom']})"]
    return [*lines, ""]


def _energy_notes(records: Sequence[CandidateRecord]) -> list[str]:
    """Where the energy figures came from: said plainly when they are board-power bounds."""
    sources = {str(r.metrics.get("energy_source")) for r in records if "energy_source" in r.metrics}
    if not sources:
        return []
    if sources == {"board_power"}:
        return ["", "Energy per token is an upper bound: aiconfigurator-core's perf database has no measured power "
                    "for the operations these steps run, so every GPU draws its board power for all of its time "
                    "(`energy_source: board_power`)."]
    return ["", "Energy per token uses aiconfigurator-core's measured per-operation energy where it has it and the "
                "board power elsewhere (`energy_source`, and `energy_coverage`, the share of step time measured, in "
                "candidates.json)."]


def _no_candidate(tally: Tally) -> list[str]:
    top = tally.top_reasons(3)
    lines = [f"**No feasible candidate**: none of the {fmt(tally.attempts)} attempt(s) was feasible "
             f"({fmt(tally.infeasible)} infeasible, {fmt(tally.failed)} failed, {fmt(tally.unsupported)} "
             "unsupported)."]
    if top:
        lines.append("Top reasons: " + "; ".join(f"{reason} ({n}×)" for reason, n in top) + ".")
    lines.append("")
    return lines


def _candidates_table(inputs: ReportInputs, goal: _Goal) -> list[str]:
    emitted = set(inputs.emitted)
    value_cols = [f"{o} ({_target_label(o)[1]})" for o in goal.objectives]
    scale = inputs.config.goal.robust_scale
    robust = scale > 1 and not goal.pareto
    if robust:
        value_cols = [f"{value_cols[0]}, robust: the worse of 1× and {fmt(scale)}× traffic", "at today's traffic"]
    sla = inputs.config.goal.sla is not None
    priced = bool(inputs.config.goal.gpu_hour_usd)
    energy = any("energy_j_per_token" in r.metrics for r in inputs.records)
    header = ["rank", "mode", "backend", "GPU type", "parallel", "strategy", "GPUs", "precision / batching / router / planner",
              *value_cols, *(["SLA attainment"] if sla else []), "throughput", "TTFT mean (band)", "ITL mean (band)",
              *(["cost (USD/Mtok)"] if priced else []), *(["energy (J/token)"] if energy else []), "manifest"]
    rows = []
    for r in inputs.records[:TABLE_ROWS]:
        row = candidate_row(r.candidate, r.used_gpus, r.metrics, r.bands, r.attainment, r.meets_sla)
        if goal.pareto:
            values = [fmt((r.objectives or {}).get(o), _target_label(o)[1]) for o in goal.objectives]
        else:
            values = [fmt(goal.raw(r.score), _target_label(goal.first)[1])]
        if robust:
            values.append(fmt(goal.raw(r.metrics["plain_score"]), _target_label(goal.first)[1])
                          if "plain_score" in r.metrics else "—")
        link = inputs.manifests.get(r.rank)
        manifest = f"[{link}]({link})" if link else ("emitted" if r.rank in emitted else "")
        rows.append([rank_label(r), row.mode, row.backend, row.gpu, row.parallel, config_strategy(r.candidate.parallel),
                     row.gpus, row.knobs, *values, *([row.attainment or "—"] if sla else []),
                     fmt(row.throughput_tok_s, "tok/s"), _with_band(row.ttft_ms, row.ttft_band),
                     _with_band(row.itl_ms, row.itl_band), *([fmt(row.cost_per_mtok)] if priced else []),
                     *([fmt(r.metrics.get("energy_j_per_token"))] if energy else []), manifest])
    lines = _table(header, rows)
    lines += _energy_notes(inputs.records[:TABLE_ROWS])
    lines += _requirement_notes(inputs, goal)
    lines += _tie_notes(inputs.records)
    if any(r.candidate.router.is_kv for r in inputs.records[:TABLE_ROWS]):
        lines += ["", "KV-router replays are not exactly reproducible: ai-dynamo-runtime breaks routing ties with an "
                      "unseeded generator, so the same candidate scores about 0.1–0.5 % apart from run to run and a "
                      "re-run sweep can rank near-ties differently. Each emitted KV-router candidate was replayed "
                      "3 more times; twice its spread is in its band (`spread`)."]
    if len(inputs.records) > TABLE_ROWS:
        lines += ["", f"The top {TABLE_ROWS} of {fmt(len(inputs.records))} are shown; every candidate is in "
                      "[candidates.csv](candidates.csv)."]
    return [*lines, ""]


TABLE_ROWS = 20  # the results table's length; candidates.csv has every candidate


def _requirement_notes(inputs: ReportInputs, goal: _Goal) -> list[str]:
    """Every candidate that misses the SLA requirement, by name, or that none meets it."""
    required = inputs.config.goal.required_attainment
    missing = [r for r in inputs.records if r.meets_sla is False]
    if not missing or required <= 0:
        return []
    need = percent(required)
    if len(missing) == len(inputs.records):
        what = ("the front is drawn over all of them" if goal.pareto
                else "they are ranked by attainment, highest first")
        return ["", f"**No candidate meets the SLA requirement** ({need} of requests within the SLA); {what}. "
                    "Deploying any of them, expect more requests to miss the SLA than required: raise the GPU "
                    "budget, relax the SLA, or lower the traffic."]
    named = "; ".join(f"rank {r.rank} ({_describe(r)}): {percent(r.attainment or 0.0)}" for r in missing)
    return ["", f"Missing the SLA requirement ({need} of requests within the SLA), so ranked after every candidate "
                f"that meets it: {named}."]


def _tie_notes(records: Sequence[CandidateRecord]) -> list[str]:
    """Near-ties: neighbours whose scores differ by less than their replays' run-to-run spread."""
    groups = sorted({tuple(sorted((r.rank, *r.tied_with))) for r in records if r.tied_with})
    if not groups:
        return []
    named = "; ".join("ranks " + ", ".join(map(str, g)) for g in groups)
    return ["", f"Near-ties (`=` in the rank column): {named}. Their scores differ by less than their replays' "
                "run-to-run spread (`score_spread` in candidates.json), so their order is not a result: "
                "choose among them on the other columns."]

"""The report's "The winner and why" section: why the winner ranks first and what it gives up to the runner-up."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from spica_core.emit.numbers import fmt
from spica_core.emit.records import CandidateRecord
from spica_core.emit.report_format import _describe, _difference, _Goal, _table, _target_label, percent
from spica_core.evaluate.metrics import METRICS, derived_metrics
from spica_core.evaluate.scoring import minimised

if TYPE_CHECKING:
    from spica_core.emit.report import ReportInputs


# the winner / runner-up comparison, in this order (labels, units and directions: evaluate/metrics.py)
COMPARED = tuple(METRICS[k] for k in (
    "mean_ttft_ms", "p99_ttft_ms", "mean_itl_ms", "p99_itl_ms", "mean_tpot_ms", "mean_e2e_latency_ms",
    "p99_e2e_latency_ms", "output_throughput_tok_s", "output_throughput_tok_s_per_gpu",
    "mean_output_token_throughput_per_user", "goodput_output_throughput_tok_s",
    "goodput_output_throughput_tok_s_per_gpu", "used_gpus", "avg_gpus", "gpu_hours"))


def _winner_section(inputs: ReportInputs, goal: _Goal) -> list[str]:
    if not inputs.records:
        return []
    winner = inputs.records[0]
    lines = ["## The winner and why", ""]
    lines.append(f"Rank {winner.rank}: **{_describe(winner)}** ({fmt(winner.used_gpus)} GPUs, found in round "
                 f"{winner.round + 1}).")
    if len(inputs.records) < 2:
        feasible = inputs.tally.feasible
        lines += ["", "It is the only ranked candidate" + (f" ({fmt(feasible)} feasible evaluation(s))."
                                                            if feasible else "."), ""]
        lines += _metrics_table([("winner", winner)])
        return lines
    runner = inputs.records[1]
    lines += ["", *_why(goal, winner, runner, inputs.config.search_space.gpu_budget), ""]
    lines += _metrics_table([(f"winner (rank {winner.rank})", winner), (f"runner-up (rank {runner.rank})", runner)],
                            diff=True)
    gives = _gives_up(winner, runner)
    lines.append(f"**What the winner gives up** (where the runner-up, {_describe(runner)}, is better):")
    lines.append("")
    lines += [f"- {g}" for g in gives] if gives else ["- nothing: it is at least as good on every metric shown"]
    lines.append("")
    return lines


def _why(goal: _Goal, winner: CandidateRecord, runner: CandidateRecord, budget: int) -> list[str]:
    if goal.pareto:
        w, r = winner.objectives or {}, runner.objectives or {}
        better = [o for o in goal.objectives if o in w and o in r
                  and (w[o] < r[o] if minimised(o) else w[o] > r[o])]
        worse = [o for o in goal.objectives if o in w and o in r
                 and (w[o] > r[o] if minimised(o) else w[o] < r[o])]
        parts = ", ".join(f"{o} {fmt(w[o], _target_label(o)[1])} vs {fmt(r[o], _target_label(o)[1])}"
                          for o in goal.objectives if o in w and o in r)
        return [f"A Pareto front has no single winner: rank {winner.rank} is the first point of the front "
                f"(ordered by {goal.objectives[-1]}) and is compared with its neighbour, rank {runner.rank}. "
                f"Neither dominates the other: {parts}; rank {winner.rank} is better on "
                f"{', '.join(better) or 'nothing'} and worse on {', '.join(worse) or 'nothing'}."]
    label, unit = _target_label(goal.first)
    wv, rv = goal.raw(winner.score), goal.raw(runner.score)
    if winner.meets_sla and runner.meets_sla is False:
        return [f"The runner-up misses the SLA requirement ({percent(runner.attainment or 0.0)} of its requests meet "
                f"the SLA); the winner meets it ({percent(winner.attainment or 0.0)}), with {label} {fmt(wv, unit)} vs "
                f"{fmt(rv, unit)}."]
    if winner.meets_sla is False:
        return [f"No candidate meets the SLA requirement; the winner comes closest ({percent(winner.attainment or 0.0)}"
                f" of its requests meet the SLA, the runner-up's {percent(runner.attainment or 0.0)})."]
    if winner.tied_with and runner.rank in winner.tied_with:
        return [f"A near-tie with the runner-up: {label} {fmt(wv, unit)} vs {fmt(rv, unit)} is within their replays' "
                "run-to-run spread, so either may come first on a re-run."]
    if winner.score == runner.score:
        return [f"Tied on {label} ({fmt(wv, unit)}); the winner uses fewer GPUs "
                f"({fmt(winner.used_gpus)} vs {fmt(runner.used_gpus)}), which breaks the tie."]
    return [f"Best {label}: {fmt(wv, unit)} vs the runner-up's {fmt(rv, unit)}, {_difference(wv, rv, unit)}, "
            f"within the GPU budget ({fmt(winner.used_gpus)} of {fmt(budget)} GPUs)."]


def _metrics_table(columns: Sequence[tuple[str, CandidateRecord]], diff: bool = False) -> list[str]:
    values = [derived_metrics(r.metrics, r.used_gpus) for _, r in columns]
    header = ["metric", *(name for name, _ in columns)] + (["difference"] if diff else [])
    rows = []
    for metric in COMPARED:
        label, key, unit = metric.label, metric.key, metric.unit
        if not any(key in v for v in values):
            continue
        row = [label, *(fmt(_value(key, v.get(key)), unit) for v in values)]
        if diff:
            a, b = _value(key, values[0].get(key)), _value(key, values[1].get(key))
            row.append(_difference(a, b, unit) if a is not None and b is not None else "—")
        rows.append(row)
    return [*_table(header, rows), ""]


def gives_up(winner: Mapping[str, float], runner: Mapping[str, float]) -> list[tuple[str, float, float, str]]:
    """(label, winner value, runner-up value, unit) for every compared metric where the runner-up is better."""
    out = []
    for metric in COMPARED:
        key = metric.key
        if key not in winner or key not in runner:
            continue
        a, b = winner[key], runner[key]
        if (a < b) if metric.higher_is_better else (a > b):
            out.append((metric.label, _value(key, a), _value(key, b), metric.unit))
    return out


def _gives_up(winner: CandidateRecord, runner: CandidateRecord) -> list[str]:
    w = derived_metrics(winner.metrics, winner.used_gpus)
    r = derived_metrics(runner.metrics, runner.used_gpus)
    lines = []
    for label, a, b, unit in gives_up(w, r):
        lines.append(f"{label}: {fmt(a, unit)} vs {fmt(b, unit)}, {_difference(a, b, unit)}")
    return lines


def _value(key: str, value: float | None) -> float | int | None:
    """GPU counts are whole numbers."""
    return int(value) if key == "used_gpus" and value is not None else value


__all__ = ["gives_up"]

"""The report's "Goal and SLA" section: the objective, the SLA, its requirement and confidence, the search."""
from __future__ import annotations

from typing import TYPE_CHECKING

from spica_core.config.model import SmartSearchConfig
from spica_core.emit.numbers import fmt
from spica_core.emit.rechecks import CHECK_CONFIDENCE, sla_moves_ranking
from spica_core.emit.report_format import _direction, _Goal, _target_label, _whole, percent

if TYPE_CHECKING:
    from spica_core.emit.report import ReportInputs


def _goal_section(inputs: ReportInputs, goal: _Goal) -> list[str]:
    config = inputs.config
    lines = ["## Goal and SLA", ""]
    if goal.pareto:
        parts = [f"{o} ({_target_label(o)[1]}, {_direction(o)})" for o in goal.objectives]
        lines.append(f"- goal: Pareto front over {', '.join(parts)}")
    else:
        label, unit = _target_label(goal.first)
        ties = ("ties go to higher goodput per GPU, then fewer GPUs" if goal.first == "min_gpus"
                else "ties go to fewer GPUs")
        lines.append(f"- goal: {goal.first}: {label} ({unit}, {_direction(goal.first)}); {ties}")
    sla = config.goal.sla
    if sla is None or not sla.model_dump(exclude_none=True):
        lines.append("- SLA: none")
    else:
        parts = [f"{name} ≤ {fmt(_whole(value), 'ms')}" for name, value in
                 (("TTFT", sla.ttft_ms), ("ITL", sla.itl_ms), ("E2E", sla.e2e_ms)) if value is not None]
        lines.append(f"- SLA: {', '.join(parts)}")
        lines.append(_requirement_line(config))
        lines += _confidence_lines(inputs)
    sweep = config.sweep
    lines.append(f"- search: {sweep.policy.value}, {sweep.max_rounds} rounds × {sweep.per_round} per round, "
                 f"seed {sweep.seed}")
    lines.append("")
    return lines


def _requirement_line(config: SmartSearchConfig) -> str:
    """What the SLA asks of a candidate, in a user's words."""
    goal = config.goal
    required = goal.required_attainment
    if required <= 0:
        return ("- SLA requirement: none (`sla_attainment: 0`): the SLA counts only in goodput, so a candidate "
                "whose requests mostly miss it can still rank first")
    where = ("only candidates that meet it are on the front (all of them when none does)" if goal.is_pareto else
             "a candidate that misses it is still listed, but after every candidate that meets it, and those "
             "that miss it rank by attainment")
    return (f"- SLA requirement: at least {percent(required)} of requests (rejected ones included) must meet the SLA "
            f"at today's traffic (`sla_attainment`; the share that does is the candidate's attainment); {where}")


def _confidence_lines(inputs: ReportInputs) -> list[str]:
    """Which SLA confidence ranked the candidates, and how the top ones would rank at the check's."""
    conf = inputs.config.goal.sla_confidence
    lines = [f"- SLA confidence: {conf:g} — " + ("the point prediction" if conf <= 0.5 else
             f"a request meets the SLA only if its latency, times the p{round(conf * 100)} of measured ÷ "
             "predicted on measured GPUs (the candidate's error band), meets it")]
    check = inputs.confidence
    if check is None:
        if not sla_moves_ranking(inputs.config):
            lines.append("- the SLA does not enter this goal's ranking, so no confidence changes it")
        elif conf != CHECK_CONFIDENCE:
            lines.append(f"- at confidence {CHECK_CONFIDENCE:g}: not replayed (`spica emit` replays nothing)")
        return lines
    order = check.reranked()

    def shown_one(r: int) -> str:
        if check.scores[r] is None:
            return f"rank {r} (failed)"
        share = check.attainments.get(r)
        missing = ", misses the SLA requirement" if check.misses(r) else ""
        return (f"rank {r} ({fmt(check.scores[r])}" + (f", attainment {share:.2f}" if share is not None else "")
                + f"{missing})")

    shown = ", ".join(shown_one(r) for r in order)
    same = order == sorted(check.scores)
    lines.append(f"- at confidence {check.confidence:g} the top {len(order)} would rank: {shown}"
                 + (" — the same order" if same else " — a different order"))
    return lines

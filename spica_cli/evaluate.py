"""``spica evaluate CONFIG [--json]``: replay one fully pinned candidate and print what it scores.

Every knob that applies to the candidate must have one value and ``parallel_configs`` one entry;
otherwise the command names the knobs that still have several values. The candidate runs through
the same evaluation path as a sweep (AIC profile, KV capacity, runtime-validated engine args,
planner policy, replay, goal score), in an isolated worker process with the sweep's
``max_eval_seconds`` deadline.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from spica_cli.exits import EXIT_NO_RESULT, EXIT_OK
from spica_core.errors import SpicaError


HEADLINE_ROWS = ("output_throughput_tok_s", "output_throughput_tok_s_per_gpu", "mean_output_token_throughput_per_user",
                 "request_throughput_rps", "mean_ttft_ms", "p99_ttft_ms", "mean_itl_ms", "p99_itl_ms",
                 "mean_e2e_latency_ms", "p99_e2e_latency_ms", "goodput_output_throughput_tok_s",
                 "goodput_request_throughput_rps", "prefix_cache_reused_ratio", "gpu_hours", "avg_gpus",
                 "completed_requests", "planner_total_ticks")


def unpinned_knobs(config: Any) -> list[str]:
    """Knobs that apply to the single candidate (after pruning) but still list several values."""
    from spica_core.config.pruning import branch_knob_choices
    from spica_core.config.policies import scaling_flags

    space = config.search_space
    multi: list[str] = []
    if len(space.deployment_mode) > 1:
        multi.append(f"deployment_mode ({len(space.deployment_mode)} values: {space.deployment_mode})")
    if len(space.parallel_configs) != 1:
        multi.append(f"parallel_configs ({len(space.parallel_configs) or 'none: derived'}; give exactly one entry)")
    for mode in space.deployment_mode:
        knobs, ranges = branch_knob_choices(config, mode, space.backend)
        for name, values in knobs.items():
            entry = f"{name} ({len(values)} values: {values})"
            if len(values) > 1 and entry not in multi:
                multi.append(entry)
        for name in ranges:
            multi.append(f"workload.{name} (a range {config.workload.kv_load_ratio}; give one ratio)")
    policies = space.planner_scaling_policy
    if len(policies) == 1 and scaling_flags(policies[0])[0] and len(space.load_predictor_candidates) > 1:
        multi.append(f"load_predictor_candidates ({len(space.load_predictor_candidates)} values: "
                     f"{space.load_predictor_candidates})")
    return multi


def build_request(config: Any, config_path: str) -> Any:
    """The single candidate of a fully pinned config as an EvalRequest."""
    from spica_core.config.knobs import decode_composite
    from spica_core.deployment import Candidate
    from spica_core.evaluate import EvalRequest
    from spica_core.space.parallel import ParallelConfig

    multi = unpinned_knobs(config)
    if multi:
        raise SpicaError("spica evaluate needs a fully pinned config; these knobs still have several values:\n  - "
                         + "\n  - ".join(multi))
    space = config.search_space
    mode = space.deployment_mode[0]
    pc = ParallelConfig.from_dict(mode, space.parallel_configs[0].model_dump())
    predictor = None
    flags = decode_composite("planner_scaling_policy", space.planner_scaling_policy[0])
    if flags["enable_throughput_scaling"]:
        predictor = {int(flags["throughput_adjustment_interval_seconds"]): space.load_predictor_candidates[0]}
    candidate = Candidate.unroll(space, {"deployment_mode": mode}, pc, predictor)
    trace = config.trace_file(Path(config_path).parent)
    return EvalRequest.from_config(config, candidate, trace_file=str(trace) if trace else None, eval_id="evaluate")


def _fmt(value: Any) -> str:
    from spica_core.emit import fmt

    return fmt(value, digits=4)


def render_text(outcome: Any, goal: Any, headroom: Any = None) -> str:
    from spica_core.emit.report_format import band_range
    from spica_core.evaluate import METRICS, headline

    sample = outcome.candidate.to_sample()
    lines = ["candidate (flat sample):"]
    width = max(len(k) for k in sample)
    for key in sorted(sample):
        lines.append(f"  {key:<{width}}  {sample[key]!r}")
    lines.append("")
    lines.append(f"status: {outcome.status.value}" + (f" — {outcome.reason}" if outcome.reason else ""))
    if outcome.feasible:
        head = headline(outcome.report)
        lines.append("metrics:")
        for key in HEADLINE_ROWS:
            if key in head:
                metric = METRICS[key]
                lines.append(f"  {metric.label:<20} {_fmt(head[key]):>14} {metric.unit}")
        for key, label in (("ttft_ms", "TTFT"), ("itl_ms", "ITL")):
            band = outcome.bands.get(key)
            if band is not None:
                lines.append(f"  {label + ' on measured GPUs':<20} {band_range(band)}, p10–p90 ({band.group})")
        confidence = f", SLA held at confidence {goal.sla_confidence}" if goal.sla and goal.sla_confidence > 0.5 else ""
        lines.append(f"goal: {goal.target.value}"
                     + (f" (sla {goal.sla.model_dump(exclude_none=True)}{confidence})" if goal.sla else ""))
        lines.append(f"score: {_fmt(outcome.score)}")
        if goal.sla is not None:
            from spica_core.emit.report_format import attainment_text, percent
            from spica_core.evaluate import attainment, meets_sla

            lines.append(f"SLA attainment: {attainment_text(attainment(outcome.report), meets_sla(goal, outcome.report))}"
                         f" ({percent(goal.required_attainment)} of requests required)")
        lines.append("headroom: " + (headroom.text() + f" ({headroom.evaluations} extra replays)" if headroom
                                     else "no SLA, so no headroom"))
        if outcome.objectives:
            lines.append("objectives: " + ", ".join(f"{k}={_fmt(v)}" for k, v in outcome.objectives.items()))
    t = outcome.timings
    if "replay_s" in t:
        lines.append(f"time: prepare {t.get('prepare_s', 0):.2f}s, replay {t['replay_s']:.2f}s")
    return "\n".join(lines)


def render_json(outcome: Any, goal: Any, headroom: Any = None) -> str:
    from spica_core.evaluate import attainment, headline, meets_sla

    body = {"status": outcome.status.value, "reason": outcome.reason, "sample": outcome.candidate.to_sample(),
            "metrics": headline(outcome.report) if outcome.feasible else {},
            "bands": {k: b.to_dict() for k, b in outcome.bands.items()},
            "headroom": ({k: v for k, v in headroom.to_dict().items() if k in ("scale", "attainment", "evaluations",
                                                                               "capped", "below_floor")}
                         if headroom else None),
            "score": outcome.score, "objectives": outcome.objectives, "goal": goal.model_dump(mode="json"),
            "attainment": attainment(outcome.report) if outcome.feasible and goal.sla else None,
            "meets_sla": meets_sla(goal, outcome.report) if outcome.feasible else None,
            "planner": {k: v for k, v in outcome.planner.items() if k != "decisions"} if outcome.planner else None,
            "timings": outcome.timings}
    return json.dumps(body, indent=2, sort_keys=True, default=str)


def evaluate_command(config_path: str, as_json: bool) -> int:
    """Evaluate the one candidate a pinned config describes; 0 feasible, 1 infeasible/failed, 2 user error."""
    os.environ.setdefault("DYN_LOG", "error")
    from spica_core.evaluate import EvalPool, evaluate_one
    from spica_core.run.inputs import load_inputs

    config = load_inputs(config_path).config
    request = build_request(config, config_path)
    if config.sweep.max_eval_seconds is not None and config.sweep.parallel_evals != 1:
        with EvalPool(1, config.sweep.max_eval_seconds) as pool:
            outcome = pool.evaluate_batch([request])[0]
    else:
        outcome = evaluate_one(request)
    headroom = None
    if outcome.feasible and config.goal.sla is not None:
        from spica_core.evaluate.headroom import find_headroom, outcome_attainment

        headroom = find_headroom(request, outcome_attainment(outcome))
    print(render_json(outcome, config.goal, headroom) if as_json else render_text(outcome, config.goal, headroom))
    return EXIT_OK if outcome.feasible else EXIT_NO_RESULT


__all__ = ["evaluate_command", "unpinned_knobs", "build_request", "render_text", "render_json"]

"""``spica evaluate CONFIG [--json] [--calibration FILE]``: replay one fully pinned candidate and print what it
scores (under the calibration, when one is given, with the replay's own numbers beside it).

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


HEADLINE_ROWS = ("output_throughput_tok_s", "output_throughput_tok_s_per_gpu", "mean_output_token_throughput_per_user",
                 "request_throughput_rps", "mean_ttft_ms", "p99_ttft_ms", "mean_itl_ms", "p99_itl_ms",
                 "mean_e2e_latency_ms", "p99_e2e_latency_ms", "goodput_output_throughput_tok_s",
                 "goodput_request_throughput_rps", "prefix_cache_reused_ratio", "gpu_hours", "cost_per_mtok", "avg_gpus",
                 "completed_requests", "planner_total_ticks")


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
        if outcome.calibration is not None:
            lines.append(f"calibration: {outcome.calibration.text()}")
            for key, label in (("mean_ttft_ms", "TTFT"), ("mean_itl_ms", "ITL")):
                if key in outcome.uncalibrated and key in outcome.metrics:
                    lines.append(f"  {label:<20} {_fmt(outcome.metrics[key]):>14} ms calibrated, "
                                 f"{_fmt(outcome.uncalibrated[key])} ms replayed")
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
            "calibration": outcome.calibration.to_dict() if outcome.calibration else None,
            "uncalibrated_metrics": outcome.uncalibrated or None,
            "timings": outcome.timings}
    return json.dumps(body, indent=2, sort_keys=True, default=str)


def evaluate_command(config_path: str, as_json: bool, calibration: str | None = None) -> int:
    """Evaluate the one candidate a pinned config describes; 0 feasible, 1 infeasible/failed, 2 user error."""
    os.environ.setdefault("DYN_LOG", "error")
    from spica_core.evaluate import EvalPool, evaluate_one, pinned_request
    from spica_core.run.inputs import load_inputs

    inputs = load_inputs(config_path, calibration=calibration)
    config = inputs.config
    request = pinned_request(config, Path(config_path).parent, inputs.calibration)
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


__all__ = ["evaluate_command", "render_text", "render_json"]

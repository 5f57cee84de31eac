"""Human summaries of a validated config (what ``spica validate`` prints)."""
from __future__ import annotations

from spica_core.config.model import SmartSearchConfig
from spica_core.config.policies import filter_for_goal, planner_target, with_policies
from spica_core.config.pruning import branch_knob_choices
from spica_core.config.trace import TraceSummary


def searched_knobs(config: SmartSearchConfig) -> dict[str, int]:
    """Knob → number of choices, over the configured modes after dead-dimension pruning.

    A continuous range counts as -1. Backend viability (perf data, KV feasibility) is not checked
    here; ``spica space`` does that.
    """
    out: dict[str, int] = {}
    for mode in config.search_space.deployment_mode:
        knobs, ranges = branch_knob_choices(config, mode, config.search_space.backend)
        out.update({name: len(choices) for name, choices in knobs.items() if len(choices) > 1})
        out.update({name: -1 for name in ranges})
    return out


def describe(config: SmartSearchConfig, trace: TraceSummary | None = None) -> str:
    s, w, g, sw = config.search_space, config.workload, config.goal, config.sweep
    policies = filter_for_goal(config)
    config = with_policies(config, policies.kept)
    lines = ["config is valid", ""]
    lines.append(f"branches        : {', '.join(s.deployment_mode)} (one Vizier study each); "
                 f"backends {', '.join(s.backend)}")
    lines.append(f"GPU types       : {s.hardware_text()}")
    if s.parallel_configs:
        kind = "pinned" if len(s.parallel_configs) == 1 else f"menu of {len(s.parallel_configs)}"
        lines.append(f"parallel configs: {kind}")
    else:
        lines.append("parallel configs: derived from the model, GPU and budget (see `spica space`)")
    lines.append("searched knobs  :")
    for name, n in searched_knobs(config).items():
        shown = f"{w.kv_load_range[0]}..{w.kv_load_range[1]} (continuous)" if n < 0 else f"{n} choices"  # type: ignore[index]
        lines.append(f"  {name:32s} {shown}")
    if not searched_knobs(config):
        lines.append("  (none: every knob is pinned)")
    pinned = {
        "model_name": s.model_name, "gpu_budget": s.gpu_budget,
        "min_gpu_budget": s.min_gpu_budget, "min_endpoint": s.min_endpoint, "context_length": s.context_length,
        "startup_time": s.startup_time, "aic_nextn": s.aic_nextn, "num_g2_blocks": s.num_g2_blocks,
        "scheduler_recv_interval": s.scheduler_recv_interval if s.scheduler_recv_interval > 1 else None,
    }
    lines.append("pinned context  : " + ", ".join(f"{k}={v}" for k, v in pinned.items() if v is not None))
    if w.is_trace:
        loop = f"closed loop, {w.replay_concurrency} in flight" if w.replay_concurrency else \
            f"open loop, arrival speedup {w.arrival_speedup_ratio}"
        lines.append(f"workload        : mooncake trace {w.trace_path} ({loop})")
        if trace is not None:
            span = (trace.last_ms - trace.first_ms) / 1000
            sessions = f", {trace.sessions:,} sessions" if trace.sessions else ""
            lines.append(f"trace           : {trace.requests:,} requests{sessions} over {span:,.0f} s, longest "
                         f"input {trace.max_input_length:,} / output {trace.max_output_length:,} tokens")
            if trace.over_context_requests:
                what = {"drop": "left out of the replay", "fail": "kept as requests the server rejects at once",
                        "refuse": "refused"}[trace.over_context]
                lines.append(f"over context    : {trace.over_context_text()} exceed the context; "
                             f"{what} (workload.over_context: {trace.over_context})")
    else:
        if w.request_rate is not None:
            load = f"request rate {w.request_rate}/s (open loop)"
        elif w.concurrency is not None:
            load = f"concurrency {w.concurrency} (closed loop)"
        else:
            load = f"kv_load_ratio {w.kv_load_ratio} (closed loop, per-candidate concurrency)"
        lines.append(f"workload        : synthetic isl {w.isl} / osl {w.osl}, {load}, "
                     f"num_request_ratio {w.num_request_ratio}")
    objectives = ", ".join(o.value for o in g.objectives)
    sla = ", ".join(f"{k}={v}" for k, v in (g.sla.model_dump(exclude_none=True).items() if g.sla else []))
    lines.append(f"goal            : {g.target.value}" + (f" [{objectives}]" if g.is_pareto else "")
                 + (f", SLA {sla} " + (f"held by at least {g.required_attainment * 100:.3g} % of requests"
                                          if g.required_attainment > 0 else "in goodput only (sla_attainment 0)")
                    if sla else "")
                 + f" (planner target '{planner_target(g)}')")
    if g.gpu_hour_usd:
        lines.append("GPU prices      : " + ", ".join(f"{sku} {usd:g} USD/GPU-hour" for sku, usd in
                                                       sorted(g.gpu_hour_usd.items())))
    if g.calibration:
        lines.append(f"calibration     : {g.calibration}")
    if policies.dropped:
        lines.append(f"dropped policies: {policies.dropped} — {policies.reason}")
    lines.append(f"sweep           : policy {sw.policy.value}, {sw.max_rounds} rounds × {sw.per_round} per round, "
                 f"{sw.workers} parallel, algorithm {sw.algorithm.value}, seed {sw.seed}")
    if sw.parallel_evals is not None and sw.parallel_evals > sw.workers:
        lines.append(f"note            : parallel_evals {sw.parallel_evals} runs as {sw.workers} worker process(es) "
                     "here (at most one per core, and no more than a round can keep busy)")
    lines += [f"warning         : {message}" for message in (trace.warnings if trace else ())]
    return "\n".join(lines)


__all__ = ["describe", "searched_knobs"]

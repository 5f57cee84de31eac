"""One call into Dynamo's offline replay and its report as a plain dict.

Everything the call needs is assembled beforehand (engine args, router, traffic, SLA, scaling
policy); this module only chooses the entry point, makes the call and flattens the result. The
runtime is imported lazily with DYN_LOG=error so its Rust logging stays quiet.
"""
from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field
from typing import Any

from spica_core.evaluate.engine_args import RoleArgs
from spica_core.evaluate.workload import ReplayWorkload

os.environ.setdefault("DYN_LOG", "error")


@dataclass
class ReplaySpec:
    """A fully materialised replay: roles, router, traffic, SLA and an optional scaling policy."""

    roles: dict[str, RoleArgs]
    workload: ReplayWorkload
    router: dict[str, Any] = field(default_factory=lambda: {"router_mode": "round_robin"})
    sla: dict[str, float] = field(default_factory=dict)
    scaling_policy: Any = None
    capture_per_request: bool = False

    def engine_kwargs(self) -> dict[str, Any]:
        if "agg" in self.roles:
            agg = self.roles["agg"]
            return {"extra_engine_args": agg.payload, "num_workers": agg.replicas}
        p, d = self.roles["prefill"], self.roles["decode"]
        return {"prefill_engine_args": p.payload, "decode_engine_args": d.payload,
                "num_prefill_workers": p.replicas, "num_decode_workers": d.replicas}

    def call_kwargs(self) -> dict[str, Any]:
        kw: dict[str, Any] = {**self.engine_kwargs(), **self.router, **self.sla, **self.workload.kwargs,
                              "capture_per_request": self.capture_per_request, "capture_planner_details": False}
        if self.scaling_policy is not None:
            kw["scaling_policy"] = self.scaling_policy
        return kw


def run_replay(spec: ReplaySpec) -> dict[str, Any]:
    """Run the replay; returns {'summary', 'per_request'?, 'lifecycle_operations', 'replay_seconds'}.

    ``summary`` is the runtime's flat report plus ``planner_total_ticks`` when a policy ran.
    """
    import dynamo._core as dc

    kwargs = spec.call_kwargs()
    start = time.perf_counter()
    if spec.workload.kind == "trace":
        result = dc.run_mocker_trace_replay([spec.workload.trace_path], **kwargs)
    else:
        kw = dict(kwargs)
        isl, osl, count = kw.pop("input_tokens"), kw.pop("output_tokens"), kw.pop("request_count")
        result = dc.run_mocker_synthetic_trace_replay(isl, osl, count, **kw)
    elapsed = time.perf_counter() - start
    summary = dict(result.summary)
    ticks = getattr(spec.scaling_policy, "ticks", None)
    if ticks is not None:
        summary["planner_total_ticks"] = int(ticks)
    out: dict[str, Any] = {"summary": summary, "lifecycle_operations": list(result.lifecycle_operations),
                           "replay_seconds": elapsed}
    if spec.capture_per_request:
        out["per_request"] = list(result.per_request)
        summary.update(exact_moments(out["per_request"], summary))
    return out


_SAMPLES = {"ttft_ms": "num_ttft_samples", "e2e_latency_ms": "num_e2e_latency_samples",
            "tpot_ms": "num_tpot_samples", "ttst_ms": None}


def exact_moments(per_request: list[dict[str, Any]], summary: dict[str, Any]) -> dict[str, float]:
    """Mean and (population) standard deviation of the per-request latencies over completed requests, from
    exactly rounded sums. The runtime sums in an order that varies between processes when the requests belong
    to sessions (a staggered closed loop), which moves its means in the last bits; these do not move, so one
    replay reports the same numbers in every worker. A family whose sample count differs from the runtime's is
    left as the runtime reported it."""
    done = [r for r in per_request if r.get("terminal_status", "completed") == "completed"]
    values = {"ttft_ms": [r.get("ttft_ms") for r in done], "e2e_latency_ms": [r.get("e2e_latency_ms") for r in done],
              "ttst_ms": [r.get("ttst_ms") for r in done],
              "tpot_ms": [(r["e2e_latency_ms"] - r["ttft_ms"]) / (r["output_length"] - 1) for r in done
                          if (r.get("output_length") or 0) > 1 and r.get("e2e_latency_ms") is not None
                          and r.get("ttft_ms") is not None]}
    out: dict[str, float] = {}
    for name, raw in values.items():
        xs = [float(x) for x in raw if isinstance(x, (int, float))]
        count = _SAMPLES[name]
        if not xs or (count is not None and summary.get(count) != len(xs)) or f"mean_{name}" not in summary:
            continue
        mean = math.fsum(xs) / len(xs)
        out[f"mean_{name}"] = mean
        if f"std_{name}" in summary:
            out[f"std_{name}"] = math.sqrt(math.fsum((x - mean) ** 2 for x in xs) / len(xs))
    return out


__all__ = ["ReplaySpec", "run_replay", "exact_moments"]

"""The metrics a person reads, each declared once: its label, unit, direction and fallback.

The report, the CLI, the Prefect UI and scoring name metrics by their replay-report keys; this registry
says how each is shown and which way is better, so a label or a rule (an ITL the replay did not report
falls back to TPOT, its per-token equivalent) lives in one place. ``derived_metrics`` adds what follows from the
replay's numbers: time-averaged GPUs and the per-GPU rates.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from spica_core.evaluate.scoring import avg_gpu, minimised


@dataclass(frozen=True)
class Metric:
    """One metric: how it is labelled, its unit, whether higher is better, and what stands in when it is absent."""

    key: str
    label: str
    unit: str = ""
    higher_is_better: bool | None = None   # None: neither (a count, a duration)
    fallback: str | None = None            # the key read when this one is absent


_ALL = (
    Metric("output_throughput_tok_s", "throughput", "tok/s", True),
    Metric("output_throughput_tok_s_per_gpu", "throughput per GPU", "tok/s/GPU", True),
    Metric("mean_output_token_throughput_per_user", "throughput per user", "tok/s/user", True),
    Metric("request_throughput_rps", "requests", "req/s", True),
    Metric("mean_ttft_ms", "TTFT mean", "ms", False),
    Metric("p99_ttft_ms", "TTFT p99", "ms", False),
    Metric("mean_itl_ms", "ITL mean", "ms", False, fallback="mean_tpot_ms"),
    Metric("p99_itl_ms", "ITL p99", "ms", False),
    Metric("mean_tpot_ms", "TPOT mean", "ms", False, fallback="mean_itl_ms"),
    Metric("mean_e2e_latency_ms", "E2E mean", "ms", False),
    Metric("p99_e2e_latency_ms", "E2E p99", "ms", False),
    Metric("goodput_output_throughput_tok_s", "goodput", "tok/s", True),
    Metric("goodput_output_throughput_tok_s_per_gpu", "goodput per GPU", "tok/s/GPU", True),
    Metric("goodput_request_throughput_rps", "goodput requests", "req/s", True),
    Metric("prefix_cache_reused_ratio", "prefix hit rate", "", True),
    Metric("used_gpus", "GPUs", "", False),
    Metric("avg_gpus", "avg GPUs", "", False),
    Metric("gpu_hours", "GPU-hours", "h", False),
    Metric("cost_per_mtok", "cost", "USD/Mtok", False),
    Metric("energy_j_per_token", "energy per token", "J/token", False),
    Metric("avg_power_w_per_gpu", "power per GPU", "W", False),
    Metric("completed_requests", "completed", "requests"),
    Metric("planner_total_ticks", "planner ticks"),
)
METRICS: Mapping[str, Metric] = {m.key: m for m in _ALL}

# goal targets: how the value each one ranks by is labelled
OBJECTIVES: Mapping[str, Metric] = {m.key: m for m in (
    Metric("throughput", "throughput", "tok/s", True),
    Metric("throughput_per_gpu", "throughput per GPU", "tok/s/GPU", True),
    Metric("throughput_per_user", "throughput per user", "tok/s/user", True),
    Metric("e2e_latency", "mean E2E latency", "ms", False),
    Metric("goodput", "goodput", "tok/s", True),
    Metric("goodput_per_gpu", "goodput per GPU", "tok/s/GPU", True),
    Metric("min_gpus", "GPUs (time-averaged)", "GPUs", False),
    Metric("cost_per_mtok", "cost per million output tokens within the SLA", "USD/Mtok", False),
    Metric("energy_per_token", "energy per output token", "J/token", False),
)}


def objective_metric(name: str) -> Metric:
    """A goal target's label and unit (an unknown name is shown as itself)."""
    return OBJECTIVES.get(name) or Metric(name, name, "", not minimised(name))


def metric_or_fallback(metrics: Mapping[str, float], key: str) -> float | None:
    """The metric, or its fallback when the replay did not report it (e.g. ITL → TPOT); None when neither is."""
    found = metrics.get(key)
    if found is None and key in METRICS and METRICS[key].fallback:
        found = metrics.get(METRICS[key].fallback)  # type: ignore[arg-type]
    return None if found is None else float(found)


def derived_metrics(metrics: Mapping[str, float], used_gpus: int | None = None) -> dict[str, float]:
    """The metrics plus what follows from them: time-averaged GPUs and the per-GPU rates."""
    out = {k: float(v) for k, v in metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    g = out.get("avg_gpus") or avg_gpu(out)
    if g > 0:
        out.setdefault("avg_gpus", g)
        for key in ("output_throughput_tok_s", "goodput_output_throughput_tok_s"):
            if key in out:
                out.setdefault(f"{key}_per_gpu", out[key] / g)
    if used_gpus is not None:
        out["used_gpus"] = float(used_gpus)
    return out


__all__ = ["Metric", "METRICS", "OBJECTIVES", "derived_metrics", "metric_or_fallback", "objective_metric"]

"""The evaluate stage: a candidate's engine arguments, traffic and replay, its score, and where
evaluations run (worker processes, an existing Dask or Ray cluster, or this process). The typed
candidate itself is ``spica_core.deployment``.

The names below are imported on first use (PEP 562): a spawned worker that imports the replay path
does not also load the pool, the cluster clients and their dependencies.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from spica_core.config.lazy import lazy_names

_FROM: dict[str, str] = {
    **dict.fromkeys(("Band", "BAND_METRICS", "BandTable", "bands_from_dict", "bands_to_dict", "load_bands", "Ratio"),
                    "bands"),
    **dict.fromkeys(("Applied", "Calibration", "GroupCalibration", "MeasuredRow", "MetricCalibration", "OWN_ROWS",
                     "load_calibration", "write_calibration"), "calibration"),
    **dict.fromkeys(("ClusterEvaluator",), "cluster"),
    **dict.fromkeys(("process_tree", "sigint_blocked", "start_child", "stop_processes"), "children"),
    **dict.fromkeys(("EvalRequest", "calibrated", "evaluate_one", "Outcome", "Status"), "evaluation"),
    **dict.fromkeys(("make_evaluator",), "placement"),
    **dict.fromkeys(("find_headroom", "headroom_job", "Headroom"), "headroom"),
    **dict.fromkeys(("Job", "run_job", "run_jobs"), "jobs"),
    **dict.fromkeys(("Metric", "METRICS", "OBJECTIVES", "derived_metrics", "metric_or_fallback", "objective_metric"),
                    "metrics"),
    **dict.fromkeys(("pinned_request", "unpinned_knobs"), "pinned"),
    **dict.fromkeys(("EvalPool", "SequentialEvaluator"), "pool"),
    **dict.fromkeys(("RequestLatencies",), "requests"),
    **dict.fromkeys(("calibrated_report",), "rescore"),
    **dict.fromkeys(("ReplaySpread", "replay_is_exact", "replay_spread", "spread_job"), "repeats"),
    **dict.fromkeys(("load_serving",), "serving"),
    **dict.fromkeys((
        "attainment", "avg_gpu", "candidate_metrics", "headline", "is_feasible", "meets_requirement", "meets_sla",
        "metric_value", "minimised", "objective_vector", "raw_value", "reaches", "score_report", "search_value",
        "signed",
        "sla_kwargs",
    ), "scoring"),
    **dict.fromkeys(("Evaluator", "POLL_S"), "evaluator"),
    **dict.fromkeys(("spread_trace",), "replay_traces"),
    **dict.fromkeys(("effective_in_flight_cap", "request_count", "synthetic_arrival_interval_ms"), "workload"),
}


__getattr__, __dir__ = lazy_names(__name__, _FROM)


if TYPE_CHECKING:  # what type checkers and editors see
    from spica_core.evaluate.bands import Band, BAND_METRICS, BandTable, bands_from_dict, bands_to_dict, load_bands, Ratio
    from spica_core.evaluate.calibration import (
        Applied, Calibration, GroupCalibration, MeasuredRow, MetricCalibration, OWN_ROWS, load_calibration,
        write_calibration,
    )
    from spica_core.evaluate.children import process_tree, sigint_blocked, start_child, stop_processes
    from spica_core.evaluate.cluster import ClusterEvaluator
    from spica_core.evaluate.evaluation import EvalRequest, calibrated, evaluate_one, Outcome, Status
    from spica_core.evaluate.placement import make_evaluator
    from spica_core.evaluate.headroom import find_headroom, headroom_job, Headroom
    from spica_core.evaluate.jobs import Job, run_job, run_jobs
    from spica_core.evaluate.metrics import (
        Metric, METRICS, OBJECTIVES, derived_metrics, metric_or_fallback, objective_metric,
    )
    from spica_core.evaluate.pinned import pinned_request, unpinned_knobs
    from spica_core.evaluate.pool import EvalPool, SequentialEvaluator
    from spica_core.evaluate.requests import RequestLatencies
    from spica_core.evaluate.rescore import calibrated_report
    from spica_core.evaluate.repeats import ReplaySpread, replay_is_exact, replay_spread, spread_job
    from spica_core.evaluate.serving import load_serving
    from spica_core.evaluate.scoring import (
        attainment, avg_gpu, candidate_metrics, headline, is_feasible, meets_requirement, meets_sla, metric_value,
        minimised, objective_vector, raw_value, reaches, score_report, search_value, signed, sla_kwargs
    )
    from spica_core.evaluate.evaluator import Evaluator, POLL_S
    from spica_core.evaluate.replay_traces import spread_trace
    from spica_core.evaluate.workload import effective_in_flight_cap, request_count, synthetic_arrival_interval_ms

__all__ = [
    "attainment", "avg_gpu", "Band", "bands_from_dict", "bands_to_dict", "candidate_metrics",
    "ClusterEvaluator", "process_tree", "sigint_blocked", "start_child", "stop_processes", "EvalPool", "EvalRequest", "evaluate_one", "Evaluator",
    "find_headroom", "headline", "headroom_job", "Headroom", "is_feasible", "Job", "load_bands", "load_serving",
    "make_evaluator", "Metric", "METRICS", "OBJECTIVES", "derived_metrics", "metric_or_fallback", "objective_metric",
    "meets_requirement", "meets_sla", "metric_value", "minimised", "objective_vector", "Outcome", "POLL_S",
    "raw_value", "reaches", "ReplaySpread", "replay_is_exact", "replay_spread", "run_job", "run_jobs", "score_report",
    "search_value", "SequentialEvaluator", "signed", "sla_kwargs", "spread_job", "Status", "spread_trace",
    "effective_in_flight_cap", "request_count", "synthetic_arrival_interval_ms",
    "Applied", "BAND_METRICS", "BandTable", "Calibration", "GroupCalibration", "MeasuredRow", "MetricCalibration",
    "OWN_ROWS", "Ratio", "RequestLatencies", "calibrated", "calibrated_report", "load_calibration",
    "write_calibration", "pinned_request", "unpinned_knobs",
]

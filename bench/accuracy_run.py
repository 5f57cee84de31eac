"""One accuracy row through the product's own path: Spica config → ``spica evaluate``'s request → evaluate_one.

Runs in a worker process (spawned by bench_accuracy.py) or in-process. Returns a plain dict (picklable).
"""
from __future__ import annotations

import os
import time
import traceback
from pathlib import Path
from typing import Any

os.environ.setdefault("DYN_LOG", "error")

from bench.accuracy_rows import REPO  # noqa: E402

CONFIG_PATH = REPO / "accuracy-row.yaml"   # never written: trace paths in configs resolve against the repo


def build(config_dict: dict[str, Any]) -> tuple[Any, Any]:
    """(SmartSearchConfig, EvalRequest) exactly as ``spica evaluate`` builds them (load_inputs + pinned_request)."""
    from spica_core.evaluate import pinned_request
    from spica_core.config.model import SmartSearchConfig
    from spica_core.run.inputs import load_inputs

    cwd = os.getcwd()
    os.chdir(REPO)  # an inline config's relative paths resolve against the working directory
    try:
        config = load_inputs(SmartSearchConfig.from_dict(config_dict)).config
    finally:
        os.chdir(cwd)
    return config, pinned_request(config, CONFIG_PATH.parent)


def evaluate_row(task: dict[str, Any]) -> dict[str, Any]:
    """task: {id, config, isl, osl, concurrency, aic: bool, per_request: bool} → predicted/aic/status."""
    from spica_core.evaluate import evaluate_one

    t0 = time.perf_counter()
    out: dict[str, Any] = {"id": task["id"]}
    try:
        config, request = build(task["config"])
        if task.get("per_request"):
            from dataclasses import replace
            request = replace(request, capture_per_request=True)
        outcome = evaluate_one(request)
        out["status"] = outcome.status.value
        out["reason"] = outcome.reason
        if outcome.feasible:
            rep = outcome.report
            out["predicted"] = {"ttft_ms": float(rep["mean_ttft_ms"]), "tpot_ms": float(rep["mean_itl_ms"])}
            out["report"] = {k: rep.get(k) for k in ("mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms", "mean_itl_ms",
                                                     "mean_tpot_ms", "median_tpot_ms", "completed_requests",
                                                     "num_requests", "duration_ms", "output_throughput_tok_s")}
            if task.get("per_request") and outcome.per_request is not None:
                out["per_request"] = [{k: p.get(k) for k in ("arrival_time_ms", "dispatched_at_ms", "first_admit_ms",
                                                             "first_token_ms", "last_token_ms", "ttft_ms", "itl_ms",
                                                             "input_length", "output_length")}
                                      for p in outcome.per_request]
        out["timings"] = dict(outcome.timings)
        if task.get("aic"):
            out["aic"], out["aic_reason"] = aic_point(request.candidate, task)
    except Exception as exc:  # noqa: BLE001 - one bad row must not stop the run
        out["status"] = "error"
        out["reason"] = f"{type(exc).__name__}: {exc}"
        out["traceback"] = traceback.format_exc(limit=4)
    out["wall_s"] = time.perf_counter() - t0
    return out


def aic_point(candidate: Any, task: dict[str, Any]) -> tuple[dict[str, float] | None, str]:
    from spica_core.emit.aic_estimate import aic_estimate

    if candidate.mode != "agg":
        return None, "AIC's static estimate is agg only"
    try:
        est = aic_estimate(candidate, isl=int(task["isl"]), osl=int(task["osl"]), concurrency=int(task["concurrency"]))
    except Exception as exc:  # noqa: BLE001
        return None, f"aic_estimate raised {type(exc).__name__}: {exc}"
    if est is None:
        return None, "aic_estimate returned None (AIC has no analytic answer for this candidate)"
    return {"ttft_ms": est.ttft_ms, "tpot_ms": est.tpot_ms}, ""


def warm(_: Any = None) -> int:
    """Worker initialiser: import the heavy modules once."""
    import spica_core.evaluate  # noqa: F401
    import spica_cli.evaluate  # noqa: F401
    return os.getpid()


__all__ = ["evaluate_row", "build", "aic_point", "warm", "CONFIG_PATH"]

"""Evaluation outcomes, worker-process isolation (deadline, crash) and ``spica evaluate``."""
from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from spica_cli.evaluate import evaluate_command
from spica_cli.main import main
from spica_core.space.precision import precision_of
from spica_core.config.model import SmartSearchConfig
from spica_core.deployment import Candidate
from spica_core.evaluate import EvalPool, EvalRequest, SequentialEvaluator, Status, evaluate_one, make_evaluator
from examples.make_traces import write_poisson_trace
from spica_core.space.kv import kv_tokens_per_rank
from spica_core.space.parallel import ParallelConfig, Shape

MODEL = "Qwen/Qwen3-32B"
SPACE = {"model_name": MODEL, "hardware_sku": "h200_sxm", "deployment_mode": ["agg"], "router_mode": ["round_robin"],
         "planner_scaling_policy": ["disabled"], "agg_max_num_batched_tokens": [8192], "agg_max_num_seqs": [256],
         "gpu_budget": 8}


def request(workload: dict[str, Any], pc: dict[str, Any] | None = None, goal: dict[str, Any] | None = None,
            **space: Any) -> EvalRequest:
    cfg = SmartSearchConfig.from_dict({"search_space": {**SPACE, **space}, "workload": workload,
                                       "goal": goal or {"target": "throughput_per_gpu"}})
    candidate = Candidate.unroll(cfg.search_space, {"deployment_mode": "agg"},
                                 ParallelConfig.from_dict("agg", pc or {"tp": 2}))
    return EvalRequest.from_config(cfg, candidate, trace_file=cfg.workload.trace_path)


def modelled(report: dict[str, Any]) -> dict[str, Any]:
    """The report without the simulator's own wall-clock measurements (replay-engine §6.2)."""
    return {k: v for k, v in report.items()
            if k not in ("wall_time_ms", "processed_tokens_per_s", "processed_output_tokens_per_s")}


FAST = {"isl": 1000, "osl": 50, "concurrency": 4, "num_request_ratio": 5}
SLOW = {"isl": 1000, "osl": 100, "concurrency": 64, "num_request_ratio": 1500}  # ~96k requests


def test_feasible_outcome_carries_sample_metrics_score_and_timings() -> None:
    out = evaluate_one(request(FAST))
    assert out.status is Status.feasible and out.reason == ""
    assert out.candidate.backend_version and out.candidate.concurrency == 4
    assert out.report["num_requests"] == 20 and out.metrics["gpu_hours"] > 0
    assert out.score == pytest.approx(out.report["output_throughput_tok_s"] / 2.0, rel=1e-6)
    assert out.objectives is None and out.candidate.used_gpus == 2
    assert {"prepare_s", "replay_s", "total_s"} <= set(out.timings)


def test_over_budget_kv_infeasible_and_rejected_args_are_outcomes() -> None:
    over = evaluate_one(request(FAST, {"tp": 4, "replicas": 3}))
    assert over.status == "infeasible" and "over budget" in over.reason and "12" in over.reason
    no_kv = evaluate_one(request(FAST, {"tp": 1}, agg_gpu_memory_utilization=0.3))
    assert no_kv.status == "infeasible" and "no KV" in no_kv.reason
    rejected = evaluate_one(request(FAST, backend=["sglang"], num_g2_blocks=100, kv_bytes_per_token=262144))
    assert rejected.status == "failed"
    assert "rejected by the runtime" in rejected.reason and "backend=vllm" in rejected.reason
    assert rejected.candidate.backend == "sglang"


def test_kv_load_ratio_one_replays_the_capacity_formula_concurrency() -> None:
    out = evaluate_one(request({"isl": 2000, "osl": 200, "kv_load_ratio": 1.0, "num_request_ratio": 1.5},
                               {"tp": 2, "replicas": 2}))
    assert out.status == "feasible", out.reason
    tokens = kv_tokens_per_rank(MODEL, "h200_sxm", "vllm", Shape(2), precision=precision_of(MODEL, None, "bf16"), max_num_tokens=8192, max_batch_size=256,
                                memory_fraction=0.9)
    capacity = (tokens // 64) * 64 * 2
    sample = out.candidate.to_sample()
    assert sample["agg_kv_capacity_tokens"] == capacity == sample["kv_load_capacity_tokens"]
    assert sample["concurrency"] == capacity // 2100 == sample["kv_load_concurrency_capacity"]
    assert sample["kv_load_ratio"] == 1.0
    assert out.report["num_requests"] == round(1.5 * sample["concurrency"])


@pytest.mark.slow
def test_pool_deadline_makes_a_slow_candidate_infeasible_and_carries_on() -> None:
    with EvalPool(2, max_eval_seconds=120) as pool:
        warm = pool.evaluate_batch([request(FAST), request(FAST)])  # both workers load AIC once
        assert [o.status for o in warm] == ["feasible", "feasible"]
        pool.max_eval_seconds = 2.0
        t0 = time.perf_counter()
        slow, fast = pool.evaluate_batch([request(SLOW), request(FAST)])
        assert time.perf_counter() - t0 < 10
        assert slow.status == "infeasible" and slow.reason == "exceed runtime: replay > 2s"
        assert fast.status == "feasible"
        assert pool.restarts == 1
        pool.max_eval_seconds = 120
        again = pool.evaluate_batch([request(FAST)] * 3)  # three from one queue, one worker replaced
        assert [o.status for o in again] == ["feasible"] * 3
        assert modelled(again[0].report) == modelled(fast.report)
    # isolation changes nothing: a worker process replays exactly what this process does
    assert modelled(evaluate_one(request(FAST)).report) == modelled(fast.report)


def kill_once_dispatched(pool: EvalPool, sig: int = signal.SIGKILL) -> list[int]:
    """Make the pool's one warm worker die of ``sig`` the moment its request is handed over: the kill follows the
    pool's own send of the request, so the candidate is in flight (never still queued, never already finished,
    and never racing a worker that is still starting). Returns the pids killed."""
    (worker,) = pool._pool
    assert worker.ready, "start the pool first: the worker must be warm"
    conn, killed = worker.conn, []
    send = conn.send

    def send_then_kill(msg: Any) -> None:
        send(msg)
        if msg is not None and not killed:  # a request, not the polite stop at close
            assert worker.proc.pid is not None
            os.kill(worker.proc.pid, sig)
            killed.append(worker.proc.pid)

    conn.send = send_then_kill  # type: ignore[method-assign]
    return killed


@pytest.mark.slow
def test_a_result_that_arrives_after_its_deadline_is_late(monkeypatch: pytest.MonkeyPatch) -> None:
    """The parent can be descheduled on a busy machine; the deadline must not depend on when it polls."""
    import spica_core.evaluate.pool as pool_module

    with EvalPool(1, max_eval_seconds=120) as pool:
        (warm,) = pool.evaluate_batch([request(FAST)])  # the worker loads AIC once
        assert warm.status == "feasible"
        real_wait = pool_module.wait

        def slow_parent(conns: Any, timeout: float | None = None) -> Any:
            time.sleep(2.0)
            return real_wait(conns, 30.0)  # the result is in: FAST replays in well under a second

        monkeypatch.setattr(pool_module, "wait", slow_parent)
        pool.max_eval_seconds = 1.0
        (late,) = pool.evaluate_batch([request(FAST)])
        assert (late.status, late.reason) == ("infeasible", "exceed runtime: replay > 1s")
        assert late.timings["wall_s"] >= 1.0 and pool.restarts == 0  # its worker finished: nothing to kill
        monkeypatch.undo()
        pool.max_eval_seconds = 120
        (ok,) = pool.evaluate_batch([request(FAST)])
        assert ok.status == "feasible"


@pytest.mark.slow
def test_pool_worker_crash_becomes_a_failed_outcome() -> None:
    with EvalPool(1, max_eval_seconds=120) as pool:
        pool.start()
        killed = kill_once_dispatched(pool)
        t0 = time.perf_counter()
        (crashed,) = pool.evaluate_batch([request(SLOW)])
        assert killed and time.perf_counter() - t0 < 30  # seen at once, not at the 120 s deadline
        assert crashed.status == "failed" and "worker crashed" in crashed.reason and "-9" in crashed.reason
        assert pool.restarts == 1 and pool.worker_pids() != killed
        (ok,) = pool.evaluate_batch([request(FAST)])
        assert ok.status == "feasible"


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="per-thread niceness is read from /proc")
def test_ready_workers_yield_the_cpu_to_the_sweep_and_its_optimizer() -> None:
    from spica_core.evaluate import pool as pool_module

    mine = os.getpriority(os.PRIO_PROCESS, 0)
    with EvalPool(2, max_eval_seconds=120) as pool:
        pool.start()
        (ok,) = pool.evaluate_batch([request(FAST)])  # a replay ran: the engines' threads exist
        assert ok.status == "feasible"
        for pid in pool.worker_pids():
            threads = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
            assert len(threads) > 1
            assert {os.getpriority(os.PRIO_PROCESS, t) for t in threads} == \
                {min(19, mine + pool_module.WORKER_NICENESS)}
    assert os.getpriority(os.PRIO_PROCESS, 0) == mine  # the sweep's own process keeps its priority


def test_sequential_path_keeps_request_order() -> None:
    ev = make_evaluator(1, 600)
    assert isinstance(ev, SequentialEvaluator)
    a, b = ev.evaluate_batch([request(FAST), request(FAST, {"tp": 4})])
    assert a.status is b.status is Status.feasible
    assert (a.candidate.used_gpus, b.candidate.used_gpus) == (2, 4)
    assert a.score == pytest.approx(a.report["output_throughput_tok_s"] / 2.0, rel=1e-6)
    assert b.score == pytest.approx(b.report["output_throughput_tok_s"] / 4.0, rel=1e-6)
    assert a.report["mean_itl_ms"] != b.report["mean_itl_ms"]  # TP4 steps faster: another replay, not a copy
    assert isinstance(make_evaluator(4, 10), EvalPool)


# ---------------------------------------------------------------- spica evaluate


def write_config(tmp_path: Path, **space: Any) -> Path:
    trace = write_poisson_trace(tmp_path / "t.jsonl", num_requests=40, rate_rps=2, isl=2000, osl=100,
                                prefix_groups=4, prefix_blocks=2)
    body = {"search_space": {**SPACE, "parallel_configs": [{"tp": 2, "replicas": 2}], "router_mode": ["kv_router"],
                             "overlap_score_credit": [1.0], "prefill_load_scale": [2.0], "router_temperature": [0.0],
                             **space},
            "workload": {"trace_path": trace.name},
            "goal": {"target": "goodput", "sla": {"ttft_ms": 1000, "itl_ms": 30}},
            "sweep": {"parallel_evals": 1}}
    path = tmp_path / "pinned.yaml"
    path.write_text(yaml.safe_dump(body))
    return path


def test_evaluate_command_text(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert evaluate_command(str(write_config(tmp_path)), False) == 0
    out = capsys.readouterr().out
    for needle in ("candidate (flat sample):", "prefill_load_scale", "status: feasible", "TTFT p99", "ITL mean",
                   "goodput", "prefix hit rate", "GPU-hours", "throughput per GPU", "score:"):
        assert needle in out


def test_evaluate_command_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert evaluate_command(str(write_config(tmp_path)), True) == 0
    body = json.loads(capsys.readouterr().out)
    assert body["status"] == "feasible" and body["sample"]["router_mode"] == "kv_router"
    assert body["sample"]["used_gpus"] == 4 and body["metrics"]["completed_requests"] == 40
    assert body["score"] == pytest.approx(body["metrics"]["goodput_output_throughput_tok_s"])
    assert {"mean_ttft_ms", "p99_ttft_ms", "mean_itl_ms", "p99_itl_ms", "mean_e2e_latency_ms", "p99_e2e_latency_ms",
            "prefix_cache_reused_ratio", "gpu_hours"} <= set(body["metrics"])


def test_evaluate_command_names_unpinned_knobs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_config(tmp_path, prefill_load_scale=[1.0, 4.0], agg_max_num_seqs=[256, 512])
    assert main(["evaluate", str(path)]) == 2
    err = capsys.readouterr().err
    assert "prefill_load_scale" in err and "agg_max_num_seqs" in err and "Traceback" not in err
    assert main(["evaluate", str(tmp_path / "missing.yaml")]) == 2


def test_evaluate_command_infeasible_returns_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_config(tmp_path, parallel_configs=[{"tp": 4, "replicas": 4}])
    assert evaluate_command(str(path), False) == 1
    assert "over budget" in capsys.readouterr().out


def test_unpinned_knobs_ignore_dimensions_that_do_not_apply(tmp_path: Path) -> None:
    """Under round robin the KV-router weights are dead dimensions (§2.11): several values are fine."""
    from spica_core.evaluate import unpinned_knobs

    path = write_config(tmp_path, router_mode=["round_robin"], overlap_score_credit=[0.0, 1.0],
                        planner_fpm_sampling=["small", "large"])
    assert unpinned_knobs(SmartSearchConfig.from_yaml(path)) == []
    kv = write_config(tmp_path, overlap_score_credit=[0.0, 1.0])
    assert unpinned_knobs(SmartSearchConfig.from_yaml(kv)) == ["overlap_score_credit (2 values: [0.0, 1.0])"]

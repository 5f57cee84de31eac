"""A closed loop of identical requests started together runs in lock-step waves in the replay. Two ways out:
spread lengths (workload.length_spread), or a first wave spread over a start window (workload.start_window_ms),
as timing noise spreads such requests on real engines. The window is fitted on measured rows
(bench/accuracy_cv.fit_window) and judged out of fold like the serving constants."""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from spica_cli.main import main as spica
from spica_core.config.model import SmartSearchConfig
from spica_core.evaluate import EvalRequest, evaluate_one
from spica_core.deployment import Candidate
from spica_core.evaluate.replay_traces import staggered_trace
from spica_core.evaluate.serving import SERVING_FILE, load_serving
from spica_core.evaluate.workload import replay_workload, start_window_ms
from spica_core.space.parallel import ParallelConfig

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.accuracy_cv import START_WINDOWS_MS, fit_window, out_of_fold, window_key  # noqa: E402

SPACE = {"model_name": "Qwen/Qwen3-32B", "hardware_sku": "h100_sxm", "gpu_budget": 2, "deployment_mode": ["agg"],
         "backend": ["vllm"], "router_mode": ["round_robin"], "planner_scaling_policy": ["disabled"],
         "agg_max_num_seqs": [256], "agg_max_num_batched_tokens": [8192], "agg_enable_prefix_caching": False}


def _config(**workload: Any) -> SmartSearchConfig:
    return SmartSearchConfig.from_dict({"search_space": SPACE, "workload": {"isl": 1024, "osl": 128,
                                                                             "num_request_ratio": 10, **workload}})


def test_an_open_loop_keeps_its_rate_and_a_closed_loop_its_cap(tmp_path: Path) -> None:
    rate = replay_workload(_config(request_rate=4.0, length_spread=0.2).workload, directory=tmp_path)
    rows = [json.loads(x) for x in Path(rate.trace_path).read_text().splitlines()]
    assert rate.kind == "trace" and "replay_concurrency" not in rate.kwargs and len(rows) == 40
    assert [r["timestamp"] for r in rows[:3]] == [0.0, 250.0, 500.0]
    closed = replay_workload(_config(concurrency=8, length_spread=0.2).workload, directory=tmp_path)
    assert closed.kwargs["replay_concurrency"] == 8
    assert replay_workload(_config(concurrency=8, start_window_ms=0).workload).kind == "synthetic"   # 0: as before


def test_spread_lengths_break_the_lock_step_waves_of_a_closed_loop() -> None:
    def ttft(spread: float) -> float:
        config = _config(concurrency=8, length_spread=spread, **({} if spread else {"start_window_ms": 0}))
        cand = Candidate.unroll(config.search_space, {"deployment_mode": "agg"},
                                ParallelConfig.from_dict("agg", {"tp": 2}))
        out = evaluate_one(EvalRequest.from_config(config, cand))
        assert out.feasible and out.report["num_requests"] == 80
        return out.metrics["mean_ttft_ms"]

    assert ttft(0.2) < 0.5 * ttft(0.0)    # every identical request waits for its whole wave's prefill


SPREAD = {"concurrency": 8, "length_spread": 0.2}
WINDOW = {"start_window_ms": 500}


@pytest.mark.parametrize("field,extra", [
    ("length_spread", {**SPREAD, "shared_prefix_ratio": 0.5, "num_prefix_groups": 2}),
    ("length_spread", {**SPREAD, "turns_per_session": 2}), ("length_spread", {**SPREAD, "length_spread": 1.0}),
    ("start_window_ms", {**WINDOW, "request_rate": 2.0}), ("start_window_ms", {**WINDOW, **SPREAD}),
    ("start_window_ms", {**WINDOW, "concurrency": 8, "turns_per_session": 2}),
    ("start_window_ms", {"concurrency": 8, "start_window_ms": -1})])
def test_a_spread_or_window_that_cannot_apply_exits_2_naming_it(tmp_path: Path, capsys: Any, field: str,
                                                                extra: dict[str, Any]) -> None:
    workload = {"isl": 1000, "osl": 100, "num_request_ratio": 2, **extra}
    path = tmp_path / "c.yaml"
    path.write_text(json.dumps({"search_space": {"model_name": "Qwen/Qwen3-32B", "hardware_sku": "h200_sxm"},
                                "workload": workload}))
    assert spica(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"workload.{field}" in err and "Traceback" not in err


def test_the_trace_runs_one_session_per_slot_with_first_arrivals_spread_over_the_window(tmp_path: Path) -> None:
    path = staggered_trace(1000, 50, 10, 4, 800.0, tmp_path, block=512)
    rows = [json.loads(x) for x in path.read_text().splitlines()]
    assert len(rows) == 10
    lanes: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        lanes.setdefault(r["session_id"], []).append(r)
    assert sorted(len(v) for v in lanes.values()) == [2, 2, 3, 3]          # 10 requests over 4 slots
    assert sorted(v[0]["timestamp"] for v in lanes.values()) == [0.0, 200.0, 400.0, 600.0]
    assert all(r["delay"] == 0 and r["input_length"] == 1000 and r["output_length"] == 50 for r in rows)
    ids = [h for r in rows for h in r["hash_ids"]]
    assert len(ids) == len(set(ids)) == 10 * 2                              # unshared prompts, 2 blocks each


def test_only_a_closed_loop_of_identical_requests_is_staggered(tmp_path: Path) -> None:
    spread = replay_workload(_config(concurrency=8, start_window_ms=800.0).workload, directory=tmp_path)
    assert spread.kind == "trace" and "replay_concurrency" not in spread.kwargs      # the sessions keep 8 in flight
    first = {r["session_id"]: r["timestamp"] for r in map(json.loads, Path(spread.trace_path).read_text().splitlines())}
    assert sorted(first.values()) == [100.0 * i for i in range(8)]
    together = replay_workload(_config(concurrency=8, start_window_ms=0).workload)
    assert together.kind == "synthetic" and together.kwargs["replay_concurrency"] == 8
    assert start_window_ms(_config(concurrency=8, length_spread=0.2).workload) == 0.0   # lengths spread it
    assert start_window_ms(_config(request_rate=2.0).workload) == 0.0                   # an open loop


def test_unset_it_takes_the_shipped_window(tmp_path: Path, monkeypatch: Any) -> None:
    assert start_window_ms(_config(concurrency=8).workload) == load_serving(SERVING_FILE).start_window_ms
    path = tmp_path / "serving-window-400.json"
    path.write_text(json.dumps({"schema": 1, "request_overhead_ms": {"vllm": {"ms": 0.0}},
                                "start_window_ms": {"ms": 400.0}}))
    monkeypatch.setenv("SPICA_SERVING_FILE", str(path))
    assert start_window_ms(_config(concurrency=8).workload) == 400.0
    assert start_window_ms(_config(concurrency=8, start_window_ms=0).workload) == 0.0


def test_a_start_window_breaks_the_lock_step_waves_of_identical_requests() -> None:
    def report(window: float) -> dict[str, Any]:
        config = _config(concurrency=8, start_window_ms=window)
        cand = Candidate.unroll(config.search_space, {"deployment_mode": "agg"},
                                ParallelConfig.from_dict("agg", {"tp": 2}))
        out = evaluate_one(EvalRequest.from_config(config, cand))
        assert out.feasible and out.report["num_requests"] == 80
        return out.report

    together, spread = report(0.0), report(1000.0)
    # 8 × 1024 tokens fill one 8192-token step: started together, every request waits for its whole wave
    assert spread["mean_ttft_ms"] < 0.5 * together["mean_ttft_ms"]
    # spread out, each arrival's prefill shares a step with the others' decodes: tokens come slower
    assert together["mean_itl_ms"] < spread["mean_itl_ms"] < 2 * together["mean_itl_ms"]


def _row(i: int, model: str, measured: float, by_window: dict[float, float]) -> dict[str, Any]:
    windows = {window_key(w): {"mean_ttft_ms": v, "mean_itl_ms": 10.0} for w, v in by_window.items()}
    return {"id": f"{model}-{i}", "model": model, "system": "h100_sxm", "backend": "vllm",
            "measured": {"ttft_ms": measured, "tpot_ms": 10.0}, "replay": dict(windows[window_key(0.0)]),
            "replay_windows": windows}


def test_the_window_is_the_one_of_least_error_and_never_chosen_with_the_rows_own_model() -> None:
    w = START_WINDOWS_MS[2]
    right = {x: (100.0 if x == w else 400.0) for x in START_WINDOWS_MS}     # measured 100: window w is right
    rows = [_row(i, m, 100.0 + i, right) for m in "AB" for i in range(12)]
    assert fit_window(rows)[0] == w
    wrong = {x: (100.0 if x == 0.0 else 400.0) for x in START_WINDOWS_MS}   # model C: only 0 is right
    rows += [_row(i, "C", 100.0 + i, wrong) for i in range(12)]
    oof = out_of_fold(rows)
    for r in rows:
        if r["model"] == "C":                                                # fitted on A and B: window w
            assert oof[r["id"]]["start_window_ms"] == w
            assert oof[r["id"]]["predicted_oof"]["ttft_ms"] == pytest.approx(400.0 + oof[r["id"]]["constants"]["vllm"])
    flat = [_row(i, m, 100.0 + i, {x: 100.0 for x in START_WINDOWS_MS}) for m in "AB" for i in range(12)]
    assert fit_window(flat)[0] == 0.0                                        # no gain: start together

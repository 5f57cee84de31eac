"""Evaluation jobs side by side: the emit stage's extra replays share the sweep's workers."""
from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from spica_core.config.model import SmartSearchConfig
from spica_core.deployment import Candidate
from spica_core.emit.records import CandidateRecord
from spica_core.emit.rechecks import recheck, with_headroom
from spica_core.evaluate import (
    EvalPool, EvalRequest, Outcome, SequentialEvaluator, evaluate_one, find_headroom, headroom_job, run_job, run_jobs,
)
from spica_core.evaluate.headroom import outcome_attainment
from spica_core.space.parallel import ParallelConfig

SPACE = {"model_name": "Qwen/Qwen3-32B", "hardware_sku": "h200_sxm", "gpu_budget": 8, "deployment_mode": ["agg"],
         "backend": ["vllm"], "router_mode": ["round_robin"], "planner_scaling_policy": ["disabled"],
         "agg_max_num_seqs": [256], "agg_max_num_batched_tokens": [8192]}
CONFIG = SmartSearchConfig.from_dict({
    "search_space": SPACE, "workload": {"isl": 2000, "osl": 200, "request_rate": 4.0, "num_request_ratio": 30},
    "goal": {"target": "goodput_per_gpu", "sla": {"ttft_ms": 1000, "itl_ms": 30}}})


def request(tp: int, name: str) -> EvalRequest:
    cand = Candidate.unroll(CONFIG.search_space, {"deployment_mode": "agg"}, ParallelConfig.from_dict("agg", {"tp": tp}))
    return replace(EvalRequest.from_config(CONFIG, cand), eval_id=name)


class Recorded:
    """A real evaluator that notes, at each submit, whose request it sends and whose are in flight."""

    def __init__(self, evaluator: Any) -> None:
        self.evaluator = evaluator
        self.flying: dict[int, str] = {}
        self.sent: list[tuple[str, tuple[str, ...]]] = []

    def capacity(self) -> int:
        return self.evaluator.capacity()

    def submit(self, req: EvalRequest) -> int:
        job = req.eval_id.split("@")[0]  # a scaled request's id is the candidate's @ its scale
        self.sent.append((job, tuple(self.flying.values())))
        ticket = self.evaluator.submit(req)
        self.flying[ticket] = job
        return ticket

    def poll(self, timeout: float) -> list[tuple[int, Outcome]]:
        done = self.evaluator.poll(timeout)
        for ticket, _ in done:
            del self.flying[ticket]
        return done


def test_headroom_searches_run_side_by_side_and_find_what_they_find_alone() -> None:
    requests = [request(1, "tp1"), request(2, "tp2")]
    todays = [outcome_attainment(evaluate_one(r)) for r in requests]
    alone = [find_headroom(r, t) for r, t in zip(requests, todays)]
    with EvalPool(2, max_eval_seconds=120) as pool:
        recorded = Recorded(pool)
        together = run_jobs(recorded, [headroom_job(r, t) for r, t in zip(requests, todays)])  # type: ignore[arg-type]
    assert together == alone  # round-robin replays are exact: the same bisections
    assert all(h is not None and h.evaluations >= 2 for h in alone)
    assert len(recorded.sent) == sum(h.evaluations for h in alone)  # type: ignore[union-attr]
    # one search's next scale was sent while the other's replay was running: neither waited for the other's chain
    assert {(name, flying) for name, flying in recorded.sent} >= {("tp1", ("tp2",)), ("tp2", ("tp1",))}


def test_jobs_end_in_order_and_an_error_stops_them_all() -> None:
    def asks(*names: str) -> Any:
        got = []
        for name in names:
            (outcome,) = yield [request(2, name)]
            got.append(outcome.eval_id)
        _ = yield []  # asking for nothing gets nothing back
        return got

    closed = []

    def fails() -> Any:
        try:
            yield [request(2, "x")]
            raise ValueError("bad job")
        finally:
            closed.append("fails")

    def waits() -> Any:
        try:
            yield [request(2, "y")]
            yield [request(2, "z")]
        finally:
            closed.append("waits")

    assert run_jobs(SequentialEvaluator(), [asks("a", "b"), asks(), asks("c")]) == [["a", "b"], [], ["c"]]
    assert run_job(asks("a")) == ["a"]
    with pytest.raises(ValueError, match="bad job"):
        run_jobs(SequentialEvaluator(), [waits(), fails()])
    assert sorted(closed) == ["fails", "waits"]


def test_the_emit_rechecks_on_workers_match_them_in_this_process() -> None:
    outcomes = [evaluate_one(request(tp, f"rank-{rank}")) for rank, tp in ((1, 2), (2, 1))]
    records = [CandidateRecord(rank, float(o.score), o.candidate.used_gpus, o.candidate, dict(o.metrics), None, 0, 0,
                               bands=dict(o.bands)) for rank, o in zip((1, 2), outcomes)]
    here, check_here = recheck(records, [1, 2], CONFIG, None)
    with EvalPool(2, max_eval_seconds=120) as pool:
        recorded = Recorded(pool)
        there, check_there = recheck(records, [1, 2], CONFIG, None, recorded)  # type: ignore[arg-type]
    # every extra replay went to the workers: the headroom searches' and one per confidence check
    assert len(recorded.sent) == sum(r.headroom.evaluations for r in here) + 2  # type: ignore[union-attr]
    assert [r.headroom for r in there] == [r.headroom for r in here]
    assert all(r.headroom is not None for r in here)
    assert check_here is not None and check_there == check_here and set(check_here.scores) == {1, 2}
    assert [r.headroom for r in with_headroom(records, [2], CONFIG, None)] == [None, here[1].headroom]

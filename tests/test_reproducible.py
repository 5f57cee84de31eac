"""The same candidate gives the same number: round robin exactly, the KV router within its replay spread.

Dynamo 1.6.1's KV router breaks ties between equal-cost workers with an unseeded generator and exposes no
seed (spica_core/evaluate/repeats.py), so a KV-router candidate's score moves by a few tenths of a percent
from one replay to the next, in one process or across processes; :func:`replay_spread` measures that.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import REPO
from spica_core.evaluate import pinned_request
from spica_core.evaluate.repeats import Range, replay_is_exact, replay_spread
from spica_core.run.inputs import load_inputs

# The candidate of the report: Qwen3-32B on H200, vLLM, agg 4 × TP2, KV router, a shared-prefix synthetic
# workload (256 requests; one replay takes about 0.1 s).
PINNED = {
    "search_space": {"model_name": "Qwen/Qwen3-32B", "hardware_sku": "h200_sxm", "gpu_budget": 8,
                     "deployment_mode": ["agg"], "backend": ["vllm"], "parallel_configs": [{"tp": 2, "replicas": 4}],
                     "agg_max_num_seqs": [256], "agg_max_num_batched_tokens": [8192], "router_mode": ["kv_router"],
                     "overlap_score_credit": [1.0], "prefill_load_scale": [1.0], "router_temperature": [0.0],
                     "planner_scaling_policy": ["disabled"]},
    "workload": {"isl": 4000, "osl": 500, "concurrency": 64, "num_request_ratio": 4, "shared_prefix_ratio": 0.5,
                 "num_prefix_groups": 8},
    "goal": {"target": "throughput_per_gpu"},
    "sweep": {"parallel_evals": 1},
}


def pinned(tmp_path: Path, router: str = "kv_router") -> Path:
    body = json.loads(json.dumps(PINNED))
    body["search_space"]["router_mode"] = [router]
    path = tmp_path / f"{router}.yaml"
    path.write_text(yaml.safe_dump(body))
    return path


def request_of(path: Path) -> Any:
    return pinned_request(load_inputs(str(path)).config, path.parent)


def evaluate_in_a_process(path: Path) -> float:
    """`spica evaluate CONFIG --json` in a process of its own: the candidate's score."""
    run = subprocess.run([sys.executable, "-m", "spica_cli.main", "evaluate", str(path), "--json"], cwd=REPO,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    body = json.loads(run.stdout)
    assert body["status"] == "feasible", body["reason"]
    return float(body["score"])


def test_range_of_values() -> None:
    r = Range.of([3.0, 1.0, 2.0])
    assert (r.min, r.median, r.max, r.width) == (1.0, 2.0, 3.0, 2.0)
    assert r.relative == 0.5 and r.contains(3.0) and not r.contains(3.1) and r.contains(3.1, margin=0.1)
    assert Range.of([5.0] * 3).relative == 0.0
    with pytest.raises(ValueError):
        Range.of([])


def test_a_round_robin_candidate_is_replayed_once_and_its_spread_is_zero(tmp_path: Path) -> None:
    req = request_of(pinned(tmp_path, "round_robin"))
    assert replay_is_exact(req.candidate)
    spread = replay_spread(req)
    assert spread.exact and spread.n == 1 and len(spread.scores) == 1
    assert spread.score.width == 0 and spread.band_spread() == {"ttft_ms": 0.0, "itl_ms": 0.0}


def test_a_kv_router_candidate_spreads_over_its_replays(tmp_path: Path) -> None:
    req = request_of(pinned(tmp_path))
    assert not replay_is_exact(req.candidate)
    spread = replay_spread(req)
    assert not spread.exact and spread.n == 3 and len(spread.scores) == 3 and spread.replay_seconds > 0
    assert spread.score.min <= spread.score.median <= spread.score.max
    assert spread.mean_ttft_ms.min <= spread.mean_ttft_ms.median <= spread.mean_ttft_ms.max
    # If this fails, the runtime's KV router has become reproducible: make replay_is_exact say so and update
    # the reproducibility paragraph of docs/search.md.
    assert len(set(spread.scores)) > 1, spread.scores
    extra = spread.band_spread()
    assert set(extra) == {"ttft_ms", "itl_ms"} and 0 < extra["ttft_ms"] < 0.1 and 0 <= extra["itl_ms"] < 0.1


@pytest.mark.slow
def test_three_processes_agree_exactly_on_round_robin_and_within_the_spread_on_the_kv_router(
        tmp_path: Path) -> None:
    rr = pinned(tmp_path, "round_robin")
    rr_scores = {evaluate_in_a_process(rr) for _ in range(3)}
    assert len(rr_scores) == 1 and rr_scores == {replay_spread(request_of(rr)).score.median}

    kv = pinned(tmp_path)
    scores = [evaluate_in_a_process(kv) for _ in range(3)]
    # 15 replays in this process, the band widened on each side by twice its own half-width: for normal
    # replay-to-replay noise, one of three other draws falls outside about 3 times in 10 000 (the bare
    # min..max of 3 replays misses at least one of three new scores 4 times in 5).
    spread = replay_spread(request_of(kv), n=15)
    assert spread.n == 15 and len(set(spread.scores)) > 1
    assert all(spread.score.contains(s, margin=2 * spread.score.relative) for s in scores), (scores, spread.score)
    assert spread.score.relative < 0.02  # a few tenths of a percent, not a different candidate


def test_an_emitted_kv_router_candidate_carries_its_spread_in_its_band(tmp_path: Path) -> None:
    from spica_core.emit.records import CandidateRecord
    from spica_core.emit.rechecks import with_spread
    from spica_core.evaluate import evaluate_one

    path = pinned(tmp_path)
    config = load_inputs(path).config
    req = request_of(path)
    out = evaluate_one(req)
    record = CandidateRecord(1, float(out.score), out.candidate.used_gpus, out.candidate, dict(out.metrics), None, 0, 0,
                             bands=dict(out.bands))
    [spread] = with_spread([record], [1], config, None)
    ttft, before = spread.bands["ttft_ms"], out.bands["ttft_ms"]
    assert ttft.spread > 0
    assert ttft.p90 > before.p90 and ttft.p10 < before.p10 and ttft.p50 == before.p50
    [untouched] = with_spread([record], [2], config, None)          # not emitted: no extra replays
    assert untouched.bands == record.bands

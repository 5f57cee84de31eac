"""Re-sweeps: an unchanged trace evaluates nothing; a changed one starts a run warm-started from the last."""
from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from examples.make_traces import write_poisson_trace

CONFIG = """search_space:
  model_name: Qwen/Qwen3-32B
  hardware_sku: h200_sxm
  gpu_budget: 8
  deployment_mode: [agg]
  backend: [vllm]
  agg_max_num_seqs: [256, 512]
  agg_max_num_batched_tokens: [8192]
  router_mode: [round_robin, kv_router]
  overlap_score_credit: [1.0]
  prefill_load_scale: [1.0]
  router_temperature: [0.0]
  planner_scaling_policy: [disabled]
workload:
  trace_path: trace.jsonl
  replay_concurrency: 16
goal:
  target: throughput_per_gpu
sweep: {max_rounds: 2, candidates_per_round: 3, parallel_evals: 1, seed: 3}
"""


def _trials(folder: Path) -> list[dict]:
    return pq.read_table(folder / "trials.parquet").to_pylist()


@pytest.mark.slow
def test_a_changed_trace_starts_a_warm_run_and_an_unchanged_one_evaluates_nothing(tmp_path: Path) -> None:
    from flows.resweep import resweep

    config = tmp_path / "config.yaml"
    config.write_text(CONFIG)
    write_poisson_trace(tmp_path / "trace.jsonl", num_requests=120, rate_rps=8, isl=2000, osl=100, seed=1)
    runs = tmp_path / "runs"

    first = resweep(config_path=str(config), runs_root=str(runs))  # no earlier run: a full sweep
    [first_run] = list(runs.iterdir())
    before = (first_run / "trials.parquet").stat().st_mtime_ns
    assert Path(first.run_dir) == first_run and first.ranking

    state = resweep(config_path=str(config), runs_root=str(runs), return_state=True)
    assert state.is_completed() and "unchanged" in (state.message or "")
    assert list(runs.iterdir()) == [first_run] and (first_run / "trials.parquet").stat().st_mtime_ns == before

    write_poisson_trace(tmp_path / "trace.jsonl", num_requests=120, rate_rps=16, isl=2000, osl=100, seed=2)
    second = resweep(config_path=str(config), runs_root=str(runs))
    second_run = Path(second.run_dir)
    assert second_run != first_run and second_run.parent == runs
    top = pq.read_table(first_run / "ranking.parquet").to_pylist()[:3]
    old = {(t["round"], t["trial"]): t for t in _trials(first_run)}
    wanted = [(old[(r["round"], r["trial"])]["selection_json"], old[(r["round"], r["trial"])]["parallel_json"])
              for r in top]
    new = _trials(second_run)
    warm = [t for t in new if t["suggested_by"] == "warm-start"]
    assert [(t["selection_json"], t["parallel_json"]) for t in new[:len(wanted)]] == wanted
    # one worker: asks of one candidate each, the earlier run's top ones first
    assert len(warm) == len(wanted) and [(t["round"], t["trial"]) for t in warm] == [(0, i) for i in range(len(wanted))]
    assert all(not t["cache_hit"] and t["replay_seconds"] for t in warm)  # replayed on the new trace, not copied
    scores_then = {(old[(r["round"], r["trial"])]["selection_json"]): r["score"] for r in top}
    assert any(scores_then[t["selection_json"]] != t["score"] for t in warm)  # another trace, other scores

    # The earlier run's evaluated trials are the new studies' prior (their scores, as a prior study only).
    from spica_core.config.model import SmartSearchConfig
    from spica_core.search import SearchContext, load_warm_start
    from spica_core.space.branches import enumerate_branches

    earlier = load_warm_start(first_run)
    feasible = [t for t in _trials(first_run) if t["status"] == "feasible" and not t["cache_hit"]]
    assert earlier.source == first_run.name and len(earlier.top) == len(wanted)
    assert sorted(t.cache_key for t in earlier.trials) == sorted(t["cache_key"] for t in feasible)
    cfg = SmartSearchConfig.from_yaml(config)
    study = SearchContext(cfg, None, None, warm_start=earlier).suggester(enumerate_branches(cfg).branch("agg")).study
    assert sorted(r.metrics["objective"] for r in study.prior) == sorted(t["score"] for t in feasible)

"""The search loop on real replays: rounds, cache and duplicates, stall, thorough, merge, resume."""
from __future__ import annotations

import itertools
import json
import random
from dataclasses import replace
from pathlib import Path
from typing import Any, Sequence

import pytest

from spica_core.config.model import SmartSearchConfig
from spica_core.evaluate import Candidate, EvalRequest, Outcome, SequentialEvaluator, Status
from spica_core.run.catalog import RunDir
from spica_core.search import suggesters
from spica_core.search import (
    EvalCache, SearchContext, Study, Tally, Trial, VizierSuggester, rank_trials, run_round,
    thorough_proposals, thorough_size,
)
from spica_core.space.branches import Branch, enumerate_branches
from spica_core.space.parallel import ParallelConfig
from spica_core.space.projection import latent_params

SPACE: dict[str, Any] = {
    "model_name": "Qwen/Qwen3-32B", "hardware_sku": "h200_sxm", "gpu_budget": 8, "deployment_mode": ["agg"],
    "backend": ["vllm"], "router_mode": ["round_robin"], "planner_scaling_policy": ["disabled"],
    "agg_max_num_seqs": [256], "agg_max_num_batched_tokens": [8192],
}
WORKLOAD = {"isl": 2000, "osl": 100, "concurrency": 16, "num_request_ratio": 2}
GOAL = {"target": "goodput_per_gpu", "sla": {"ttft_ms": 600, "itl_ms": 20}}


def make(space: dict[str, Any] | None = None, sweep: dict[str, Any] | None = None,
         goal: dict[str, Any] | None = None, workload: dict[str, Any] | None = None) -> SmartSearchConfig:
    return SmartSearchConfig.from_dict({"search_space": {**SPACE, **(space or {})},
                                        "workload": workload or WORKLOAD, "goal": goal or GOAL,
                                        "sweep": {"parallel_evals": 1, **(sweep or {})}})


class CountingEvaluator(SequentialEvaluator):
    """The real in-process evaluator, counting how many candidates it replayed."""

    def __init__(self) -> None:
        self.evaluated: list[EvalRequest] = []

    def evaluate_batch(self, requests: Sequence[EvalRequest]) -> list[Outcome]:
        self.evaluated.extend(requests)
        return super().evaluate_batch(requests)


def branch_of(config: SmartSearchConfig, mode: str = "agg"):  # type: ignore[no-untyped-def]
    return enumerate_branches(config).branch(mode)


def test_thorough_enumerates_every_candidate_once_in_canonical_order() -> None:
    config = make({"agg_max_num_seqs": [256, 512]}, sweep={"policy": "thorough"})
    branch = branch_of(config)
    cands = list(thorough_proposals(branch))
    assert len(cands) == thorough_size(branch) == 15 * 2  # 15 agg configs on 8 GPUs × 2 batch sizes
    keys = [(c.parallel.to_dict()["tp"], c.parallel.to_dict()["replicas"], c.selection["agg_max_num_seqs"])
            for c in cands]
    assert len(set(keys)) == len(keys)
    assert cands == list(thorough_proposals(branch))  # deterministic
    assert cands[0].selection == {"deployment_mode": "agg", "backend": "vllm", "quantization": "bf16",
                                  "kv_cache_dtype": "bf16", "agg_max_num_seqs": 256,
                                  "agg_max_num_batched_tokens": 8192, "router_mode": "round_robin",
                                  "planner_scaling_policy": "disabled"}


def run_rounds(branch: Branch, context: SearchContext, rounds: int, cache: EvalCache | None = None) -> list[Trial]:
    """Consecutive rounds of one branch, each resumed from the trials before it."""
    trials: list[Trial] = []
    cache = cache or EvalCache()
    for round_no in range(rounds):
        trials += run_round(branch, context, round_no, trials, SequentialEvaluator(), cache).trials
    return trials


def thorough_optimum(config: SmartSearchConfig) -> tuple[float, list[Trial]]:
    branch = branch_of(config)
    trials = run_rounds(branch, SearchContext(config, None, None), -(-thorough_size(branch) // config.sweep.per_round))
    best = max(t.score for t in trials if t.status is Status.feasible)  # type: ignore[type-var]
    return best, trials


def test_cache_answers_a_repeated_candidate_without_a_replay() -> None:
    config = make(sweep={"policy": "thorough", "candidates_per_round": 3})
    branch = branch_of(config)
    context = SearchContext(config, None, None)
    cache = EvalCache()
    first = run_round(branch, context, 0, [], CountingEvaluator(), cache)
    again_eval = CountingEvaluator()
    again = run_round(branch, context, 0, [], again_eval, cache)
    assert again_eval.evaluated == []
    assert [t.cache_hit for t in again.trials] == [True, True, True]
    assert [t.score for t in again.trials] == [t.score for t in first.trials]
    # a different run context (another goal) is a different key: no hit
    other = SearchContext(make(sweep={"policy": "thorough", "candidates_per_round": 3},
                               goal={"target": "throughput"}), None, None)
    assert other.key != context.key


def test_a_one_candidate_branch_is_evaluated_once_then_ends_as_exhausted() -> None:
    config = make(space={"deployment_mode": ["agg"], "parallel_configs": [{"tp": 2, "replicas": 2}]},
                  sweep={"candidates_per_round": 2, "algorithm": "RANDOM_SEARCH"})
    branch = branch_of(config)
    evaluator = CountingEvaluator()
    result = run_round(branch, SearchContext(config, None, None), 0, [], evaluator, EvalCache())
    assert len(evaluator.evaluated) == 1 and (result.unique, result.attempts) == (1, 1)
    assert result.stalled and result.message == ("agg: legal space exhausted: all 1 candidate(s) of the branch "
                                                 "have been tried (round 1); moving on")
    assert Tally.of(result.trials).cache_hits == 0


@pytest.mark.parametrize("algorithm", ["RANDOM_SEARCH", "QUASI_RANDOM_SEARCH", "GAUSSIAN_PROCESS_BANDIT"])
def test_no_batch_repeats_a_candidate_and_an_exhausted_branch_says_so(algorithm: str) -> None:
    """15 agg configs × 2 batch sizes = 30 candidates; rounds of 7 with a budget of 5 rounds (35 > 30): every
    proposal is new, within its batch and against everything before it, until the space runs out."""
    config = make({"agg_max_num_seqs": [256, 512]},
                  sweep={"candidates_per_round": 7, "max_rounds": 5, "algorithm": algorithm, "seed": 3})
    branch = branch_of(config)
    context = SearchContext(config, None, None)
    evaluator, trials, messages = CountingEvaluator(), [], []
    for round_no in range(5):
        result = run_round(branch, context, round_no, trials, evaluator, EvalCache())
        keys = [(t.parallel, json.dumps(t.selection, sort_keys=True)) for t in result.trials]
        before = {(t.parallel, json.dumps(t.selection, sort_keys=True)) for t in trials}
        assert len(set(keys)) == len(keys) and not set(keys) & before
        trials += result.trials
        if result.stalled:
            messages.append(result.message)
            break
    assert len(trials) == len(evaluator.evaluated) == thorough_size(branch) == 30
    assert not any(t.cache_hit for t in trials)
    assert messages == ["agg: legal space exhausted: all 30 candidate(s) of the branch have been tried (round 5); "
                        "moving on"]


def test_infeasible_candidates_are_recorded_with_their_reason_and_told_to_the_study() -> None:
    config = make(space={"deployment_mode": ["agg"], "parallel_configs": [{"tp": 1}],
                         "agg_gpu_memory_utilization": 0.3}, sweep={"candidates_per_round": 1,
                                                                  "algorithm": "RANDOM_SEARCH"})
    branch = branch_of(config)
    result = run_round(branch, SearchContext(config, None, None), 0, [], CountingEvaluator(), EvalCache())
    assert result.unique == 0 and result.stalled
    assert all(t.status is Status.infeasible and "no KV" in t.reason for t in result.trials if not t.cache_hit)
    assert Tally.of(result.trials).top_reasons()[0][1] >= 1


def test_same_seed_config_and_trials_give_identical_rounds() -> None:
    config = make(space={"agg_max_num_seqs": [256, 512, 1024]},
                  sweep={"candidates_per_round": 3, "max_rounds": 2, "algorithm": "QUASI_RANDOM_SEARCH", "seed": 5})
    branch = branch_of(config)
    context = SearchContext(config, None, None)
    a = run_round(branch, context, 0, [], SequentialEvaluator(), EvalCache())
    b = run_round(branch, context, 0, [], SequentialEvaluator(), EvalCache())
    assert [t.params for t in a.trials] == [t.params for t in b.trials]
    a2 = run_round(branch, context, 1, a.trials, SequentialEvaluator(), EvalCache())
    b2 = run_round(branch, context, 1, b.trials, SequentialEvaluator(), EvalCache())
    assert [t.params for t in a2.trials] == [t.params for t in b2.trials]
    other = SearchContext(make(space={"agg_max_num_seqs": [256, 512, 1024]},
                               sweep={"candidates_per_round": 3, "max_rounds": 2, "algorithm": "QUASI_RANDOM_SEARCH",
                                      "seed": 6}),
                          None, None)
    c = run_round(branch, other, 0, [], SequentialEvaluator(), EvalCache())
    assert [t.params for t in c.trials] != [t.params for t in a.trials]


def test_vizier_proposals_are_legal_configs_with_their_features_recorded() -> None:
    config = make()
    branch = branch_of(config)
    suggester = VizierSuggester(branch, [("objective", "max")], pareto=False, algorithm="QUASI_RANDOM_SEARCH",
                                seed=0, budget=4)
    for proposal in suggester.suggest(4, [], step=0):
        assert proposal.parallel in branch.configs_for("vllm")
        record = json.loads(proposal.projection.to_json())  # type: ignore[union-attr]
        assert record["requested_features"] == record["actual_features"]
        assert record["actual_features"]["used_gpu_ratio"] == proposal.parallel.used_gpus / 8
        assert record["projection_distance"] == 0.0 and record["mode_projected"] is False


def candidate_on(gpus: int) -> Candidate:
    pc = ParallelConfig.from_dict("agg", {"tp": 1, "replicas": gpus})
    return Candidate.unroll(make().search_space, {"deployment_mode": "agg"}, pc)


def trials_with(objectives: list[dict[str, float]], gpus: Sequence[int] | None = None) -> list[Trial]:
    gpus = gpus or [8] * len(objectives)
    return [Trial("agg", 0, i, Status.feasible, candidate_on(g).parallel, {}, {"backend": "vllm"},
                  candidate=candidate_on(g), score=o["throughput_per_gpu"], objectives=o)
            for i, (o, g) in enumerate(zip(objectives, gpus))]


def test_pareto_merge_is_exactly_the_non_dominated_set() -> None:
    rng = random.Random(3)
    objs = [{"throughput_per_gpu": float(rng.randint(0, 30)), "throughput_per_user": float(rng.randint(0, 30))}
            for _ in range(60)]
    config = make(goal={"target": "pareto"}, workload={"isl": 100, "osl": 10, "concurrency": 4,
                                                        "num_request_ratio": 1})
    front = rank_trials(trials_with(objs), config)
    got = [(c.objectives["throughput_per_gpu"], c.objectives["throughput_per_user"]) for c in front]  # type: ignore[index]

    def dominated(p: tuple[float, float]) -> bool:
        return any(q[0] >= p[0] and q[1] >= p[1] and q != p for q in
                   ((o["throughput_per_gpu"], o["throughput_per_user"]) for o in objs))

    expected = [(o["throughput_per_gpu"], o["throughput_per_user"]) for o in objs]
    expected = [p for p in expected if not dominated(p)]
    assert sorted(got) == sorted(expected)  # no dominated point, every non-dominated one (duplicates kept)
    assert [p[1] for p in got] == sorted(p[1] for p in got)  # sorted by the last objective


def test_scalar_merge_ranks_across_branches_by_score_then_gpus() -> None:
    trials = trials_with([{"throughput_per_gpu": s, "throughput_per_user": 0.0} for s in (5.0, 9.0, 9.0)],
                         gpus=[8, 8, 4])
    trials[2] = replace(trials[2], mode="disagg")
    ranked = rank_trials(trials, make())
    assert [(c.rank, c.mode, c.score, c.used_gpus, c.trial) for c in ranked] == \
        [(1, "disagg", 9.0, 4, 2), (2, "agg", 9.0, 8, 1), (3, "agg", 5.0, 8, 0)]
    assert len(rank_trials(trials + [replace(trials[0], cache_hit=True)], make())) == 3  # hits are not candidates


@pytest.mark.slow
def test_default_designer_with_half_the_budget_is_within_2_percent_of_thorough(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """GP-UCB-PE with 8 unique evaluations (about half of the 15-config space) vs the exact optimum; these
    replays are cheap, so the model is forced on (it would space-fill otherwise)."""
    monkeypatch.setattr(suggesters, "MIN_BATCH_SECONDS_FOR_MODEL", 0.0)
    best, rows = thorough_optimum(make(sweep={"policy": "thorough", "candidates_per_round": 8}))
    assert len(rows) == 15
    config = make(sweep={"candidates_per_round": 4, "max_rounds": 2, "seed": 0})
    history = run_rounds(branch_of(config), SearchContext(config, None, None), 2)
    assert [t.suggested_by for t in history] == ["space-filling"] * 4 + ["gp"] * 4
    found = max(t.score for t in history if t.status is Status.feasible)  # type: ignore[type-var]
    unique = sum(1 for t in history if t.is_evaluated_success)
    assert unique == 8 and len({(t.parallel, json.dumps(t.params, sort_keys=True)) for t in history}) == 8
    assert found >= 0.98 * best, f"optimizer best {found} vs thorough {best}"


def test_a_gp_study_space_fills_when_a_batch_of_evaluations_is_cheaper_than_a_fit() -> None:
    config = make({"agg_max_num_seqs": [256, 512]}, sweep={"candidates_per_round": 8})
    branch = branch_of(config)

    def suggester(algorithm: str, workers: int = 2) -> VizierSuggester:
        return VizierSuggester(branch, [("objective", "max")], pareto=False, algorithm=algorithm, seed=0,
                               budget=16, workers=workers)

    def tried(eval_seconds: float) -> list[Trial]:
        proposal = suggester("DEFAULT").space.proposal(0)
        return [Trial("agg", 0, 0, Status.feasible, proposal.parallel, proposal.raw, proposal.selection, score=1.0,
                      eval_seconds=eval_seconds)]

    assert suggester("RANDOM_SEARCH").method(tried(5.0), 8) == "random"
    assert suggester("QUASI_RANDOM_SEARCH").method(tried(5.0), 8) == "space-filling"
    assert suggester("DEFAULT").method([], 8) == "space-filling"                # no data: Vizier seeds too
    assert suggester("DEFAULT").method(tried(0.05), 8) == "space-filling"       # 4 waves × 0.05 s < 0.25 s
    assert suggester("DEFAULT", workers=1).method(tried(0.05), 8) == "gp"       # 8 waves × 0.05 s ≥ 0.25 s
    assert suggester("GAUSSIAN_PROCESS_BANDIT").method(tried(0.5), 8) == "gp"


def test_round_task_resumes_a_finished_round_without_replaying(tmp_path: Path) -> None:
    from tasks.search import round_task
    from tasks.validate import ValidatedRun
    from spica_core.config.policies import filter_for_goal
    from spica_core.run.identity import identify

    config = make(space={"deployment_mode": ["agg"], "parallel_configs": [{"tp": 2, "replicas": 2}],
                         "agg_max_num_seqs": [256, 512]},
                  sweep={"candidates_per_round": 2, "algorithm": "QUASI_RANDOM_SEARCH"})
    run = ValidatedRun(config, config, filter_for_goal(config), identify(config, None), RunDir(tmp_path), None)
    branch = branch_of(config)
    context = SearchContext(config, None, None)
    first_eval = CountingEvaluator()
    first = round_task.fn(run, branch, 0, context, first_eval, EvalCache())
    assert len(first_eval.evaluated) == 2 and RunDir(tmp_path).has("trials")
    again_eval = CountingEvaluator()
    again = round_task.fn(run, branch, 0, context, again_eval, EvalCache())
    assert again_eval.evaluated == [] and [t.params for t in again.trials] == [t.params for t in first.trials]
    stored = RunDir(tmp_path).rows("trials")
    assert len(stored) == len(first.trials) and {r["round"] for r in stored} == {0}


def test_trial_rows_have_fixed_columns_and_read_back_equal() -> None:
    from spica_core.run.catalog import CATALOG

    config = make(space={"deployment_mode": ["agg"], "parallel_configs": [{"tp": 2}]},
                  sweep={"policy": "thorough"})
    result = run_round(branch_of(config), SearchContext(config, None, None), 0, [], SequentialEvaluator(),
                       EvalCache())
    row = result.trials[0].to_row()
    assert set(row) == set(CATALOG["trials"].schema.names)
    assert row["status"] == "feasible" and row["used_gpus"] == 2 and row["score"] > 0
    sample = json.loads(row["sample_json"])
    assert sample["tp"] == 2 and sample["backend_version"] == "0.24.0" and sample["concurrency"] == 16
    assert Trial.from_row(row) == result.trials[0]
    assert list(itertools.islice(thorough_proposals(branch_of(config)), 5))[0].parallel.used_gpus == 2


def test_a_non_finite_objective_becomes_infeasible() -> None:
    from spica_core.search import finite_or_infeasible

    context = SearchContext(make(goal={"target": "e2e_latency"}), None, None)
    cand = candidate_on(1)
    bad = finite_or_infeasible(context, Outcome(Status.feasible, cand, score=float("-inf"), metrics={}))
    assert bad.status is Status.infeasible and "non-finite objective" in bad.reason
    good = finite_or_infeasible(context, Outcome(Status.feasible, cand, score=-812.5))
    assert good.status is Status.feasible and good.score == -812.5
    pareto = SearchContext(make(goal={"target": "pareto"}, workload={"isl": 100, "osl": 10, "concurrency": 4,
                                                                      "num_request_ratio": 1}), None, None)
    nan = finite_or_infeasible(pareto, Outcome(Status.feasible, cand, score=1.0, objectives={
        "throughput_per_gpu": 1.0, "throughput_per_user": float("nan")}))
    assert nan.status is Status.infeasible


def test_round_plan_rapid_and_thorough() -> None:
    from spica_core.search import round_plan

    rapid = make(sweep={"max_rounds": 3, "candidates_per_round": 4})
    assert round_plan([branch_of(rapid)], rapid) == ({"agg": 3}, 12)
    thorough = make(space={"agg_max_num_seqs": [256, 512]}, sweep={"policy": "thorough", "candidates_per_round": 4})
    assert round_plan([branch_of(thorough)], thorough) == ({"agg": 8}, 30)  # ceil(30 / 4) rounds


class InterruptedEvaluator(CountingEvaluator):
    """The real evaluator, interrupted (as by a crash of the sweep) at its n-th batch."""

    def __init__(self, fail_at: int) -> None:
        super().__init__()
        self.batches = 0
        self.fail_at = fail_at

    def evaluate_batch(self, requests: Sequence[EvalRequest]) -> list[Outcome]:
        self.batches += 1
        if self.batches == self.fail_at:
            raise KeyboardInterrupt("sweep killed")
        return super().evaluate_batch(requests)


def test_an_interrupted_round_resumes_without_repeating_finished_evaluations(tmp_path: Path) -> None:
    from spica_core.config.policies import filter_for_goal
    from spica_core.run.identity import identify
    from tasks.search import round_task
    from tasks.validate import ValidatedRun

    config = make(space={"deployment_mode": ["agg"],
                         "parallel_configs": [{"tp": 1, "replicas": 2}, {"tp": 2, "replicas": 2}],
                         "agg_gpu_memory_utilization": 0.3, "agg_max_num_seqs": [256, 512, 1024],
                         "agg_max_num_batched_tokens": [8192, 16384]},
                  sweep={"candidates_per_round": 4, "max_rounds": 1, "algorithm": "RANDOM_SEARCH", "seed": 4})
    branch = branch_of(config)
    context = SearchContext(config, None, None)

    def run_in(folder: Path) -> ValidatedRun:
        return ValidatedRun(config, config, filter_for_goal(config), identify(config, None), RunDir(folder), None)

    straight_eval = CountingEvaluator()
    straight = round_task.fn(run_in(tmp_path / "a"), branch, 0, context, straight_eval, EvalCache())
    asks = max(t.ask for t in straight.trials) + 1
    assert asks >= 2  # candidates without KV room (30 % memory on one GPU) make the round ask again

    killed = InterruptedEvaluator(fail_at=2)  # the second ask that needs a replay
    with pytest.raises(KeyboardInterrupt):
        round_task.fn(run_in(tmp_path / "b"), branch, 0, context, killed, EvalCache())
    kept = RunDir(tmp_path / "b").rows("trials")
    assert kept and {r["ask"] for r in kept} < {t.ask for t in straight.trials}  # finished asks were written
    assert len(killed.evaluated) > 0

    resumed_eval = CountingEvaluator()
    resumed = round_task.fn(run_in(tmp_path / "b"), branch, 0, context, resumed_eval,
                            EvalCache.of([Trial.from_row(r) for r in kept]))
    assert len(killed.evaluated) + len(resumed_eval.evaluated) == len(straight_eval.evaluated)
    assert [t.params for t in resumed.trials] == [t.params for t in straight.trials]
    assert [(t.status, t.cache_hit, t.ask) for t in resumed.trials] == \
        [(t.status, t.cache_hit, t.ask) for t in straight.trials]
    clocks = ("eval_seconds", "replay_seconds", "suggest_seconds")
    timeless = [{k: v for k, v in r.items() if k not in clocks} for r in RunDir(tmp_path / "b").rows("trials")]
    assert timeless == [{k: v for k, v in r.items() if k not in clocks} for r in RunDir(tmp_path / "a").rows("trials")]


def test_tally_sums_replays_and_counts_each_asks_optimizer_time_once() -> None:
    space = VizierSuggester(branch_of(make({"agg_max_num_seqs": [256, 512]})), [("objective", "max")], pareto=False,
                            algorithm="DEFAULT", seed=0, budget=4).space
    p = space.proposal(0)

    def trial(ask: int, replay: float, hit: bool = False) -> Trial:
        return Trial("agg", 0, 0, Status.feasible, p.parallel, p.raw, p.selection, ask=ask, cache_hit=hit,
                     replay_seconds=replay, suggest_seconds=1.5 if ask == 0 else 0.25)

    tally = Tally.of([trial(0, 0.5), trial(0, 0.25), trial(1, 1.0), trial(1, 1.0, hit=True)])
    assert (tally.optimizer_seconds, tally.replay_seconds) == (1.75, 1.75)

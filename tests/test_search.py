"""The search loop on real replays: rounds, cache and duplicates, stall, thorough, merge, resume."""
from __future__ import annotations

import itertools
import json
import math
import random
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Sequence

import pytest

from spica_core.config.model import SmartSearchConfig
from spica_core.deployment import Candidate
from spica_core.evaluate import EvalRequest, Outcome, SequentialEvaluator, Status
from spica_core.run.catalog import RunDir
from spica_core.search import costs as search_costs
from spica_core.search import (
    BranchResult, Costs, EvalCache, SearchContext, Tally, Trial, VizierSuggester, rank_trials, search_branch,
    thorough_proposals, thorough_size,
)
from spica_core.space.branches import Branch, enumerate_branches
from spica_core.space.parallel import ParallelConfig

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
        super().__init__()
        self.evaluated: list[EvalRequest] = []

    def evaluate(self, request: EvalRequest) -> Outcome:
        self.evaluated.append(request)
        return super().evaluate(request)


def search(branch: Branch, context: SearchContext, evaluator: SequentialEvaluator | None = None,
           cache: EvalCache | None = None, log: Sequence[Trial] = ()) -> BranchResult:
    return search_branch(branch, context, evaluator or SequentialEvaluator(), cache or EvalCache(), log)


def keep_the_model_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """These replays take a fraction of a GP ask, so the cost rules would space-fill (also to cover the first
    model ask), enumerate or ask for large batches; tests of the designer itself turn them off (batches of one
    per worker)."""
    monkeypatch.setattr(search_costs, "OPTIMIZER_SHARE", 1e9)
    monkeypatch.setattr(search_costs, "BATCH_SHARE", 1e9)
    monkeypatch.setattr(search_costs, "FIRST_MODEL_ASK_S", 0.0)
    monkeypatch.setattr(Costs, "enumeration_pays", lambda self, untried, remaining, batch: False)


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
                                  "kv_cache_dtype": "bf16", "hardware_sku": "h200_sxm", "agg_max_num_seqs": 256,
                                  "agg_max_num_batched_tokens": 8192, "router_mode": "round_robin",
                                  "planner_scaling_policy": "disabled"}


def thorough_optimum(config: SmartSearchConfig) -> tuple[float, list[Trial]]:
    branch = branch_of(config)
    trials = search(branch, SearchContext(config, None, None)).trials
    best = max(t.score for t in trials if t.status is Status.feasible)  # type: ignore[type-var]
    return best, trials


def test_cache_answers_a_repeated_candidate_without_a_replay() -> None:
    config = make(sweep={"policy": "thorough", "candidates_per_round": 3})
    branch = branch_of(config)
    context = SearchContext(config, None, None)
    cache = EvalCache()
    first = search(branch, context, CountingEvaluator(), cache)
    again_eval = CountingEvaluator()
    again = search(branch, context, again_eval, cache)
    assert again_eval.evaluated == [] and len(again.trials) == 15
    assert all(t.cache_hit for t in again.trials)
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
    result = search(branch, SearchContext(config, None, None), evaluator)
    assert len(evaluator.evaluated) == len(result.trials) == 1
    assert result.stalled and result.message == ("agg: legal space exhausted: all 1 candidate(s) of the branch "
                                                 "have been tried; moving on")
    assert Tally.of(result.trials).cache_hits == 0


@pytest.mark.parametrize("algorithm", ["RANDOM_SEARCH", "QUASI_RANDOM_SEARCH", "GAUSSIAN_PROCESS_BANDIT"])
def test_no_batch_repeats_a_candidate_and_an_exhausted_branch_says_so(algorithm: str) -> None:
    """15 agg configs × 2 batch sizes = 30 candidates; rounds of 7 with a budget of 5 rounds (35 > 30): every
    proposal is new, against everything before it and everything pending, until the space runs out."""
    config = make({"agg_max_num_seqs": [256, 512]},
                  sweep={"candidates_per_round": 7, "max_rounds": 5, "algorithm": algorithm, "seed": 3})
    branch = branch_of(config)
    evaluator = CountingEvaluator()
    result = search(branch, SearchContext(config, None, None), evaluator)
    trials = result.trials
    keys = [(t.parallel, json.dumps(t.selection, sort_keys=True)) for t in trials]
    assert len(set(keys)) == len(keys) == len(evaluator.evaluated) == thorough_size(branch) == 30
    assert [t.trial for t in trials] == list(range(30)) and not any(t.cache_hit for t in trials)
    assert result.message == "agg: legal space exhausted: all 30 candidate(s) of the branch have been tried; moving on"


def test_infeasible_candidates_are_recorded_with_their_reason_and_told_to_the_study() -> None:
    """Four TP1 pins have no KV room at 30 % memory, TP2 has; one success per round and a budget of one, so every
    pick after the first is asked of the study (none is enumerated). Seed 2 draws the four TP1 pins first."""
    config = make(space={"deployment_mode": ["agg"], "agg_gpu_memory_utilization": 0.3,
                         "parallel_configs": [*({"tp": 1, "replicas": r} for r in (1, 2, 3, 4)), {"tp": 2}]},
                  sweep={"candidates_per_round": 1, "max_rounds": 1, "algorithm": "RANDOM_SEARCH", "seed": 2})
    context = SearchContext(config, None, None)
    result = search(branch_of(config), context, CountingEvaluator())
    labels = [t.parallel.label() for t in result.trials]
    assert [t.status for t in result.trials] == [Status.infeasible] * 4 + [Status.feasible], labels
    assert sorted(labels[:4]) == ["1×TP1", "2×TP1", "3×TP1", "4×TP1"] and labels[4] == "1×TP2"
    assert all("no KV" in t.reason for t in result.trials[:4])
    assert Tally.of(result.trials).top_reasons()[0][1] == 4

    # what the branch's study was told by its last ask: every infeasible trial, with its parameters and reason
    told = context.suggesters["agg"].study.trials
    assert len(told) == 4, told
    for record, trial in zip(told, result.trials):
        assert record.params == trial.params
        assert not record.feasible and record.infeasible_reason == trial.reason and record.metrics is None


def test_same_seed_config_and_trials_give_identical_rounds() -> None:
    config = make(space={"agg_max_num_seqs": [256, 512, 1024]},
                  sweep={"candidates_per_round": 3, "max_rounds": 2, "algorithm": "QUASI_RANDOM_SEARCH", "seed": 5})
    branch = branch_of(config)
    context = SearchContext(config, None, None)
    a = search(branch, context)
    b = search(branch, context)
    assert len(a.trials) == 6 and [t.params for t in a.trials] == [t.params for t in b.trials]
    other = SearchContext(make(space={"agg_max_num_seqs": [256, 512, 1024]},
                               sweep={"candidates_per_round": 3, "max_rounds": 2, "algorithm": "QUASI_RANDOM_SEARCH",
                                      "seed": 6}),
                          None, None)
    c = search(branch, other)
    assert [t.params for t in c.trials] != [t.params for t in a.trials]


def test_vizier_proposals_are_legal_configs_with_their_features_recorded() -> None:
    config = make()
    branch = branch_of(config)
    suggester = VizierSuggester(branch, [("objective", "max")], pareto=False, algorithm="QUASI_RANDOM_SEARCH",
                                seed=0, budget=4)
    for proposal in suggester.suggest(4, [], [], step=0, costs=Costs(1, None)):
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
    """GP-UCB-PE with 8 unique evaluations (about half of the 15-config space) vs the exact optimum, median of
    3 seeds; these replays are cheap, so the model is forced on (it would space-fill or enumerate otherwise)."""
    keep_the_model_on(monkeypatch)
    best, rows = thorough_optimum(make(sweep={"policy": "thorough", "candidates_per_round": 8}))
    assert len(rows) == 15
    found = []
    for seed in (0, 1, 2):
        config = make(sweep={"candidates_per_round": 4, "max_rounds": 2, "seed": seed})
        history = search(branch_of(config), SearchContext(config, None, None)).trials
        # one worker: batches of one; batch b knows batches <= b - 2, so the first two are picked blind
        assert [t.suggested_by for t in history] == ["space-filling"] * 2 + ["gp"] * 6
        assert [t.ask for t in history] == list(range(8))
        unique = sum(1 for t in history if t.is_evaluated_success)
        assert unique == 8 and len({(t.parallel, json.dumps(t.params, sort_keys=True)) for t in history}) == 8
        found.append(max(t.score for t in history if t.status is Status.feasible))  # type: ignore[type-var]
    assert sorted(found)[1] >= 0.98 * best and min(found) >= 0.95 * best, f"optimizer best {found} vs {best}"


def test_a_gp_study_space_fills_when_an_ask_costs_more_than_its_replays() -> None:
    config = make({"agg_max_num_seqs": [256, 512]}, sweep={"candidates_per_round": 8})
    branch = branch_of(config)

    def suggester(algorithm: str) -> VizierSuggester:
        return VizierSuggester(branch, [("objective", "max")], pareto=False, algorithm=algorithm, seed=0, budget=16)

    proposal = suggester("DEFAULT").space.proposal(0)
    tried = [Trial("agg", 0, 0, Status.feasible, proposal.parallel, proposal.raw, proposal.selection, score=1.0,
                   eval_seconds=0.5)]
    assert suggester("RANDOM_SEARCH").method(tried, 8, Costs(2, 5.0)) == "random"
    assert suggester("QUASI_RANDOM_SEARCH").method(tried, 8, Costs(2, 5.0)) == "space-filling"
    assert suggester("DEFAULT").method([], 8, Costs(2, None)) == "space-filling"        # no data: Vizier seeds too
    assert suggester("DEFAULT").method(tried, 8, Costs(2, 0.2, 1.0)) == "space-filling"  # 8 × 0.1 s < a 1 s ask
    assert suggester("DEFAULT").method(tried, 8, Costs(1, 0.2, 1.0)) == "gp"             # 8 × 0.2 s ≥ 1 s
    assert suggester("GAUSSIAN_PROCESS_BANDIT").method(tried, 2, Costs(2, 4.0, 1.5)) == "gp"


def test_costs_are_read_from_the_trials_and_size_the_asks() -> None:
    space = VizierSuggester(branch_of(make({"agg_max_num_seqs": [256, 512]})), [("objective", "max")], pareto=False,
                            algorithm="DEFAULT", seed=0, budget=4).space
    p = space.proposal(0)

    def trial(ask: int, seconds: float, by: str, suggest: float) -> Trial:
        return Trial("agg", 0, ask, Status.feasible, p.parallel, p.raw, p.selection, ask=ask, eval_seconds=seconds,
                     suggested_by=by, suggest_seconds=suggest)

    costs = Costs.of([trial(0, 1.0, "space-filling", 0.01), trial(1, 3.0, "gp", 9.0), trial(2, 2.0, "gp", 2.0),
                      trial(3, 2.5, "gp", 4.0)], 2)
    # medians; a space-filling ask is no model ask, and the first model ask (imports, compiles) is left out
    assert (costs.eval_s, costs.ask_s) == (2.25, 3.0)
    assert Costs.of([], 2) == Costs(2, None, search_costs.MODEL_ASK_PRIOR_S)
    assert Costs.of([trial(0, 1.0, "random", 5.0)], 2, model=False) == Costs(2, 1.0, 0.0)
    costs = Costs(2, 2.0, 3.0)
    # a 3 s ask takes a quarter (BATCH_SHARE) of the replays of 2 workers × 6 rounds × 1 s of wall per evaluation
    assert search_costs.BATCH_SHARE == 0.25
    assert costs.batch_size(16) == 12 and costs.batch_size(8) == 8 and costs.batch_size(2) == 2
    assert Costs(2, None).batch_size(8) == 2 and Costs(2, 2.0, 0.5).batch_size(16) == 2
    assert costs.model_pays(4) and not costs.model_pays(2)
    # 10 untried at 1 s of wall each, against 6 more evaluations (6 s) and 2 asks of 3 s: enumerate
    assert costs.enumeration_pays(10, 6, 4) and not costs.enumeration_pays(13, 6, 4)
    assert not Costs(2, None).enumeration_pays(1, 10, 2)


def test_space_filling_lasts_until_the_first_model_ask_is_covered() -> None:
    space = VizierSuggester(branch_of(make({"agg_max_num_seqs": [256, 512]})), [("objective", "max")], pareto=False,
                            algorithm="DEFAULT", seed=0, budget=4).space
    p = space.proposal(0)

    def trial(by: str, ask: int = 0) -> Trial:
        return Trial("agg", 0, ask, Status.feasible, p.parallel, p.raw, p.selection, ask=ask, eval_seconds=0.5,
                     suggested_by=by, suggest_seconds=0.01)

    assert (search_costs.FIRST_MODEL_ASK_S, search_costs.START_SHARE) == (3.0, 0.25)
    # 2 workers at 0.5 s per evaluation: the 2 pending candidates replay in 0.5 s, less than the first ask takes
    first = Costs.of([trial("space-filling")], 2, pending=["space-filling"] * 2, budget=64)
    assert (first.first_outcomes, first.pending, first.start_room) == (True, 2, 16 - 3) and first.starves()
    assert not first.model_pays(32)           # it would pay for itself, but the workers would wait for it
    assert first.batch_size(32) == 12         # 12 × 0.25 s of wall = 3 s: the next ask is covered
    assert first.batch_size(8) == 8
    # the start takes at most a quarter of the budget: 8 of 32, 3 picked, room for 4 more (a multiple of 2)
    small = Costs.of([trial("space-filling")], 2, pending=["space-filling"] * 2, budget=32)
    assert small.starves() and small.batch_size(32) == 4
    assert not Costs.of([trial("space-filling")], 2, pending=["space-filling"] * 2, budget=16).starves()
    covered = Costs.of([trial("space-filling")], 2, pending=["space-filling"] * 12, budget=64)
    assert not covered.starves() and covered.model_pays(12)
    # decided once, on the first outcomes: the next pick asks the model even if the evaluations got faster
    later = Costs.of([trial("space-filling", 0), trial("space-filling", 1)], 2, pending=["space-filling"] * 2,
                     budget=64)
    assert not later.first_outcomes and not later.starves() and later.model_pays(2 * 4)
    # once the branch has a model ask, pending or known, its later asks are sized as before
    assert not Costs.of([trial("space-filling")], 2, pending=["gp"], budget=64).starves()
    assert not Costs.of([trial("gp")], 2, budget=64).starves()
    assert Costs.of([trial("gp")], 2, budget=64).batch_size(32) == 2 * math.ceil(1.0 / (0.25 * 0.25 * 2))
    # no model, nothing to cover; nothing measured yet, nothing to size it with
    assert not Costs.of([trial("space-filling")], 2, model=False, budget=64).starves()
    assert not Costs.of([], 2, budget=64).starves()


@pytest.mark.slow
@pytest.mark.parametrize("first_ask_s", [3.0, 0.0])
def test_the_search_space_fills_a_batch_to_cover_its_first_model_ask(monkeypatch: pytest.MonkeyPatch,
                                                                      first_ask_s: float) -> None:
    # the model pays and batches hold one candidate per worker; only the cover rule is left to decide
    keep_the_model_on(monkeypatch)
    monkeypatch.setattr(search_costs, "FIRST_MODEL_ASK_S", first_ask_s)
    config = make(sweep={"candidates_per_round": 4, "max_rounds": 3, "seed": 0})
    history = search(branch_of(config), SearchContext(config, None, None)).trials
    by_ask = {t.ask: t.suggested_by for t in history}
    # one worker, budget 12: the start may take a quarter, 3; two blind picks leave room for one more
    covered = ["space-filling", "space-filling", "space-filling", "gp"]
    assert [by_ask[a] for a in range(4)] == (covered if first_ask_s else covered[:2] + ["gp", "gp"])


def test_a_pending_candidate_is_never_suggested_again() -> None:
    config = make({"agg_max_num_seqs": [256, 512]}, sweep={"candidates_per_round": 4, "seed": 1})
    branch = branch_of(config)
    done = search(branch, SearchContext(config, None, None)).trials[:4]
    for algorithm in ("DEFAULT", "GAUSSIAN_PROCESS_BANDIT", "RANDOM_SEARCH", "QUASI_RANDOM_SEARCH"):
        suggester = VizierSuggester(branch, [("objective", "max")], pareto=False, algorithm=algorithm, seed=1,
                                    budget=24)
        costs = Costs(2, 10.0, 0.1)  # the model pays
        free = suggester.suggest(8, done, [], step=3, costs=costs)
        pending = free[:5]
        picks = suggester.suggest(8, done, pending, step=3, costs=costs)
        taken = {p.index for p in pending} | suggester.space.seen(done)
        assert len(picks) == 8 and not {p.index for p in picks} & taken, algorithm
        assert len({p.index for p in picks}) == 8


def test_search_task_resumes_a_finished_branch_without_replaying(tmp_path: Path) -> None:
    from tasks.search import search_task
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
    first, = search_task.fn(run, [branch], context, first_eval, EvalCache())
    assert len(first_eval.evaluated) == 2 and RunDir(tmp_path).has("trials")
    again_eval = CountingEvaluator()
    again, = search_task.fn(run, [branch], context, again_eval, EvalCache())
    assert again_eval.evaluated == [] and [t.params for t in again.trials] == [t.params for t in first.trials]
    stored = RunDir(tmp_path).rows("trials")
    assert len(stored) == len(first.trials) and {r["round"] for r in stored} == {0}


def test_trial_rows_have_fixed_columns_and_read_back_equal() -> None:
    from spica_core.run.catalog import CATALOG

    config = make(space={"deployment_mode": ["agg"], "parallel_configs": [{"tp": 2}]},
                  sweep={"policy": "thorough"})
    result = search(branch_of(config), SearchContext(config, None, None))
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


class Crash(Exception):
    """A crash of the sweep process (raised from the callback that runs after a trial is written)."""


def crash_after(n: int) -> Any:
    seen: list[Trial] = []

    def on_result(trial: Trial) -> None:
        seen.append(trial)
        if len(seen) == n:
            raise Crash()

    return on_result


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", ["DEFAULT", "RANDOM_SEARCH"])
def test_a_resumed_sweep_suggests_exactly_what_the_uninterrupted_one_did(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, algorithm: str) -> None:
    """Two workers, so replays finish in whatever order; the asks must not depend on it. A sweep crashed
    after its 5th trial was written resumes and asks, evaluates and records what the straight one did."""
    from spica_core.config.policies import filter_for_goal
    from spica_core.evaluate import EvalPool
    from spica_core.run.identity import identify
    from tasks.search import search_task
    from tasks.validate import ValidatedRun

    keep_the_model_on(monkeypatch)
    config = make(space={"deployment_mode": ["agg"], "agg_max_num_seqs": [256, 512],
                         "agg_gpu_memory_utilization": 0.3},
                  sweep={"candidates_per_round": 3, "max_rounds": 3, "algorithm": algorithm, "seed": 4,
                         "parallel_evals": 2})
    branch = branch_of(config)
    context = SearchContext(config, None, None)

    def run_in(folder: Path) -> ValidatedRun:
        return ValidatedRun(config, config, filter_for_goal(config), identify(config, None), RunDir(folder), None)

    class CountingPool(EvalPool):
        def __init__(self) -> None:
            super().__init__(2, 120)
            self.evaluated: list[EvalRequest] = []

        def submit(self, request: EvalRequest) -> int:
            self.evaluated.append(request)
            return super().submit(request)

    with CountingPool() as pool:
        straight, = search_task.fn(run_in(tmp_path / "a"), [branch], context, pool, EvalCache())
        assert any(t.status is Status.infeasible for t in straight.trials)  # TP1 has no KV room at 30 %
        with pytest.raises(Crash):
            search_task.fn(run_in(tmp_path / "b"), [branch], context, pool, EvalCache(), crash_after(5))
    kept = [Trial.from_row(r) for r in RunDir(tmp_path / "b").rows("trials")]
    assert len(kept) == 5
    with CountingPool() as pool:  # a new process would start a new pool (the sweep's width is part of the asks)
        resumed, = search_task.fn(run_in(tmp_path / "b"), [branch], context, pool, EvalCache.of(kept))
    assert [(t.trial, t.ask, t.round, t.params, t.status) for t in resumed.trials] == \
        [(t.trial, t.ask, t.round, t.params, t.status) for t in straight.trials]
    assert len(pool.evaluated) == len(straight.trials) - 5  # nothing written is evaluated again
    assert [t.suggested_by for t in straight.trials].count("gp" if algorithm == "DEFAULT" else "random") >= 4


@pytest.mark.slow
def test_a_worker_that_frees_up_starts_a_replay_before_its_batch_has_finished() -> None:
    from spica_core.evaluate import EvalPool

    class Timed(EvalPool):
        """The real pool, noting when each evaluation was sent and when its outcome came back. The first ask's
        last outcome (ticket 2) is held back until ticket 3 is sent, or 60 s: the order is then no race between
        the next ask and a fast replay. A loop with a barrier between asks would wait out the 60 s and fail."""

        def __init__(self) -> None:
            super().__init__(2, 120)
            self.sent: dict[int, float] = {}
            self.back: dict[int, float] = {}
            self.held: list[tuple[int, Outcome]] = []
            self.release_at = 0.0

        def submit(self, request: EvalRequest) -> int:
            ticket = super().submit(request)
            self.sent[ticket] = time.perf_counter()
            return ticket

        def poll(self, timeout: float) -> list[tuple[int, Outcome]]:
            done = super().poll(timeout)
            if any(ticket == 2 for ticket, _ in done):
                self.held = [(t, o) for t, o in done if t == 2]
                self.release_at = time.perf_counter() + 60
                done = [(t, o) for t, o in done if t != 2]
            if self.held and (3 in self.sent or time.perf_counter() > self.release_at):
                done, self.held = done + self.held, []
            elif self.held and not done:
                time.sleep(min(timeout, 0.05))  # the real pool returns at once when it runs nothing
            self.back.update({ticket: time.perf_counter() for ticket, _ in done})
            return done

        def in_flight(self) -> int:
            return super().in_flight() + len(self.held)

    config = make(space={"agg_max_num_seqs": [256, 512]},
                  sweep={"candidates_per_round": 4, "max_rounds": 2, "algorithm": "QUASI_RANDOM_SEARCH",
                         "parallel_evals": 2})
    with Timed() as pool:
        result = search_branch(branch_of(config), SearchContext(config, None, None), pool, EvalCache())
    assert len(result.trials) == 8 and sorted(pool.sent) == list(range(1, 9))  # tickets in trial order
    ask = {t.trial + 1: t.ask for t in result.trials}
    # with a barrier between asks, no evaluation would start while one of an earlier ask still runs
    started_early = [b for b in pool.sent if any(ask[c] < ask[b] and pool.sent[b] < pool.back[c] for c in pool.sent)]
    assert started_early, (ask, pool.sent, pool.back)
    assert ask[3] > ask[2] and pool.sent[3] < pool.back[2]  # sent when ticket 1's worker freed, not after the hold


def test_tally_sums_replays_and_counts_each_asks_optimizer_time_once() -> None:
    space = VizierSuggester(branch_of(make({"agg_max_num_seqs": [256, 512]})), [("objective", "max")], pareto=False,
                            algorithm="DEFAULT", seed=0, budget=4).space
    p = space.proposal(0)

    def trial(ask: int, replay: float, hit: bool = False) -> Trial:
        return Trial("agg", ask, 0, Status.feasible, p.parallel, p.raw, p.selection, ask=ask, cache_hit=hit,
                     replay_seconds=replay, suggest_seconds=1.5 if ask == 0 else 0.25)

    tally = Tally.of([trial(0, 0.5), trial(0, 0.25), trial(1, 1.0), trial(1, 1.0, hit=True)])
    assert (tally.optimizer_seconds, tally.replay_seconds) == (1.75, 1.75)


def test_branches_searched_together_ask_what_each_asks_alone_and_share_the_workers() -> None:
    """One branch's candidates replay while the other's wait for their outcomes (searched one after the other,
    no disagg replay would start before agg's last one is back), and each branch's trials are the ones it
    gets when searched alone: which trials a branch asks depends only on its own outcomes."""
    from spica_core.evaluate import EvalPool
    from spica_core.search import search_branches

    class HoldsAgg(EvalPool):
        """Hands agg's outcomes back only once a disagg candidate was sent (or after a minute): searched one
        after the other, agg could never finish, so no disagg candidate would be sent before agg's last result."""

        def __init__(self) -> None:
            super().__init__(2, 120)
            self.sent: list[str] = []          # the mode of each submission, in order
            self.held: list[tuple[int, Outcome]] = []
            self.deadline = time.monotonic() + 60
            self.last_agg_back_after: int | None = None   # submissions made before agg's last outcome was handed

        def submit(self, request: EvalRequest) -> int:
            self.sent.append(request.eval_id.split("-")[0])
            return super().submit(request)

        def poll(self, timeout: float) -> list[tuple[int, Outcome]]:
            done = super().poll(timeout)
            agg = [d for d in done if d[1].eval_id.startswith("agg")]
            self.held += agg
            out = [d for d in done if d not in agg]
            if "disagg" in self.sent or time.monotonic() > self.deadline:
                out, self.held = out + self.held, []
                if agg or any(d[1].eval_id.startswith("agg") for d in out):
                    self.last_agg_back_after = len(self.sent)
            return out

    config = make(space={"deployment_mode": ["agg", "disagg"], "agg_max_num_seqs": [256, 512]},
                  sweep={"candidates_per_round": 2, "max_rounds": 2, "algorithm": "QUASI_RANDOM_SEARCH",
                         "parallel_evals": 2})
    branches = [branch_of(config, "agg"), branch_of(config, "disagg")]
    context = SearchContext(config, None, None)

    def key(trials: Sequence[Trial]) -> list[tuple[Any, ...]]:
        return [(t.mode, t.trial, t.ask, t.round, t.params, t.status) for t in trials]

    with HoldsAgg() as pool:
        together = search_branches(branches, context, pool, EvalCache())
    with EvalPool(2, 120) as pool_alone:  # as wide: the workers are part of what is asked
        alone = [search_branch(b, SearchContext(config, None, None), pool_alone, EvalCache()) for b in branches]
    assert [key(r.trials) for r in together] == [key(r.trials) for r in alone]
    assert [len(r.trials) for r in together] == [4, 4]
    # a disagg candidate was sent while agg still waited for outcomes: the branches shared the workers
    assert "disagg" in pool.sent[:pool.last_agg_back_after], pool.sent


def test_an_ask_s_recorded_seconds_leave_out_its_wait_for_another_model_ask() -> None:
    """Model asks take turns (jax_setup.MODEL_ASK): what an ask records, and Costs reads, is what it cost, not its
    wait for the turn (the start's tracing, or another branch's ask)."""
    from spica_core.search import rounds

    class Waits:
        fits_model = True
        waited = 0.0

        def suggest(self, count: int, *args: Any, **kwargs: Any) -> list[Any]:
            started = time.perf_counter()
            time.sleep(0.5)
            self.waited = time.perf_counter() - started - 0.1  # all but 0.1 s of it waiting for the turn
            return ["proposal"] * count

    running = rounds._Ask(number=1, first=2, rounds=(0, 0), known=["a known trial"], pending=[],  # type: ignore[list-item]
                          costs=search_costs.Costs.of([], 2), exploit=True).start(Waits())  # type: ignore[arg-type]
    assert running.done.wait(10) and running.proposals == ["proposal", "proposal"]
    assert 0.05 <= running.seconds < 0.3

"""The sweep flow: composition only; every stage is a task in ``tasks/`` writing one artifact."""
from __future__ import annotations

from typing import Any

from prefect import flow

from spica_core.evaluate.evaluator import make_evaluator
from spica_core.search.rounds import EvalCache, SearchContext, Tally, round_plan
from tasks.progress import SweepProgress
from tasks.search import load_predictor_task, rank_task, round_task, trial_rows
from tasks.space import enumerate_branches_task, kv_filter_task
from tasks.validate import validate_config


@flow(name="spica-sweep", log_prints=True)
def sweep(config_path: str, runs_root: str = "runs", run_dir: str | None = None, seed: int | None = None,
          show_progress: bool = False) -> dict[str, Any]:
    """validate → enumerate branches → KV filter, load-predictor sub-sweep → Vizier rounds → rank / Pareto."""
    run = validate_config(config_path, runs_root, run_dir, seed)
    config = run.search_config
    branch_set = kv_filter_task(enumerate_branches_task(config, run.run_dir), run.run_dir)
    predictor = load_predictor_task(run)
    context = SearchContext(config, str(run.trace_file) if run.trace_file else None, predictor)
    cache = EvalCache.from_rows(trial_rows(run.run_dir))
    rounds, target = round_plan(branch_set.branches, config)
    progress = SweepProgress(target, config.goal.is_pareto, enabled=show_progress)
    for row in trial_rows(run.run_dir):  # a resumed run starts from what is already done
        progress.count(row)
    stalls: list[str] = []
    with make_evaluator(config.sweep.parallel_evals, config.sweep.max_eval_seconds) as evaluator:
        for branch in branch_set.branches:
            for round_no in range(rounds[branch.mode]):
                result = round_task(run, branch, round_no, context, evaluator, cache, progress)
                if result.stalled:
                    stalls.append(result.message)
                    break
    progress.draw(final=True)
    ranking = rank_task(run)
    return {"run_dir": str(run.run_dir.path), "run_id": run.identity.run_id, "ranking": ranking,
            "tally": Tally.of(trial_rows(run.run_dir)), "stalls": stalls, "pareto": config.goal.is_pareto,
            "warnings": list(branch_set.warnings) + ([f"dropped planner policies {run.policies.dropped}: "
                                                      f"{run.policies.reason}"] if run.policies.dropped else []),
            "objectives": [o.value for o in config.goal.objectives],
            "load_predictor": {"reason": predictor.reason, "winners": predictor.best_by_interval}}

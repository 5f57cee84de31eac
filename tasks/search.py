"""Stages 4–6: the load-predictor sub-sweep, one Vizier round of one branch, and rank / Pareto.

Each task reads the run folder first: a stage whose artifact already holds its result is not
recomputed, which is how a killed sweep resumes where it stopped.
"""
from __future__ import annotations

import json
from typing import Any, Callable

import pyarrow as pa
from prefect import task
from prefect.artifacts import create_table_artifact
from prefect.cache_policies import NO_CACHE
from prefect.context import TaskRunContext

from spica_core.run.catalog import RunDir
from spica_core.space.branches import Branch
from spica_core.predictors.subsweep import LOAD_PREDICTOR_SCHEMA, LoadPredictorResult, sweep_load_predictor
from spica_core.search.rounds import (
    RANKING_SCHEMA, TRIALS_SCHEMA, EvalCache, Evaluator, RoundResult, SearchContext, merge, ranking_rows,
    round_complete, run_round, run_thorough_round, stored_round,
)

from tasks.validate import ValidatedRun


@task(name="load-predictor sub-sweep", cache_policy=NO_CACHE, log_prints=True)
def load_predictor_task(run: ValidatedRun) -> LoadPredictorResult:
    rd = run.run_dir
    if rd.has("load_predictor"):
        return LoadPredictorResult.from_rows(rd.rows("load_predictor"))
    result = sweep_load_predictor(run.search_config, run.trace_file, run.policies.kept)
    rd.write("load_predictor", result.rows(), schema=LOAD_PREDICTOR_SCHEMA)
    if result.best_by_interval:
        winners = {k: v if isinstance(v, str) else json.dumps(v) for k, v in result.best_by_interval.items()}
        print(f"load predictor ({result.reason}): {winners}")
    return result


def trial_rows(rd: RunDir) -> list[dict[str, Any]]:
    return rd.rows("trials") if rd.has("trials") else []


def append_trials(rd: RunDir, rows: list[dict[str, Any]]) -> None:
    """Rewrite trials.parquet with the new rows appended (atomic: a crash keeps the old file)."""
    rd.write("trials", trial_rows(rd) + rows, schema=TRIALS_SCHEMA)


@task(name="vizier round", task_run_name="{branch.mode} round {round_no}", cache_policy=NO_CACHE)
def round_task(run: ValidatedRun, branch: Branch, round_no: int, context: SearchContext, evaluator: Evaluator,
               cache: EvalCache, on_result: Callable[[dict[str, Any]], None] | None = None) -> RoundResult:
    """Suggest → project → evaluate (parallel) → observe; each ask's rows are appended to trials.parquet
    as soon as they are evaluated, so an interrupted round resumes without repeating evaluations."""
    rows = trial_rows(run.run_dir)
    this_round = [r for r in rows if r["mode"] == branch.mode and r["round"] == round_no]
    sweep = context.config.sweep
    thorough = sweep.policy.value == "thorough"
    if this_round and (thorough or round_complete(this_round, sweep.per_round)):
        return stored_round(branch, round_no, this_round, context)  # done before: read, never re-evaluate
    history = [r for r in rows if r["mode"] == branch.mode and r["round"] < round_no]
    if thorough:
        result = run_thorough_round(branch, context, round_no, len(history), evaluator, cache, on_result)
        append_trials(run.run_dir, result.rows)
    else:
        result = run_round(branch, context, round_no, history, evaluator, cache, on_result, partial=this_round,
                           on_batch=lambda new: append_trials(run.run_dir, new))
    publish_table(f"spica-{branch.mode}-rounds", result.rows, TRIAL_COLUMNS,
                  f"run {run.identity.run_id}: {branch.mode} round {round_no} ({result.unique} unique successes)")
    if result.message:
        print(result.message)
    return result


def publish_table(key: str, rows: list[dict[str, Any]], columns: tuple[str, ...], description: str) -> None:
    """A table artifact for the Prefect UI (only inside a flow run; artifacts are versioned by key)."""
    if TaskRunContext.get() is None or not rows:
        return
    create_table_artifact(key=key, table=[{c: r.get(c) for c in columns} for r in rows], description=description)


TRIAL_COLUMNS = ("round", "trial", "status", "cache_hit", "backend", "parallel", "used_gpus", "score", "reason")
RANK_COLUMNS = ("rank", "mode", "backend", "parallel", "used_gpus", "score", "objectives_json")


@task(name="rank / pareto", cache_policy=NO_CACHE)
def rank_task(run: ValidatedRun) -> list[dict[str, Any]]:
    rows = trial_rows(run.run_dir)
    ranked = ranking_rows(merge(rows, run.search_config))
    run.run_dir.write("ranking", pa.Table.from_pylist(ranked, schema=RANKING_SCHEMA))
    publish_table("spica-ranking", ranked, RANK_COLUMNS, f"run {run.identity.run_id}: ranking / Pareto front")
    return ranked

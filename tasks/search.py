"""Stages 5–6: one search round of one branch (``trials.parquet``) and rank / Pareto (``ranking.parquet``).

The round loop itself decides what a round still needs (``spica_core.search.run_round``); these
tasks only read the run folder, call it, append what it evaluated and publish UI tables.
"""
from __future__ import annotations

from typing import Callable

from prefect.runtime import task_run

from spica_core.evaluate import Evaluator
from spica_core.run.catalog import CATALOG, RunDir
from spica_core.run.fingerprint import file_fingerprint
from spica_core.search import EvalCache, RankedCandidate, RoundResult, SearchContext, Trial, rank_trials, run_round
from spica_core.space.branches import Branch

from tasks.stage import stage
from tasks.ui import publish_ranking, publish_round
from tasks.validate import ValidatedRun


def trials_fingerprint(context: SearchContext) -> str:
    return CATALOG["trials"].fingerprint(context=context.key)


def stored_trials(rd: RunDir, context: SearchContext) -> list[Trial]:
    """The run's trials so far, if they were searched in this context (else the search starts over)."""
    if not rd.fresh("trials", trials_fingerprint(context)):
        return []
    return [Trial.from_row(r) for r in rd.rows("trials")]


def _round_name() -> str:
    """Rounds are numbered from 1 for people (``round`` is 0-based in the artifacts' rows)."""
    parameters = task_run.parameters
    return f"{parameters['branch'].mode} round {parameters['round_no'] + 1}"


@stage("search round", task_run_name=_round_name, retries=1)
def round_task(run: ValidatedRun, branch: Branch, round_no: int, context: SearchContext, evaluator: Evaluator,
               cache: EvalCache, on_result: Callable[[Trial], None] | None = None) -> RoundResult:
    """Pick untried candidates → evaluate (parallel) → observe; each ask's trials are appended to trials.parquet
    as soon as they are evaluated, so an interrupted round resumes without repeating evaluations."""
    rd = run.run_dir
    inputs = trials_fingerprint(context)
    if rd.has("trials") and not rd.fresh("trials", inputs):
        rd.write("trials", [], inputs)  # searched in another context: its scores do not carry over
    result = run_round(branch, context, round_no, stored_trials(rd, context), evaluator, cache, on_result,
                       on_batch=lambda new: rd.append("trials", [t.to_row() for t in new], inputs))
    publish_round(run.identity.run_id, run.search_config, branch.mode, round_no, result.trials,
                  stored_trials(rd, context))
    if result.message:
        print(result.message)
    return result


@stage("rank / pareto", retries=2)
def rank_task(run: ValidatedRun, context: SearchContext) -> list[RankedCandidate]:
    """Recomputed only when the trials changed: the ranking's input is the trials artifact itself."""
    rd = run.run_dir
    trials = stored_trials(rd, context)
    inputs = CATALOG["ranking"].fingerprint(trials=file_fingerprint(rd.artifact("trials")) if trials else None)
    if rd.fresh("ranking", inputs):
        return [RankedCandidate.from_row(r) for r in rd.rows("ranking")]
    ranked = rank_trials(trials, run.search_config)
    rows = [r.to_row() for r in ranked]
    rd.write("ranking", rows, inputs)
    publish_ranking(run.identity.run_id, run.search_config, ranked, str(rd.path))
    return ranked

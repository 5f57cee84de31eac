"""Stages 5–6: the search of the branches (``trials.parquet``) and rank / Pareto (``ranking.parquet``).

The search loop itself decides what each branch asks and when it is done (``spica_core.search.search_branches``);
these tasks only read the run folder, call it, append what it evaluated and publish UI tables.
"""
from __future__ import annotations

from typing import Callable, Sequence

from prefect.runtime import task_run

from spica_core.evaluate import Evaluator
from spica_core.run.catalog import CATALOG, RunDir
from spica_core.store import file_fingerprint
from spica_core.search import BranchResult, EvalCache, RankedCandidate, SearchContext, Trial, rank_trials, search_branches
from spica_core.space.branches import Branch

from tasks.stage import stage
from tasks.ui import publish_branch, publish_ranking
from tasks.validate import ValidatedRun


def trials_fingerprint(context: SearchContext) -> str:
    return CATALOG["trials"].fingerprint(context=context.key)


def stored_trials(rd: RunDir, context: SearchContext) -> list[Trial]:
    """The run's trials so far, if they were searched in this context (else the search starts over)."""
    if not rd.fresh("trials", trials_fingerprint(context)):
        return []
    return [Trial.from_row(r) for r in rd.rows("trials")]


def _search_name() -> str:
    return "search " + " + ".join(b.mode for b in task_run.parameters["branches"])


@stage("search", task_run_name=_search_name, retries=1)
def search_task(run: ValidatedRun, branches: Sequence[Branch], context: SearchContext, evaluator: Evaluator,
                cache: EvalCache, on_result: Callable[[Trial], None] | None = None,
                on_wait: Callable[[], None] | None = None) -> list[BranchResult]:
    """Ask → evaluate (parallel, overlapping) → observe, every branch to its end, the branches side by side
    on one pool of workers; every trial is appended to trials.parquet as soon as it finishes, so an
    interrupted search resumes without repeating evaluations."""
    rd = run.run_dir
    inputs = trials_fingerprint(context)
    if rd.has("trials") and not rd.fresh("trials", inputs):
        rd.write("trials", [], inputs)  # searched in another context: its scores do not carry over

    def record(trial: Trial) -> None:
        rd.append("trials", [trial.to_row()], inputs)
        if on_result is not None:
            on_result(trial)

    def ended(branch: Branch, result: BranchResult) -> None:
        publish_branch(run.identity.run_id, run.search_config, branch.mode, result.trials, stored_trials(rd, context))
        if result.message:
            print(result.message)

    return search_branches(branches, context, evaluator, cache, stored_trials(rd, context), record, on_wait, ended)


@stage("rank / pareto", retries=2)
def rank_task(run: ValidatedRun, context: SearchContext) -> list[RankedCandidate]:
    """Recomputed only when the trials changed: the ranking's input is the trials artifact itself."""
    rd = run.run_dir
    trials = stored_trials(rd, context)
    inputs = CATALOG["ranking"].fingerprint(trials=file_fingerprint(rd.artifact("trials")) if trials else None)
    if rd.fresh("ranking", inputs):  # (not kept_or_made: the ranking is published once it is written)
        return [RankedCandidate.from_row(r) for r in rd.rows("ranking")]
    ranked = rank_trials(trials, run.search_config)
    rd.write("ranking", [r.to_row() for r in ranked], inputs)
    publish_ranking(run.identity.run_id, run.search_config, ranked, str(rd.path))
    return ranked

"""Stages 5–6: the search of the branches (``trials.parquet``) and rank / Pareto (``ranking.parquet``).

The search loop itself decides what each branch asks and when it is done (``spica_core.search.search_branches``);
these tasks only read the run folder, call it, append what it evaluated and publish UI tables.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Callable, Sequence

from prefect.runtime import task_run

from spica_core.evaluate import Evaluator
from spica_core.run.catalog import CATALOG, RunDir
from spica_core.store import file_fingerprint
from spica_core.errors import CalibrationFileError
from spica_core.search import (
    BranchResult, EvalCache, RankedCandidate, SearchContext, Trial, cache_key, rank_trials, recalibrated,
    search_branches,
)
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


def reuse_replays(run: ValidatedRun, context: SearchContext) -> str | None:
    """A calibrated run with no trials of its own starts from the same config's uncalibrated run
    (``RUNS_ROOT/<its run id>``): every trial that run holds, each feasible one scored again under the calibration
    from the requests its replay kept. The search then goes on from there, as on a resume. Returns what it did,
    for the summary (None: there was nothing to re-use)."""
    rd, uncalibrated = run.run_dir, run.identity.uncalibrated_run_id
    if context.calibration is None or run.runs_root is None or uncalibrated is None or rd.has("trials"):
        return None
    plain = replace(context, calibration=None)
    source = RunDir(run.runs_root / uncalibrated)
    if not source.readable("trials") or not source.fresh("trials", trials_fingerprint(plain)):
        return None
    trials = [Trial.from_row(r) for r in source.rows("trials")]
    try:
        scored = recalibrated(trials, context.config, context.calibration)
    except CalibrationFileError as exc:
        return f"replayed anew, not re-using the replays of {source.path}: {exc}"
    rows = [replace(t, cache_key=cache_key(context.key, t.selection, t.parallel)).to_row() for t in scored]
    rd.write("trials", rows, trials_fingerprint(context))
    replays = sum(1 for t in scored if t.is_evaluated_success)
    return f"re-used {replays} replays of {source.path} (the same config without the calibration), scored again"


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

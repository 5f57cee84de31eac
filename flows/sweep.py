"""The sweep flow: composition only; every stage is a task in ``tasks/`` writing one artifact."""
from __future__ import annotations

from prefect import flow
from prefect.states import Failed, State

from spica_core.config.model import SmartSearchConfig
from spica_core.errors import SpicaError
from spica_core.evaluate import make_evaluator
from spica_core.run import lock
from spica_core.run.catalog import StageName
from spica_core.search import (
    EvalCache, SearchContext, SweepProgress, SweepSummary, Tally, Trial, optimizer_for, round_plan,
)
from tasks.emit import emit_task
from tasks.load_predictor import load_predictor_task
from tasks.search import rank_task, reuse_replays, search_task, stored_trials
from tasks.space import enumerate_branches_task, kv_filter_task
from tasks.stage import one_line
from tasks.ui import UIProgress, publish_summary
from tasks.validate import ValidatedRun, validate_config


@flow(name="spica-sweep", log_prints=True)
def sweep(config: SmartSearchConfig | None = None, config_path: str | None = None, runs_root: str = "runs",
          run_dir: str | None = None, seed: int | None = None, from_stage: StageName | None = None,
          warm_start: str | None = None, cluster: str | None = None, calibration: str | None = None,
          show_progress: bool = False) -> SweepSummary | State:
    """Find the best Dynamo deployment: validate → enumerate branches → KV filter, load-predictor sub-sweep →
    search rounds → rank / Pareto → emit candidates, manifests and the report.

    Args:
        config: The config itself (model, GPU and budget, knobs to search, workload, goal, sweep). Give this
            or config_path. Relative paths in it (workload.trace_path) resolve against the working
            directory of the process that runs the flow (for `spica serve`, where it was started).
        config_path: A config YAML file instead of config, relative to that working directory; paths in
            the file resolve against the file's own folder.
        runs_root: Parent folder of the run folders; a run goes to RUNS_ROOT/RUN_ID/.
        run_dir: Write the run to this folder instead of RUNS_ROOT/RUN_ID/.
        seed: Overrides sweep.seed (another seed is another run).
        from_stage: Recompute this stage and every stage computed from it (config, branches, shapes,
            load_predictor, trials, ranking, candidates); the others are read back from the run folder.
        warm_start: An earlier run folder (e.g. of the same config on an older trace): its top candidates
            are evaluated first, on this run's trace, and its trials are a GAUSSIAN_PROCESS_BANDIT study's
            prior; no score is carried over into this run.
        cluster: Overrides sweep.cluster: run the evaluations on an existing Dask (tcp://HOST:PORT) or Ray
            (ray://HOST:PORT) cluster instead of local processes; not part of the run's identity.
        calibration: Overrides goal.calibration: a calibration file written by `spica calibrate`. Its content
            is part of the run's identity; the same config's uncalibrated run lends it every replay it holds.
        show_progress: Draw a progress bar on the terminal (for `spica sweep`; the UI has its own artifact).
    """
    try:
        # validate locks the run folder
        run = validate_config(config_path, runs_root, run_dir, seed, config, from_stage, warm_start, cluster,
                              calibration)
        try:
            return _search_and_rank(run, show_progress)
        finally:
            lock.release(run.run_dir.path)
    except SpicaError as exc:  # bad input: the run fails with the error's text, not a traceback
        return Failed(message=one_line(exc), data=exc)


def _search_and_rank(run: ValidatedRun, show_progress: bool) -> SweepSummary:
    config = run.search_config
    sweep_config = config.sweep
    # Its studies' process imports and traces while the stages before the search run (`spica sweep` started it).
    optimizer = optimizer_for(config)
    # Opened first, so that a cluster that cannot be reached fails the run before any stage's work.
    with make_evaluator(sweep_config.workers, sweep_config.max_eval_seconds, sweep_config.cluster) as evaluator:
        branch_set = kv_filter_task(enumerate_branches_task(config, run.run_dir), run.run_dir)
        predictor = load_predictor_task(run)
        context = SearchContext(config, str(run.trace_file) if run.trace_file else None, predictor,
                                warm_start=run.warm_start, optimizer=optimizer, calibration=run.calibration)
        reused = reuse_replays(run, context)  # a calibrated run starts from its uncalibrated run's replays
        done = stored_trials(run.run_dir, context)  # a resumed run starts from what is already done
        cache = EvalCache.of(done)
        _, target = round_plan(branch_set.branches, config)
        if len(done) < target:
            evaluator.spawn()  # the workers warm up while the flow reads back its stages and asks first
        progress = SweepProgress(target, config.goal.is_pareto, enabled=show_progress,
                                 required_attainment=config.goal.required_attainment)
        ui = UIProgress(run.identity.run_id, config, target)
        for trial in done:
            progress.count(trial)
            ui.count(trial)

        def on_result(trial: Trial) -> None:
            progress(trial)
            ui(trial)

        results = search_task(run, branch_set.branches, context, evaluator, cache, on_result, progress.tick)
        stalls = [r.message for r in results if r.stalled]
        progress.draw(final=True)
        ui.update()
        ranking = rank_task(run, context)
        trials = stored_trials(run.run_dir, context)
        emitted = emit_task(run, ranking, trials, evaluator=evaluator)  # its extra replays on the same workers
    tally = Tally.of(trials)
    publish_summary(run.identity.run_id, config, emitted.records, tally, str(run.run_dir.path),
                    str(emitted.report.markdown) if emitted.report else None)
    dropped = ([f"dropped planner policies {run.policies.dropped}: {run.policies.reason}"]
               if run.policies.dropped else [])
    return SweepSummary(run_dir=str(run.run_dir.path), run_id=run.identity.run_id, pareto=config.goal.is_pareto,
                        objectives=tuple(o.value for o in config.goal.objectives), ranking=emitted.records,
                        required_attainment=config.goal.required_attainment,
                        tally=tally, stalls=tuple(stalls),
                        warnings=(*branch_set.warnings, *dropped), notes=(reused,) if reused else (),
                        load_predictor_reason=predictor.reason,
                        load_predictor_winners=dict(predictor.best_by_interval),
                        report=str(emitted.report.markdown) if emitted.report else None,
                        manifests=tuple(str(p) for p in emitted.manifests.values()),
                        plans=tuple(str(p) for p in emitted.plans.values()), refused=dict(emitted.refused))

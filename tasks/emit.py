"""Last stage: candidate files, DynamoGraphDeployment manifests and the report, from the ranking."""
from __future__ import annotations

from prefect.artifacts import create_link_artifact, create_markdown_artifact

from spica_core.emit import EmitOptions, Emitted, emit_outputs, load_records, provenance_of, records_of
from spica_core.emit.rechecks import recheck
from spica_core.evaluate import Evaluator
from spica_core.run.catalog import CATALOG
from spica_core.store import file_fingerprint
from spica_core.search import RankedCandidate, Tally, Trial
from tasks.stage import stage
from tasks.ui import artifact_key, in_flow_run
from tasks.validate import ValidatedRun


@stage("emit candidates", retries=2)
def emit_task(run: ValidatedRun, ranking: list[RankedCandidate], trials: list[Trial],
              options: EmitOptions | None = None, evaluator: Evaluator | None = None) -> Emitted:
    """Recomputed when the ranking or the options changed; the companion files are rewritten with it. The
    extra replays (headroom, spread, confidence check) run on ``evaluator``, the sweep's workers."""
    rd = run.run_dir
    options = options or EmitOptions.for_goal(run.search_config.goal)
    ranking_fp = file_fingerprint(rd.artifact("ranking")) if rd.has("ranking") else None
    inputs = CATALOG["candidates"].fingerprint(ranking=ranking_fp, options=options.fingerprint_value())
    tally = Tally.of(trials)
    provenance = provenance_of(rd, run.identity, run.config, ranking)
    emitted = Emitted.on_disk(rd.path, load_records(rd), options) if rd.fresh("candidates", inputs) else None
    if emitted is None:
        records = records_of(ranking, tally, provenance)
        chosen = [r.rank for r in options.chosen(records)]
        records, confidence = recheck(records, chosen, run.search_config, run.trace_file, evaluator,
                                      calibration=run.calibration)
        rd.write("candidates", [r.to_row() for r in records], inputs)
        emitted = emit_outputs(rd, records, options, config=run.search_config, trials=trials, tally=tally,
                               provenance=provenance, trace_file=run.trace_file, confidence=confidence)
    if in_flow_run() and emitted.report is not None:
        run_id = run.identity.run_id
        create_markdown_artifact(key=artifact_key(run_id, "report"), markdown=emitted.report.markdown.read_text(),
                                 description=f"run {run_id}: report ({emitted.report.markdown})")
        create_link_artifact(key=artifact_key(run_id, "run-folder"), link=rd.path.resolve().as_uri(),
                             description=f"run {run_id}: the run folder")
    return emitted

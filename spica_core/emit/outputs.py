"""The emit stage's work: candidate files, manifests and the report, from a finished ranking.

``spica sweep`` runs it as the flow's last task and ``spica emit`` re-runs it on a run folder
without replaying anything, so everything it needs is read from the folder's artifacts.
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, replace
from importlib import metadata
from pathlib import Path
from typing import Any, Sequence

from spica_core.config.goal import OptimizationGoal
from spica_core.config.model import SmartSearchConfig
from spica_core.emit.bench_plans import PLANS_DIR, write_plans
from spica_core.emit.aic_estimate import AICEstimate, aic_estimate
from spica_core.emit.rechecks import ConfidenceCheck
from spica_core.emit.crd import check_manifest
from spica_core.emit.manifest_options import ManifestOptions
from spica_core.emit.manifests import manifest, manifest_yaml
from spica_core.emit.records import CandidateRecord, Provenance, to_csv
from spica_core.emit.report import ReportFiles, ReportInputs, write_report
from spica_core.emit.report_workload import trace_profile
from spica_core.errors import ManifestError, RunDirError
from spica_core.run.catalog import CATALOG, RunDir
from spica_core.store import write_file
from spica_core.run.identity import RunIdentity, config_from_row
from spica_core.evaluate.calibration import Calibration
from spica_core.search.ranking import RankedCandidate, rank_trials
from spica_core.search.recalibrate import recalibrated
from spica_core.search.trials import Tally, Trial

DEFAULT_TOP = 3
MANIFESTS_DIR = "manifests"


@dataclass(frozen=True)
class EmitOptions:
    """Which candidates get manifests, and the deployment parameters the manifests take."""

    top: int = DEFAULT_TOP
    all: bool = False                  # every point of a front (or every ranked candidate)
    manifest: ManifestOptions = field(default_factory=ManifestOptions)

    @classmethod
    def for_goal(cls, goal: OptimizationGoal, top: int = DEFAULT_TOP, all_: bool = False,
                 **manifest: Any) -> EmitOptions:
        """The manifests' planner gets the target (and SLA) the replayed planner was scored under."""
        return cls(top, all_, ManifestOptions.for_goal(goal, **manifest))

    def fingerprint_value(self) -> dict[str, Any]:
        return {"top": self.top, "all": self.all, "manifest": asdict(self.manifest)}

    def chosen(self, records: Sequence[CandidateRecord]) -> list[CandidateRecord]:
        return list(records) if self.all else list(records[:self.top])


@dataclass(frozen=True)
class Emitted:
    records: tuple[CandidateRecord, ...]
    manifests: dict[int, Path]        # rank -> manifest file
    refused: dict[int, str]           # rank -> why no manifest could express it
    report: ReportFiles | None
    plans: dict[int, Path] = field(default_factory=dict)   # rank -> benchmark plan (``bench_plans``)

    @classmethod
    def on_disk(cls, folder: Path, records: Sequence[CandidateRecord], options: EmitOptions) -> Emitted | None:
        """What an earlier emit with these options left in ``folder``; None if any file is missing."""
        chosen = [r.rank for r in options.chosen(records)]
        manifests = {rank: folder / MANIFESTS_DIR / f"rank-{rank}.yaml" for rank in chosen}
        refusals = {rank: folder / MANIFESTS_DIR / f"rank-{rank}.refused.txt" for rank in chosen}
        if not all(manifests[r].is_file() or refusals[r].is_file() for r in chosen):
            return None
        plans = {rank: folder / PLANS_DIR / f"rank-{rank}.sh" for rank in chosen if manifests[rank].is_file()}
        unplanned = {rank: folder / PLANS_DIR / f"rank-{rank}.txt" for rank in plans}
        if not all(plans[r].is_file() or unplanned[r].is_file() for r in plans):
            return None
        markdown, html = folder / "report.md", folder / "report.html"
        if not (markdown.is_file() and html.is_file() and (folder / "candidates.json").is_file()
                and (folder / "candidates.csv").is_file()):
            return None
        return cls(tuple(records), {r: p for r, p in manifests.items() if p.is_file()},
                   {r: p.read_text().strip() for r, p in refusals.items() if p.is_file()},
                   ReportFiles(markdown, html, tuple(sorted((folder / "report").glob("*.png")))),
                   {r: p for r, p in plans.items() if p.is_file()})


def tally_dict(tally: Tally) -> dict[str, Any]:
    return {"attempts": tally.attempts, "feasible": tally.feasible, "infeasible": tally.infeasible,
            "failed": tally.failed, "unsupported": tally.unsupported, "cache_hits": tally.cache_hits,
            "reasons": dict(tally.reasons)}


def provenance_of(run_dir: RunDir, identity: RunIdentity, config: SmartSearchConfig,
                  ranking: Sequence[RankedCandidate]) -> Provenance:
    versions: dict[str, str] = {}
    for r in ranking:
        if r.candidate.backend_version:
            versions.setdefault(r.candidate.backend, r.candidate.backend_version)
    stages = {name: fp for name in CATALOG if name != "candidates"
              if (fp := run_dir.input_fingerprint(name)) is not None}
    return Provenance(
        spica_version=_version("spica"), replay_runtime=identity.engines.get("ai-dynamo-runtime", "absent"),
        aiconfigurator_core=identity.engines.get("aiconfigurator-core", "absent"), perf_db_versions=versions,
        config_fingerprint=identity.config_fingerprint, trace_fingerprint=identity.trace_fingerprint,
        stage_fingerprints=stages,
        timing_source=f"aiconfigurator-core perf database ({', '.join(config.search_space.skus)}) through "
                      "Dynamo's offline replay")


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "absent"


def records_of(ranking: Sequence[RankedCandidate], tally: Tally, provenance: Provenance) -> list[CandidateRecord]:
    counts = tally_dict(tally)
    return [CandidateRecord.of(r, counts, provenance) for r in ranking]


def write_candidate_files(folder: Path, records: Sequence[CandidateRecord], pareto: bool) -> tuple[Path, Path]:
    """``candidates.json`` (lossless, typed) and ``candidates.csv`` (flat columns)."""
    document = {"schema_version": 1, "result_type": "pareto_front" if pareto else "ranked_candidates",
                "candidates": [r.to_json() for r in records]}
    json_path = write_file(folder / "candidates.json",
                            json.dumps(document, indent=2, sort_keys=True, allow_nan=False) + "\n")
    csv_path = write_file(folder / "candidates.csv", to_csv(list(records)))
    return json_path, csv_path


def write_manifests(out: Path, records: Sequence[CandidateRecord], options: EmitOptions,
                    provenance: Provenance | None) -> tuple[dict[int, Path], dict[int, str]]:
    """One checked DGD per chosen candidate; a candidate no manifest can express is refused, with why."""
    written: dict[int, Path] = {}
    refused: dict[int, str] = {}
    annotations = _annotations(provenance)
    for record in options.chosen(records):
        try:
            doc = manifest(record.candidate, options.manifest, rank=record.rank, annotations=annotations)
        except ManifestError as exc:
            refused[record.rank] = str(exc)
            continue
        problems = check_manifest(doc, used_gpus=record.used_gpus)
        if problems:  # a generator bug: never hand a user a manifest the cluster would reject
            raise AssertionError(f"rank {record.rank}: the generated manifest fails its checks: {problems}")
        written[record.rank] = write_file(out / f"rank-{record.rank}.yaml", manifest_yaml(doc))
    for rank, why in refused.items():
        write_file(out / f"rank-{rank}.refused.txt", why + "\n")
    return written, refused


def _annotations(provenance: Provenance | None) -> dict[str, str]:
    if provenance is None:
        return {}
    return {"spica.dev/version": provenance.spica_version, "spica.dev/replay-runtime": provenance.replay_runtime,
            "spica.dev/aiconfigurator-core": provenance.aiconfigurator_core,
            "spica.dev/config-fingerprint": provenance.config_fingerprint}


def aic_estimates(records: Sequence[CandidateRecord], config: SmartSearchConfig,
                  trace_file: Path | None) -> dict[int, AICEstimate | None]:
    """AIC's analytic number for each static agg record, at the workload's mean lengths and the
    candidate's in-flight requests (fixed, or the replay's mean by Little's law)."""
    w = config.workload
    isl, osl = (int(w.isl), int(w.osl)) if w.isl and w.osl else _mean_lengths(trace_file)
    out: dict[int, AICEstimate | None] = {}
    for r in records:
        c = r.candidate
        if c.mode != "agg" or c.planner.policy != "disabled" or not isl:
            continue
        in_flight = c.concurrency or w.concurrency or w.replay_concurrency or round(
            r.metrics.get("request_throughput_rps", 0.0) * r.metrics.get("mean_e2e_latency_ms", 0.0) / 1000)
        out[r.rank] = aic_estimate(c, isl=isl, osl=osl, concurrency=max(1, int(in_flight)))
    return out


def _mean_lengths(trace_file: Path | None) -> tuple[int, int]:
    if trace_file is None or not trace_file.is_file():
        return 0, 0
    profile = trace_profile(trace_file)  # the report's own parse of the trace
    if profile.requests == 0:
        return 0, 0
    return round(profile.mean_isl), round(profile.mean_osl)


def emit_outputs(run_dir: RunDir, records: Sequence[CandidateRecord], options: EmitOptions, *,
                 config: SmartSearchConfig, trials: Sequence[Trial], tally: Tally, provenance: Provenance,
                 trace_file: Path | None, manifests_dir: Path | None = None,
                 confidence: ConfidenceCheck | None = None) -> Emitted:
    """Everything but the Parquet (the task writes that through the catalog). ``confidence`` is the top
    candidates' re-scoring at another SLA confidence (the sweep's emit stage replays it; ``spica emit``
    replays nothing and passes None)."""
    folder = run_dir.path
    pareto = config.goal.is_pareto
    write_candidate_files(folder, records, pareto)
    out = manifests_dir or folder / MANIFESTS_DIR
    written, refused = write_manifests(out, records, options, provenance)
    trace = trace_file if trace_file is not None and trace_file.is_file() else None  # a copied run dir has none
    plans = write_plans((out if manifests_dir else folder) / PLANS_DIR, written, records, config, trace, provenance)
    estimates = aic_estimates(records, config, trace)
    report = write_report(folder, ReportInputs(
        config=config, records=tuple(records), emitted=tuple(written),
        manifests={rank: os.path.relpath(path, folder) for rank, path in written.items()},
        trials=tuple(trials), tally=tally, provenance=provenance,
        trace_file=trace,
        aic=estimates, pareto=pareto, objectives=tuple(o.value for o in config.goal.objectives),
        confidence=confidence))
    return Emitted(tuple(records), written, refused, report, plans)


def load_records(run_dir: RunDir) -> list[CandidateRecord]:
    return [CandidateRecord.from_row(r) for r in run_dir.rows("candidates")]


@dataclass(frozen=True)
class FinishedRun:
    """A run folder read back for ``spica show`` / ``spica emit``: no Prefect, no replay, any location."""

    run_dir: RunDir
    config: SmartSearchConfig
    identity: RunIdentity
    trace_file: Path | None
    trials: tuple[Trial, ...]
    records: tuple[CandidateRecord, ...]

    @property
    def tally(self) -> Tally:
        return Tally.of(self.trials)

    @classmethod
    def open(cls, path: str | Path) -> FinishedRun:
        """Raises RunDirError when ``path`` is not a run folder (or its sweep has not ranked yet)."""
        run_dir = RunDir(path)
        if not run_dir.path.is_dir():
            raise RunDirError(f"{run_dir.path}: not a folder; give a run folder such as runs/<run id>")
        if not run_dir.readable("config"):
            raise RunDirError(f"{run_dir.path}: not a Spica run folder (no readable config.parquet)")
        row = run_dir.rows("config")[0]
        config = config_from_row(row)
        identity = RunIdentity(row["run_id"], row["config_fingerprint"], row["trace_fingerprint"],
                               json.loads(row["engines_json"]))
        trials = tuple(Trial.from_row(r) for r in run_dir.rows("trials")) if run_dir.readable("trials") else ()
        if run_dir.readable("candidates"):
            records = tuple(load_records(run_dir))
        elif run_dir.readable("ranking"):  # ranked before the emit stage ran (or existed)
            ranking = [RankedCandidate.from_row(r) for r in run_dir.rows("ranking")]
            records = tuple(records_of(ranking, Tally.of(trials), provenance_of(run_dir, identity, config, ranking)))
        else:
            raise RunDirError(f"{run_dir.path}: the sweep has not ranked anything yet (no ranking.parquet); "
                              "run spica sweep on its config to finish it")
        trace = Path(row["trace_file"]) if row["trace_file"] else None
        return cls(run_dir, config, identity, trace, trials, records)

    def calibrated(self, calibration: Calibration) -> FinishedRun:
        """The run ranked again under ``calibration``, from the requests its replays kept (no replay runs);
        raises CalibrationFileError when its trials cannot be scored again."""
        trials = tuple(recalibrated(self.trials, self.config, calibration))
        ranking = rank_trials(trials, self.config)
        provenance = provenance_of(self.run_dir, self.identity, self.config, ranking)
        return replace(self, trials=trials, records=tuple(records_of(ranking, Tally.of(trials), provenance)))


__all__ = ["DEFAULT_TOP", "EmitOptions", "Emitted", "FinishedRun", "aic_estimates", "emit_outputs", "load_records",
           "provenance_of", "records_of", "tally_dict", "write_candidate_files", "write_manifests"]

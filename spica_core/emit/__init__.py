"""The emit stage: candidate files, DynamoGraphDeployment manifests and the report."""
from spica_core.emit.aic_estimate import AICEstimate, aic_estimate
from spica_core.emit.bench_plans import PLAN_FILE
from spica_core.emit.crd import check_manifest
from spica_core.emit.manifest_options import ManifestOptions
from spica_core.emit.manifests import manifest, manifest_yaml
from spica_core.emit.numbers import MISSING, fmt
from spica_core.emit.outputs import (
    DEFAULT_TOP,
    EmitOptions,
    Emitted,
    FinishedRun,
    aic_estimates,
    emit_outputs,
    load_records,
    provenance_of,
    records_of,
    tally_dict,
    write_candidate_files,
    write_manifests,
)
from spica_core.emit.records import CandidateRecord, Provenance, to_csv
from spica_core.emit.report import ReportFiles, ReportInputs, write_report
from spica_core.emit.rows import CandidateRow, candidate_row

__all__ = [
    "AICEstimate", "CandidateRecord", "CandidateRow", "DEFAULT_TOP", "EmitOptions", "Emitted", "FinishedRun", "ManifestOptions",
    "PLAN_FILE", "Provenance",
    "ReportFiles", "ReportInputs", "aic_estimate", "aic_estimates", "candidate_row", "check_manifest", "emit_outputs", "load_records",
    "manifest", "manifest_yaml", "MISSING", "fmt", "provenance_of", "records_of", "tally_dict", "to_csv", "write_candidate_files",
    "write_manifests", "write_report",
]

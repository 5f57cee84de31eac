"""The report's closing sections: the outcome tally with its reasons, the files written, and the provenance."""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from spica_core.emit.numbers import fmt
from spica_core.emit.records import Provenance
from spica_core.emit.report_format import _table
from spica_core.evaluate.evaluation import Status
from spica_core.search.trials import Trial, reason_class

if TYPE_CHECKING:
    from spica_core.emit.report import ReportInputs


CANDIDATE_FILES = ("candidates.parquet", "candidates.json", "candidates.csv")


def _tally_section(inputs: ReportInputs) -> list[str]:
    t = inputs.tally
    lines = ["## Outcome tally", ""]
    lines.append(f"{fmt(t.attempts)} attempts: {fmt(t.feasible)} feasible, {fmt(t.infeasible)} infeasible, "
                 f"{fmt(t.failed)} failed, {fmt(t.unsupported)} unsupported, {fmt(t.cache_hits)} cache hits.")
    lines.append(f"Replay time {fmt(t.replay_seconds, 's')} (summed over workers), optimizer time "
                 f"{fmt(t.optimizer_seconds, 's')}.")
    lines.append("")
    if t.reasons:
        kinds = _reason_kinds(inputs.trials)
        rows = [[reason, ", ".join(sorted(kinds.get(reason, ()))) or "—", n]
                for reason, n in sorted(t.reasons.items(), key=lambda kv: (-kv[1], kv[0]))]
        lines += [*_table(["reason", "outcome", "count"], rows), ""]
    return lines


def _reason_kinds(trials: Sequence[Trial]) -> dict[str, set[str]]:
    """Which outcome (infeasible, failed, ...) each of the tally's reason groups came from."""
    out: dict[str, set[str]] = {}
    for trial in trials:
        if trial.cache_hit or trial.status is Status.feasible:
            continue
        out.setdefault(reason_class(trial.reason or trial.status.value), set()).add(trial.status.value)
    return out


def _files_section(inputs: ReportInputs) -> list[str]:
    lines = ["## Files", ""]
    lines.append("- candidates: " + ", ".join(f"[{name}]({name})" for name in CANDIDATE_FILES))
    if inputs.manifests:
        lines.append("- manifests:")
        lines += [f"  - rank {rank}: [{path}]({path})" for rank, path in sorted(inputs.manifests.items())]
    else:
        lines.append("- manifests: none written")
    lines.append("")
    return lines


def _provenance_section(p: Provenance) -> list[str]:
    rows: list[list[Any]] = [["spica", p.spica_version], ["ai-dynamo-runtime (replay)", p.replay_runtime],
                             ["aiconfigurator-core", p.aiconfigurator_core]]
    rows += [[f"perf DB ({backend})", version] for backend, version in sorted(p.perf_db_versions.items())]
    rows += [["timing source", p.timing_source], ["config fingerprint", f"`{p.config_fingerprint}`"],
             ["trace fingerprint", f"`{p.trace_fingerprint}`" if p.trace_fingerprint else "—"]]
    rows += [[f"stage {stage}", f"`{fp}`"] for stage, fp in sorted(p.stage_fingerprints.items())]
    return ["## Provenance", "", *_table(["what", "value"], rows), ""]

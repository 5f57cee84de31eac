"""What a Prefect user sees of a sweep: artifact keys per run, readable tables, progress, a summary.

Everything here only publishes (artifacts and log lines) and is a no-op outside a flow run, so the
stages stay callable from tests and the CLI prints its own output.
"""
from __future__ import annotations

import math
import time
from typing import Any, Sequence
from uuid import UUID

from prefect.artifacts import create_markdown_artifact, create_progress_artifact, create_table_artifact
from prefect.artifacts import update_progress_artifact
from prefect.context import FlowRunContext
from prefect.logging import get_run_logger

from spica_core.config.model import SmartSearchConfig
from spica_core.evaluate import attainment, meets_sla, objective_metric, raw_value
from spica_core.emit import CandidateRecord, fmt
from spica_core.emit.report_format import attainment_text, band_range, percent
from spica_core.emit.rows import candidate_row
from spica_core.search import RankedCandidate, Tally, Trial


def in_flow_run() -> bool:
    return FlowRunContext.get() is not None


def artifact_key(run_id: str, name: str) -> str:
    """Keys are global in Prefect: one per run, so runs of different configs never interleave."""
    return f"spica-{run_id[:12]}-{name}"


def objective_value(config: SmartSearchConfig, score: float | None) -> float | None:
    """The goal's value as a person reads it (the score is signed: minimised targets are negated)."""
    if score is None:
        return None
    return raw_value(config.goal.target, score)


def _score_text(config: SmartSearchConfig, score: float | None) -> str:
    target = config.goal.objectives[0].value
    unit = objective_metric(target).unit
    return fmt(objective_value(config, score), unit)


def _sla_text(value: float | None, bound: float | None) -> str:
    if value is None:
        return "—"
    text = fmt(value, "ms")
    if bound is None:
        return text
    return f"{text} {'≤' if value <= bound else '>'} {fmt(bound, 'ms')}"


def ui_row(config: SmartSearchConfig, rank: int | None, trial: Trial | RankedCandidate) -> dict[str, Any]:
    """One row of a Prefect table artifact: the candidate's row (``spica_core.emit.rows``), the score with its
    unit, TTFT/ITL against the SLA, and for a trial its outcome."""
    sla = config.goal.sla
    metrics = dict(trial.metrics)
    share, meets = attainment(metrics), meets_sla(config.goal, metrics)
    c = (candidate_row(trial.candidate, trial.candidate.parallel.used_gpus, metrics, trial.bands, share, meets)
         if trial.candidate else None)
    row: dict[str, Any] = {} if rank is None else {"rank": rank}
    row.update({
        "round": trial.round + 1, "trial": trial.trial + 1,
        "mode": c.mode if c else trial.mode,
        "backend": c.backend if c else "",
        "GPU type": c.gpu if c else "",
        "parallel": c.parallel if c else "",
        "GPUs": c.gpus if c else "",
        "batching / router / planner": c.knobs if c else "",
        "score": _score_text(config, trial.score) if trial.score is not None else "—",
        "SLA attainment": attainment_text(share, meets),
        "TTFT (SLA)": _sla_text(c.ttft_ms if c else None, sla.ttft_ms if sla else None),
        "ITL (SLA)": _sla_text(c.itl_ms if c else None, sla.itl_ms if sla else None),
        "TTFT on measured GPUs": band_range(c.ttft_band if c else None),
        "ITL on measured GPUs": band_range(c.itl_band if c else None),
    })
    if config.goal.gpu_hour_usd:
        row["USD/Mtok"] = fmt(c.cost_per_mtok) if c else "—"
    if isinstance(trial, Trial):
        row["outcome"] = "cache hit" if trial.cache_hit else trial.status.value
        row["reason"] = trial.reason
    return row


def evaluation_line(config: SmartSearchConfig, trial: Trial) -> str:
    c = trial.candidate
    what = f"{c.mode} {c.backend} {c.parallel.label()} {c.knobs_label()}" if c else f"{trial.mode} (unbuilt)"
    if trial.score is not None and trial.status.value == "feasible":
        outcome = f"score {_score_text(config, trial.score)}" + (" (cache hit)" if trial.cache_hit else "")
    else:
        outcome = f"{trial.status.value}: {trial.reason or 'no reason recorded'}"
    return f"{trial.mode} round {trial.round + 1} trial {trial.trial + 1}: {what} → {outcome}"


class UIProgress:
    """A progress artifact updated as evaluations finish (at most once a second: each update is an API
    call, which costs about as much as a small replay), and one log line per evaluation."""

    UPDATE_EVERY_S = 1.0

    def __init__(self, run_id: str, config: SmartSearchConfig, target: int):
        self.config = config
        self.target = max(1, target)
        self.done = 0
        self.best: float | None = None
        self.artifact: UUID | None = None
        self._updated = 0.0
        if in_flow_run():
            self.artifact = create_progress_artifact(progress=0.0, key=artifact_key(run_id, "progress"),
                                                     description=f"run {run_id}: unique successful evaluations "
                                                                 f"of {self.target}")

    def count(self, trial: Trial) -> None:
        if trial.is_evaluated_success:
            self.done += 1
            meets = meets_sla(self.config.goal, trial.metrics) is not False   # the best that holds the SLA
            if trial.score is not None and math.isfinite(trial.score) and meets:
                self.best = trial.score if self.best is None else max(self.best, trial.score)

    def __call__(self, trial: Trial) -> None:
        self.count(trial)
        if not in_flow_run():
            return
        get_run_logger().info(evaluation_line(self.config, trial))
        now = time.monotonic()
        if self.artifact is not None and (now - self._updated >= self.UPDATE_EVERY_S or self.done >= self.target):
            self._updated = now
            self.update()

    def update(self) -> None:
        """Also called once at the end, so the artifact shows the final count."""
        if self.artifact is not None and in_flow_run():
            update_progress_artifact(self.artifact, progress=min(100.0, 100.0 * self.done / self.target),
                                     description=f"{self.done}/{self.target} evaluations, best "
                                                 f"{_score_text(self.config, self.best)}")


def publish_branch(run_id: str, config: SmartSearchConfig, mode: str, trials: Sequence[Trial],
                   all_trials: Sequence[Trial]) -> None:
    if not in_flow_run() or not trials:
        return
    tally = Tally.of(all_trials)
    scored = [t.score for t in all_trials if t.is_evaluated_success and t.score is not None and t.mode == mode
              and meets_sla(config.goal, t.metrics) is not False]
    best = _score_text(config, max(scored)) if scored else "—"
    reasons = "; ".join(f"{n} × {r}" for r, n in tally.top_reasons()) or "none"
    rounds = len({t.round for t in trials})
    create_table_artifact(
        key=artifact_key(run_id, f"{mode}-trials"), table=[ui_row(config, None, t) for t in trials],
        description=f"run {run_id}: {mode}, {len(trials)} evaluation(s) in {rounds} round(s); best {best}; "
                    f"tally {tally.feasible} feasible of {tally.attempts} ({reasons})")


def publish_ranking(run_id: str, config: SmartSearchConfig, ranking: Sequence[RankedCandidate], run_dir: str) -> None:
    if not in_flow_run() or not ranking:
        return
    create_table_artifact(key=artifact_key(run_id, "ranking"),
                          table=[ui_row(config, r.rank, r) for r in ranking],
                          description=f"run {run_id}: {'Pareto front' if config.goal.is_pareto else 'ranking'}; "
                                      f"run folder {run_dir}")


def publish_summary(run_id: str, config: SmartSearchConfig, records: Sequence[CandidateRecord], tally: Tally,
                    run_dir: str, report: str | None) -> None:
    """The flow run's markdown summary: the winner, its settings, its metrics against the SLA, where it all is."""
    if not in_flow_run():
        return
    lines = [f"# Spica sweep {run_id[:12]}", "", f"Run folder: `{run_dir}`", ""]
    if records:
        w = records[0]
        row = candidate_row(w.candidate, w.used_gpus, w.metrics, w.bands, w.attainment, w.meets_sla)
        sla = config.goal.sla
        headroom = w.headroom
        required = config.goal.required_attainment
        lines += [f"## Winner: {row.mode} {row.backend} {row.parallel} on {row.gpu} ({row.gpus} GPUs)", "",
                  f"- score: {_score_text(config, w.score)} ({config.goal.target.value})",
                  f"- SLA attainment: {row.attainment or '—'}"
                  + (f" — {percent(required)} required" if sla is not None and required > 0 else ""),
                  *([f"- a near-tie with rank(s) {', '.join(map(str, w.tied_with))}: the order is within the "
                     "replays' run-to-run spread"] if w.tied_with else []),
                  f"- settings: {row.knobs}",
                  f"- TTFT: {_sla_text(row.ttft_ms, sla.ttft_ms if sla else None)}",
                  f"- ITL: {_sla_text(row.itl_ms, sla.itl_ms if sla else None)}",
                  f"- throughput: {fmt(row.throughput_tok_s, 'tok/s')}",
                  *([f"- cost: {fmt(row.cost_per_mtok, 'USD/Mtok')} within the SLA"] if row.priced else []),
                  *([f"- calibration: {w.calibration.text()}"] if w.calibration is not None else []),
                  f"- headroom: {headroom.text() if headroom else 'no SLA, so no headroom' if sla is None else '—'}",
                  f"- found in round {w.round + 1}, trial {w.trial + 1}"]
    else:
        reasons = "; ".join(f"{n} × {r}" for r, n in tally.top_reasons()) or "no evaluations"
        lines += ["## No feasible candidate", "", f"{tally.attempts} attempts: {reasons}"]
    lines += ["", f"Tally: {tally.feasible} feasible, {tally.infeasible} infeasible, {tally.failed} failed, "
                  f"{tally.unsupported} unsupported, {tally.cache_hits} cache hits."]
    if report:
        lines += ["", f"Report: `{report}` (the full report is the `{artifact_key(run_id, 'report')}` artifact)."]
    create_markdown_artifact(key=artifact_key(run_id, "summary"), markdown="\n".join(lines),
                             description=f"run {run_id}: summary")

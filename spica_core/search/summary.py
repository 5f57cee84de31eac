"""What a finished sweep reports back to its caller (the CLI's table, the flow's return value)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from spica_core.search.trials import Tally

if TYPE_CHECKING:
    from spica_core.emit.records import CandidateRecord


@dataclass(frozen=True)
class SweepSummary:
    run_dir: str
    run_id: str
    pareto: bool
    objectives: tuple[str, ...]
    ranking: tuple[CandidateRecord, ...]            # the emitted records: ranked (or the front), with ties
    tally: Tally
    stalls: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()                     # what the run took from elsewhere (a calibrated run's replays)
    load_predictor_reason: str = ""
    load_predictor_winners: dict[int, Any] = field(default_factory=dict)
    report: str | None = None                       # report.md, once the emit stage wrote it
    manifests: tuple[str, ...] = ()                 # one DynamoGraphDeployment file per emitted candidate
    plans: tuple[str, ...] = ()                     # one benchmark plan (AIPerf) per manifest
    refused: dict[int, str] = field(default_factory=dict)  # rank -> why no manifest could express it
    required_attainment: float = 0.0                # goal.sla_attainment (0: the SLA is not a requirement)


__all__ = ["SweepSummary"]

"""The emitted candidate record, with the run's tally and provenance.

One :class:`CandidateRecord` per ranked candidate or front member: what ``candidates.parquet``,
``candidates.json`` and ``candidates.csv`` hold, what the manifests are generated from and what the
report shows. The config is the flat unrolled sample, so a reader never re-decodes presets.
"""
from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping

from spica_core.evaluate.bands import Band, bands_from_dict, bands_to_dict
from spica_core.deployment import Candidate
from spica_core.evaluate.calibration import Applied
from spica_core.evaluate.headroom import Headroom
from spica_core.search.ranking import RankedCandidate


@dataclass(frozen=True)
class Provenance:
    """Where the numbers come from: engine versions, input fingerprints and the timing source."""

    spica_version: str
    replay_runtime: str                  # ai-dynamo-runtime version
    aiconfigurator_core: str
    perf_db_versions: dict[str, str]     # backend -> engine version of the perf DB the timings came from
    config_fingerprint: str
    trace_fingerprint: str | None
    stage_fingerprints: dict[str, str]   # stage -> the fingerprint of the inputs its artifact came from
    timing_source: str                   # e.g. "aiconfigurator-core perf database (h200_sxm)"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Provenance:
        return cls(**data)


@dataclass(frozen=True)
class CandidateRecord:
    rank: int
    score: float
    used_gpus: int
    candidate: Candidate
    metrics: dict[str, float]
    objectives: dict[str, float] | None
    round: int
    trial: int
    tally: dict[str, Any] = field(default_factory=dict)   # the run's outcome counts and reasons
    provenance: Provenance | None = None
    bands: dict[str, Band] = field(default_factory=dict)  # the error band on each predicted latency
    headroom: Headroom | None = None     # emitted candidates under an SLA: how much more traffic they take
    attainment: float | None = None      # requests that met the SLA ÷ all requests; None without an SLA
    meets_sla: bool | None = None        # attainment ≥ goal.sla_attainment; None without an SLA
    score_spread: float | None = None    # emitted KV-router candidates: twice the half-width of the replays' scores
    tied_with: tuple[int, ...] = ()      # the ranks it is a near-tie with (scores within the replay spread)
    calibration: Applied | None = None   # which calibration its numbers are under ({file, group, rows}), if any
    uncalibrated: dict[str, float] = field(default_factory=dict)   # the replay's own metrics, when calibrated

    @classmethod
    def of(cls, ranked: RankedCandidate, tally: Mapping[str, Any], provenance: Provenance) -> CandidateRecord:
        return cls(ranked.rank, ranked.score, ranked.used_gpus, ranked.candidate, dict(ranked.metrics),
                   dict(ranked.objectives) if ranked.objectives else None, ranked.round, ranked.trial,
                   dict(tally), provenance, dict(ranked.bands), attainment=ranked.attainment,
                   meets_sla=ranked.meets_sla, calibration=ranked.calibration,
                   uncalibrated=dict(ranked.uncalibrated))

    @property
    def config(self) -> dict[str, Any]:
        """The flat unrolled sample."""
        return self.candidate.to_sample()

    def to_json(self) -> dict[str, Any]:
        return {"rank": self.rank, "score": self.score, "used_gpus": self.used_gpus, "config": self.config,
                "attainment": self.attainment, "meets_sla": self.meets_sla, "tied_with": list(self.tied_with),
                "score_spread": self.score_spread, "metrics": self.metrics, "bands": bands_to_dict(self.bands),
                "headroom": self.headroom.to_dict() if self.headroom else None, "objectives": self.objectives,
                "round": self.round, "trial": self.trial,
                "tally": self.tally, "provenance": self.provenance.to_dict() if self.provenance else None,
                "calibration": self.calibration.to_dict() if self.calibration else None,
                "uncalibrated_metrics": self.uncalibrated or None}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> CandidateRecord:
        provenance = data.get("provenance")
        return cls(int(data["rank"]), float(data["score"]), int(data["used_gpus"]),
                   Candidate.from_sample(data["config"]), dict(data["metrics"]),
                   dict(data["objectives"]) if data.get("objectives") else None, int(data["round"]),
                   int(data["trial"]), dict(data.get("tally") or {}),
                   Provenance.from_dict(provenance) if provenance else None, bands_from_dict(data.get("bands")),
                   Headroom.from_dict(data["headroom"]) if data.get("headroom") else None,
                   _float_or_none(data.get("attainment")),
                   None if data.get("meets_sla") is None else bool(data["meets_sla"]),
                   _float_or_none(data.get("score_spread")), tuple(int(r) for r in data.get("tied_with") or ()),
                   Applied.from_dict(data.get("calibration")), dict(data.get("uncalibrated_metrics") or {}))

    def to_row(self) -> dict[str, Any]:
        """A ``candidates.parquet`` row: scalars as columns, nested values as canonical JSON."""
        return {"rank": self.rank, "score": self.score, "used_gpus": self.used_gpus,
                "mode": self.candidate.mode, "backend": self.candidate.backend,
                "parallel": self.candidate.parallel.label(), "round": self.round, "trial": self.trial,
                "config_json": _json(self.config), "metrics_json": _json(self.metrics),
                "objectives_json": _json(self.objectives) if self.objectives else None,
                "tally_json": _json(self.tally),
                "provenance_json": _json(self.provenance.to_dict()) if self.provenance else None,
                "bands_json": _json(bands_to_dict(self.bands)),
                "headroom_json": _json(self.headroom.to_dict()) if self.headroom else None,
                "attainment": self.attainment, "meets_sla": self.meets_sla, "score_spread": self.score_spread,
                "tied_with_json": _json(list(self.tied_with)),
                "calibration_json": _json(self.calibration.to_dict()) if self.calibration else None,
                "uncalibrated_json": _json(self.uncalibrated) if self.uncalibrated else None}

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> CandidateRecord:
        return cls.from_json({**{k: row[k] for k in ("rank", "score", "used_gpus", "round", "trial", "attainment",
                                                     "meets_sla", "score_spread")},
                              "tied_with": json.loads(row["tied_with_json"] or "[]"),
                              "config": json.loads(row["config_json"]), "metrics": json.loads(row["metrics_json"]),
                              "objectives": json.loads(row["objectives_json"]) if row["objectives_json"] else None,
                              "tally": json.loads(row["tally_json"]), "bands": json.loads(row["bands_json"] or "{}"),
                              "headroom": json.loads(row["headroom_json"]) if row["headroom_json"] else None,
                              "provenance": json.loads(row["provenance_json"]) if row["provenance_json"] else None,
                              "calibration": json.loads(row["calibration_json"]) if row["calibration_json"] else None,
                              "uncalibrated_metrics": json.loads(row["uncalibrated_json"])
                              if row["uncalibrated_json"] else None})

    def flat(self) -> dict[str, Any]:
        """One CSV row: rank, score, used_gpus, then ``config.*``, ``metrics.*``, ``objectives.*``."""
        out: dict[str, Any] = {"rank": self.rank, "score": self.score, "used_gpus": self.used_gpus,
                               "attainment": self.attainment, "meets_sla": self.meets_sla,
                               "tied_with": " ".join(map(str, self.tied_with)), "score_spread": self.score_spread,
                               "round": self.round, "trial": self.trial}
        bands = {f"{metric}.{q}": getattr(band, q) for metric, band in self.bands.items()
                 for q in ("p10", "p50", "p90", "rows", "group", "spread")}
        if self.headroom is not None:
            h = self.headroom
            out.update({"headroom.scale": h.scale, "headroom.attainment": h.attainment,
                        "headroom.evaluations": h.evaluations, "headroom.capped": h.capped})
        for prefix, values in (("config", self.config), ("metrics", self.metrics), ("bands", bands),
                               ("objectives", self.objectives or {})):
            for key, value in values.items():
                out[f"{prefix}.{key}"] = _json(value) if isinstance(value, (list, dict)) else value
        return out


def _float_or_none(value: Any) -> float | None:
    return None if value is None else float(value)


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False, default=_finite)


def _finite(value: Any) -> Any:
    raise TypeError(f"not JSON-serialisable: {type(value).__name__}")


def to_csv(records: list[CandidateRecord]) -> str:
    """The CSV view: the union of every record's flat columns, in first-seen order."""
    rows = [r.flat() for r in records]
    columns: list[str] = []
    for row in rows:
        columns += [c for c in row if c not in columns]
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({c: ("" if row.get(c) is None or (isinstance(row.get(c), float) and math.isnan(row[c]))
                             else row[c]) for c in columns})
    return buffer.getvalue()


__all__ = ["CandidateRecord", "Provenance", "to_csv"]

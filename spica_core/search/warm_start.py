"""Warm start from an earlier run: its top candidates are evaluated first, on this run's trace, and its
evaluated trials are a prior for the new studies.

The candidates carry over (mode, backend, parallel config, knobs). The earlier scores came from another
trace and are never copied into this run: no trial of the new run has one. A GP-bandit study uses them as
a prior study (Vizier's transfer learning: the new GP models what the earlier run's GP does not explain),
so they shape where it looks, not what it records. A re-sweep finds its previous run by the config
fingerprint.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from spica_core.errors import RunDirError
from spica_core.run.catalog import RunDir
from spica_core.search.trials import Trial

WARM_TOP = 3  # candidates per run carried over, like the manifests the emit stage writes


@dataclass(frozen=True)
class WarmStart:
    """What an earlier run passes on to a new one."""

    source: str                      # the earlier run's id
    top: tuple[Trial, ...] = ()      # its best candidates (or first front members), best first
    trials: tuple[Trial, ...] = ()   # its feasible trials with a replay of their own: the studies' prior

    def of_mode(self, mode: str) -> WarmStart:
        return WarmStart(self.source, tuple(t for t in self.top if t.mode == mode),
                         tuple(t for t in self.trials if t.mode == mode))

    def key(self) -> dict[str, object]:
        """What the run's identity of proposals takes from it: the earlier run and what is evaluated first."""
        return {"source": self.source, "top": [[t.mode, t.selection, t.parallel.to_dict()] for t in self.top]}


def load_warm_start(folder: str | Path, top: int = WARM_TOP) -> WarmStart:
    """The warm start a finished run folder offers: its best ``top`` candidates and its evaluated trials."""
    rd = RunDir(folder)
    for stage in ("config", "trials", "ranking"):
        if not rd.readable(stage):
            raise RunDirError(f"--warm-start {rd.path}: not a finished run folder (no readable {stage}.parquet)")
    rows = rd.rows("trials")
    trials = {(r["mode"], int(r["round"]), int(r["trial"])): r for r in rows}
    picked = []
    for row in rd.rows("ranking")[:top]:
        found = trials.get((row["mode"], int(row["round"]), int(row["trial"])))
        if found is not None:
            picked.append(Trial.from_row(found))
    evaluated = tuple(Trial.from_row(r) for r in rows if not r["cache_hit"] and r["status"] == "feasible")
    return WarmStart(str(rd.rows("config")[0]["run_id"]), tuple(picked), evaluated)


def latest_run(runs_root: str | Path, config_fingerprint: str) -> tuple[Path, str | None] | None:
    """The most recently ranked run of this config under ``runs_root``: (folder, its trace fingerprint)."""
    best: tuple[float, Path, str | None] | None = None
    root = Path(runs_root)
    if not root.is_dir():
        return None
    for folder in root.iterdir():
        rd = RunDir(folder)
        if not (folder.is_dir() and rd.has("config") and rd.has("ranking") and rd.readable("config")):
            continue
        row = rd.rows("config")[0]
        if row["config_fingerprint"] != config_fingerprint:
            continue
        stamp = rd.artifact("ranking").stat().st_mtime
        if best is None or stamp > best[0]:
            best = (stamp, folder, row["trace_fingerprint"])
    return None if best is None else (best[1], best[2])


__all__ = ["WARM_TOP", "WarmStart", "latest_run", "load_warm_start"]

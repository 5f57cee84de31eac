"""Warm start from an earlier run: its top candidates are evaluated first, on this run's trace.

Only the candidates carry over (mode, backend, parallel config, knobs); their scores came from
another trace and are never copied. A re-sweep finds its previous run by the config fingerprint.
"""
from __future__ import annotations

from pathlib import Path

from spica_core.errors import RunDirError
from spica_core.run.catalog import RunDir
from spica_core.search.trials import Trial

WARM_TOP = 3  # candidates per run carried over, like the manifests the emit stage writes


def previous_top_trials(folder: str | Path, top: int = WARM_TOP) -> tuple[Trial, ...]:
    """The trials of a finished run's best ``top`` candidates (or first front members), best first."""
    rd = RunDir(folder)
    for stage in ("config", "trials", "ranking"):
        if not rd.readable(stage):
            raise RunDirError(f"--warm-start {rd.path}: not a finished run folder (no readable {stage}.parquet)")
    trials = {(r["mode"], int(r["round"]), int(r["trial"])): r for r in rd.rows("trials")}
    picked = []
    for row in rd.rows("ranking")[:top]:
        found = trials.get((row["mode"], int(row["round"]), int(row["trial"])))
        if found is not None:
            picked.append(Trial.from_row(found))
    return tuple(picked)


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


__all__ = ["WARM_TOP", "latest_run", "previous_top_trials"]

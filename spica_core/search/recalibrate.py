"""Trials scored again under a calibration, from the requests each replay kept: no replay runs.

A calibrated sweep starts from the same config's uncalibrated run this way (every replay it holds is re-used),
and ``spica show RUN --calibration FILE`` ranks a finished run again.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from spica_core.config.model import SmartSearchConfig
from spica_core.errors import CalibrationFileError
from spica_core.evaluate.bands import load_bands
from spica_core.evaluate.calibration import Calibration
from spica_core.evaluate.evaluation import EvalRequest, Outcome, Status, calibrated
from spica_core.search.trials import Trial


def recalibrated(trials: Sequence[Trial], config: SmartSearchConfig, calibration: Calibration) -> list[Trial]:
    """Each feasible trial's metrics, score, objectives and bands under ``calibration`` (the replay's own
    metrics kept in ``uncalibrated``); the other trials as they are. Raises CalibrationFileError when the
    trials cannot be scored again: a replay kept no requests (a run made before they were kept), or the goal
    ranks by the worse of two traffic scales (``robust_scale``), whose second replay's requests are not kept."""
    if config.goal.robust_scale > 1:
        raise CalibrationFileError(f"goal.robust_scale {config.goal.robust_scale:g} ranks by a second replay at "
                                   "grown traffic whose requests are not kept; sweep again with the calibration")
    out: list[Trial] = []
    for trial in trials:
        if trial.status is not Status.feasible or trial.candidate is None:
            out.append(trial)
            continue
        if trial.requests is None:
            raise CalibrationFileError(f"trial {trial.trial} ({trial.mode}) has no per-request latencies (its run was "
                                       "made before Spica kept them); sweep again with the calibration")
        c = trial.candidate
        raw = trial.replay_metrics
        shipped = load_bands().bands(*c.group, raw)
        plain = Outcome(Status.feasible, c, metrics=raw, score=trial.score, bands=shipped, requests=trial.requests)
        closed = EvalRequest.from_config(config, c).closed_loop
        done = calibrated(plain, config.goal, calibration, closed)
        out.append(replace(trial, metrics=done.metrics, score=done.score, objectives=done.objectives,
                           bands=done.bands, calibration=done.calibration, uncalibrated=done.uncalibrated))
    return out


__all__ = ["recalibrated"]

"""A run's identity: the fingerprint of the normalised config, the trace content and the engine versions.

Same config + same trace + same engines ⇒ same run id ⇒ the same ``runs/<id>/`` folder, which is
what lets a re-run resume instead of starting over.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from spica_core.config.model import SmartSearchConfig
from spica_core.evaluate import Calibration
from spica_core.store import canonical_json, file_fingerprint, fingerprint

ENGINE_PACKAGES = ("ai-dynamo-runtime", "aiconfigurator-core", "google-vizier", "prefect")


def engine_versions() -> dict[str, str]:
    out = {}
    for name in ENGINE_PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "absent"
    return out


@dataclass(frozen=True)
class RunIdentity:
    """Who a run is: its id and the fingerprints it is formed from (the row type of ``config.parquet``)."""

    run_id: str
    config_fingerprint: str
    trace_fingerprint: str | None
    engines: dict[str, str]
    calibration_fingerprint: str | None = None   # the calibration file's content, when the run has one
    uncalibrated_run_id: str | None = None       # the same run without it: whose replays a calibrated run re-uses


def identify(config: SmartSearchConfig, trace_file: Path | None, calibration: Calibration | None = None) -> RunIdentity:
    """A run's identity; a calibration's content (not its path) joins it, so a new calibration is a new run."""
    config_fp = fingerprint(config.normalised())
    trace_fp = file_fingerprint(trace_file) if trace_file is not None else None
    engines = engine_versions()
    plain = {"config": config_fp, "trace": trace_fp, "engines": engines}
    if calibration is None:
        return RunIdentity(fingerprint(plain), config_fp, trace_fp, engines)
    return RunIdentity(fingerprint({**plain, "calibration": calibration.fingerprint}), config_fp, trace_fp, engines,
                       calibration.fingerprint, fingerprint(plain))


def config_rows(config: SmartSearchConfig, identity: RunIdentity, trace_file: Path | None) -> list[dict[str, Any]]:
    """The single row of ``config.parquet``."""
    return [{
        "run_id": identity.run_id,
        "config_fingerprint": identity.config_fingerprint,
        "trace_fingerprint": identity.trace_fingerprint,
        "trace_file": str(trace_file.resolve()) if trace_file is not None else None,
        "engines_json": canonical_json(identity.engines),
        "config_json": canonical_json(config.normalised()),
    }]


def config_from_row(row: dict[str, Any]) -> SmartSearchConfig:
    return SmartSearchConfig.model_validate(json.loads(row["config_json"]))


@dataclass(frozen=True)
class LocatedRun:
    """A config file resolved to its run: the config (with a ``--seed`` override), trace, identity, folder."""

    config: SmartSearchConfig
    trace_file: Path | None
    identity: RunIdentity
    folder: Path
    calibration: Calibration | None = None
    runs_root: Path | None = None      # where sibling runs live (None: the run was given its own --run-dir)


def locate(source: str | Path | SmartSearchConfig, runs_root: str | Path | None = None,
           run_dir: str | Path | None = None, seed: int | None = None, cluster: str | None = None,
           calibration: str | Path | None = None) -> LocatedRun:
    """The checked inputs (a config file, or a config given inline) and the folder they run in; ``seed``
    overrides ``sweep.seed``, ``cluster`` ``sweep.cluster``, ``calibration`` ``goal.calibration``. An inline
    config has the same fingerprint, so the same run, as its file."""
    from spica_core.run.catalog import DEFAULT_RUNS_ROOT
    from spica_core.run.inputs import load_inputs
    from spica_core.run.lock import check_folder

    inputs = load_inputs(source, seed, cluster, calibration)
    identity = identify(inputs.config, inputs.trace_file, inputs.calibration)
    if run_dir:
        check_folder(Path(run_dir))
    root = None if run_dir else Path(runs_root or DEFAULT_RUNS_ROOT)
    folder = Path(run_dir) if run_dir else root / identity.run_id
    return LocatedRun(inputs.config, inputs.trace_file, identity, folder, inputs.calibration, root)

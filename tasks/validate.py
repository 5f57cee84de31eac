"""Stage 1: validate the config and write ``config.parquet`` into the run folder (once per run)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


from spica_core.errors import ConfigError, Issue, RunDirError
from spica_core.run.catalog import CATALOG, RunDir, downstream
from spica_core.config.model import SmartSearchConfig
from spica_core.config.policies import PolicyFilter, filter_for_goal, with_policies
from spica_core.run import lock
from spica_core.run.identity import RunIdentity, config_rows, locate
from spica_core.evaluate import Calibration
from spica_core.search import WarmStart, load_warm_start
from tasks.notices import report_set_aside
from tasks.stage import stage


@dataclass(frozen=True)
class ValidatedRun:
    """What later stages need: the config, where the run lives and what the trace file is."""

    config: SmartSearchConfig           # as the user wrote it (normalised); what config.parquet holds
    search_config: SmartSearchConfig    # after the goal's planner-policy filtering
    policies: PolicyFilter
    identity: RunIdentity
    run_dir: RunDir
    trace_file: Path | None
    warm_start: WarmStart | None = None  # an earlier run's top candidates and trials (never their scores)
    calibration: Calibration | None = None   # goal.calibration (or --calibration), read
    runs_root: Path | None = None            # where the same config's uncalibrated run would be


@stage("validate", retries=2, log_prints=True)
def validate_config(config_path: str | None = None, runs_root: str | None = None, run_dir: str | None = None,
                    seed: int | None = None, config: SmartSearchConfig | None = None,
                    from_stage: str | None = None, warm_start: str | None = None,
                    cluster: str | None = None, calibration: str | None = None) -> ValidatedRun:
    """Exactly one of ``config_path`` and ``config`` (inline, from the Prefect form); ``seed`` overrides
    ``sweep.seed`` (part of the run identity: another seed is another run).

    The run folder is locked for this process first, so a second sweep on it stops at once. The config is
    always checked (the run id is its fingerprint); a fresh ``config.parquet`` already holds exactly this
    run, so it is left as it is. ``from_stage`` recomputes that stage and every stage computed from it;
    ``warm_start`` is an earlier run folder whose top candidates are evaluated first; ``cluster`` overrides
    ``sweep.cluster``; ``calibration`` ``goal.calibration``.
    """
    if (config is None) == (config_path is None):
        raise ConfigError("sweep parameters", [Issue("config", "give exactly one of config (the config itself) "
                                                     "and config_path (a YAML file)")])
    located = locate(config if config is not None else config_path, runs_root, run_dir, seed, cluster, calibration)
    warm = load_warm_start(warm_start) if warm_start else None
    config, trace, identity = located.config, located.trace_file, located.identity
    lock.acquire(located.folder)  # one sweep per folder; released when the flow ends (or the process dies)
    # An artifact moved aside and recomputed is told: in the run's log, and on stderr for `spica sweep`.
    rd = RunDir(located.folder, downstream(from_stage) if from_stage else (), on_set_aside=report_set_aside)
    held = rd.rows("config")[0]["run_id"] if rd.readable("config") else identity.run_id
    if held != identity.run_id:
        raise RunDirError(f"{rd.path} holds a different run ({held}); choose another --run-dir")
    policies = filter_for_goal(config)
    if policies.dropped:
        print(f"dropped planner policies {policies.dropped}: {policies.reason}")
    inputs = CATALOG["config"].fingerprint(config=identity.config_fingerprint, trace=identity.trace_fingerprint,
                                           engines=identity.engines)
    if not rd.fresh("config", inputs):
        rd.write("config", config_rows(config, identity, trace), inputs)
    return ValidatedRun(config, with_policies(config, policies.kept), policies, identity, rd, trace, warm,
                        located.calibration, located.runs_root)

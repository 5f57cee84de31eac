"""The re-sweep flow: sweep again only when the traffic changed, warm-started from the last run."""
from __future__ import annotations

from prefect import flow
from prefect.states import Completed, Failed, State

from flows.sweep import sweep
from spica_core.config.model import SmartSearchConfig
from spica_core.errors import ConfigError, Issue, SpicaError
from spica_core.search import SweepSummary
from tasks.resweep import trace_change_task
from tasks.stage import one_line


@flow(name="spica-resweep", log_prints=True)
def resweep(config: SmartSearchConfig | None = None, config_path: str | None = None,
            runs_root: str = "runs") -> SweepSummary | State:
    """Re-sweep when the configured trace changed: fingerprint it, find the config's latest run under
    runs_root; unchanged → finish at once without an evaluation; changed → a new run whose first
    evaluations are the previous run's top candidates, replayed on the new trace.

    Args:
        config: The config itself (as for spica-sweep). Give this or config_path.
        config_path: A config YAML file instead of config, relative to the working directory.
        runs_root: Where the runs of this config live (and where the new run goes).
    """
    try:
        if (config is None) == (config_path is None):
            raise ConfigError("re-sweep parameters", [Issue("config", "give exactly one of config and config_path")])
        change = trace_change_task(config_path, runs_root, config)
        if not change.changed:
            return Completed(message=change.message)
        return sweep(config=config, config_path=config_path, runs_root=runs_root,
                     warm_start=str(change.previous) if change.previous else None)
    except SpicaError as exc:
        return Failed(message=one_line(exc), data=exc)

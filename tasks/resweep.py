"""The re-sweep's first stage: has the configured trace changed since the config's latest run?"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from spica_core.config.model import SmartSearchConfig
from spica_core.run.identity import locate
from spica_core.search import latest_run
from tasks.stage import stage


@dataclass(frozen=True)
class TraceChange:
    run_id: str                 # the run this config and trace would make
    previous: Path | None       # the config's latest ranked run, if any
    changed: bool               # False: that run already used this very trace

    @property
    def message(self) -> str:
        if self.previous is None:
            return "no earlier run of this config: a full sweep"
        if not self.changed:
            return f"the trace is unchanged since run {self.previous.name} ({self.previous}): nothing to evaluate"
        return f"the trace changed since run {self.previous.name}: a new run, warm-started from it"


@stage("trace changed?", retries=2, log_prints=True)
def trace_change_task(config_path: str | None, runs_root: str, config: SmartSearchConfig | None = None) -> TraceChange:
    located = locate(config if config is not None else config_path, runs_root)  # type: ignore[arg-type]
    found = latest_run(runs_root, located.identity.config_fingerprint)
    if found is None:
        change = TraceChange(located.identity.run_id, None, True)
    else:
        folder, trace = found
        change = TraceChange(located.identity.run_id, folder, trace != located.identity.trace_fingerprint)
    print(change.message)
    return change

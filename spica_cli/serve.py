"""``spica serve`` and ``spica watch``: the deployments for the UI, and the event that re-sweeps them."""
from __future__ import annotations

import os
import time
from pathlib import Path

from spica_core.errors import SpicaError


def _need_api(command: str) -> None:
    if not os.environ.get("PREFECT_API_URL"):
        raise SpicaError(f"spica {command} needs a Prefect server: start one with `prefect server start --host "
                         "127.0.0.1`, then set PREFECT_API_URL=http://127.0.0.1:4200/api")


def serve_command(resweep_config: str | None, interval: float | None, cron: str | None) -> int:
    """Serves spica-sweep/local and spica-resweep/local (the latter on a schedule when given a config)."""
    _need_api("serve")
    if (interval or cron) and resweep_config is None:
        raise SpicaError("--interval and --cron schedule the re-sweep of a config: give it with --resweep CONFIG")
    if resweep_config is not None:
        from spica_core.run.inputs import load_inputs

        load_inputs(resweep_config)  # a bad config fails here, not at every scheduled run
        resweep_config = str(Path(resweep_config).resolve())
    from deployments.serve import serve_all

    serve_all(resweep_config, interval, cron)
    return 0


def watch_command(config_path: str, runs_root: str, every: float, once: bool) -> int:
    """Emits ``spica.trace.changed`` whenever the configured trace's content fingerprint changes."""
    _need_api("watch")
    from prefect.events import emit_event

    from deployments.serve import TRACE_CHANGED
    from spica_core.store import file_fingerprint
    from spica_core.run.inputs import load_inputs

    config = str(Path(config_path).resolve())
    trace = load_inputs(config).trace_file
    if trace is None:
        raise SpicaError(f"{config_path}: workload.trace_path is not set; spica watch follows a trace file")
    last = file_fingerprint(trace)
    print(f"watching {trace} (fingerprint {last[:12]}); a change emits {TRACE_CHANGED}", flush=True)
    while True:
        time.sleep(every)
        if not trace.is_file():
            continue
        now = file_fingerprint(trace)
        if now != last:
            emit_event(event=TRACE_CHANGED, resource={"prefect.resource.id": f"spica.trace.{now[:16]}",
                                                      "prefect.resource.name": str(trace)},
                       payload={"config_path": config, "runs_root": str(Path(runs_root).resolve()),
                                "trace_fingerprint": now, "previous_fingerprint": last})
            print(f"{trace} changed ({last[:12]} → {now[:12]}): emitted {TRACE_CHANGED}", flush=True)
            last = now
            if once:
                return 0

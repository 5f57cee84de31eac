"""The sweep flow: composition only; every stage is a task in ``tasks/`` writing one artifact."""
from __future__ import annotations

from prefect import flow

from tasks.validate import ValidatedRun, validate_config


@flow(name="spica-sweep", log_prints=True)
def sweep(config_path: str, runs_root: str = "runs", run_dir: str | None = None) -> str:
    """Validate → (enumerate branches → KV filter, load-predictor sub-sweep) → Vizier rounds → rank."""
    run: ValidatedRun = validate_config(config_path, runs_root, run_dir)
    return str(run.run_dir.path)

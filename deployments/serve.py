"""Serve the sweep flow so it can be started from the Prefect UI.

    prefect server start --host 127.0.0.1 &          # the UI at http://127.0.0.1:4200
    PREFECT_API_URL=http://127.0.0.1:4200/api python -m deployments.serve   # from the repo root

Then start "spica-sweep/local" from the UI (Deployments → Run) with a config path, or run
`prefect deployment run spica-sweep/local -p config_path=examples/quickstart.yaml`.
"""
from __future__ import annotations

from flows.sweep import sweep

if __name__ == "__main__":
    sweep.serve(name="local", parameters={"config_path": "examples/quickstart.yaml", "runs_root": "runs"})

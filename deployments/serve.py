"""The deployments of the sweep flow, served from this process (no work pool needed).

    prefect server start --host 127.0.0.1 &                       # the UI at http://127.0.0.1:4200
    PREFECT_API_URL=http://127.0.0.1:4200/api spica serve         # from the folder runs/ should go in

Then start "spica-sweep/local" from the UI (Deployments → Run → Custom run): fill in the config
form, or give config_path instead. `prefect.yaml` defines the same deployment for a work pool.
"""
from __future__ import annotations

from prefect import serve
from prefect.deployments.runner import RunnerDeployment

from flows.sweep import sweep

DESCRIPTION = ("Find the best NVIDIA Dynamo deployment for a model, GPU type, budget and traffic. Give the config "
               "in the form (config) or a YAML path (config_path); relative paths resolve against the folder "
               "`spica serve` was started in.")


def deployments() -> list[RunnerDeployment]:
    return [sweep.to_deployment(name="local", description=DESCRIPTION, tags=["spica"],
                                parameters={"runs_root": "runs"})]


def serve_all() -> None:
    """Blocks until interrupted; each flow run executes in a subprocess of this one."""
    serve(*deployments(), print_starting_message=True)


if __name__ == "__main__":
    serve_all()

"""The deployments of the sweep flows, served from this process (no work pool needed).

    prefect server start --host 127.0.0.1 &                       # the UI at http://127.0.0.1:4200
    PREFECT_API_URL=http://127.0.0.1:4200/api spica serve         # from the folder runs/ should go in

``spica-sweep/local`` runs a sweep from the form. ``spica-resweep/local`` re-sweeps when the traffic
changed: on a ``spica.trace.changed`` event (``spica watch CONFIG`` emits it), and, when a config and
an interval or cron are given to ``spica serve``, on that schedule. ``prefect.yaml`` defines the same
deployments for a work pool.
"""
from __future__ import annotations

from prefect import serve
from prefect.deployments.runner import RunnerDeployment
from prefect.events import DeploymentEventTrigger

from flows.resweep import resweep
from flows.sweep import sweep

TRACE_CHANGED = "spica.trace.changed"
SWEEP_DESCRIPTION = ("Find the best NVIDIA Dynamo deployment for a model, GPU type, budget and traffic. Give the "
                     "config in the form (config) or a YAML path (config_path); relative paths resolve against the "
                     "folder `spica serve` was started in.")
RESWEEP_DESCRIPTION = ("Re-sweep a config when its trace changed, warm-started from its latest run; an unchanged "
                       "trace finishes at once. Runs on spica.trace.changed events (spica watch CONFIG) and on the "
                       "schedule given to spica serve.")


def trace_changed_trigger() -> DeploymentEventTrigger:
    """Re-sweep the config the event names (``spica watch`` puts its path in the payload)."""
    return DeploymentEventTrigger(name="trace changed", expect={TRACE_CHANGED},
                                  match={"prefect.resource.id": "spica.trace.*"},
                                  parameters={"config_path": "{{ event.payload.config_path }}",
                                              "runs_root": "{{ event.payload.runs_root }}"})


def deployments(resweep_config: str | None = None, interval: float | None = None,
                cron: str | None = None) -> list[RunnerDeployment]:
    schedule: dict[str, object] = {}
    if resweep_config is not None:
        schedule = {"interval": interval} if interval else {"cron": cron} if cron else {}
    parameters: dict[str, object] = {"runs_root": "runs"}
    if resweep_config is not None:
        parameters["config_path"] = resweep_config
    return [sweep.to_deployment(name="local", description=SWEEP_DESCRIPTION, tags=["spica"],
                                parameters={"runs_root": "runs"}),
            resweep.to_deployment(name="local", description=RESWEEP_DESCRIPTION, tags=["spica"],
                                  parameters=parameters, triggers=[trace_changed_trigger()], **schedule)]


def serve_all(resweep_config: str | None = None, interval: float | None = None, cron: str | None = None) -> None:
    """Blocks until interrupted; each flow run executes in a subprocess of this one."""
    serve(*deployments(resweep_config, interval, cron), print_starting_message=True)


if __name__ == "__main__":
    serve_all()

"""The re-sweep deployment: `spica watch` emits spica.trace.changed and the served trigger re-sweeps."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO
from examples.make_traces import write_poisson_trace
from test_deployment import _api, free_port, stop, wait_for
from test_resweep import CONFIG


@pytest.mark.slow
def test_a_trace_change_seen_by_spica_watch_triggers_a_served_resweep(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(CONFIG.replace("max_rounds: 2", "max_rounds: 1"))
    write_poisson_trace(tmp_path / "trace.jsonl", num_requests=60, rate_rps=8, isl=2000, osl=100, seed=1)
    port = free_port()
    api = f"http://127.0.0.1:{port}/api"
    env = {**os.environ, "PREFECT_HOME": str(tmp_path / "prefect"), "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
           "DO_NOT_TRACK": "1"}
    procs: list[subprocess.Popen[bytes]] = []

    def start(*args: str) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen([sys.executable, *args], cwd=REPO, env={**env, "PREFECT_API_URL": api},
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        procs.append(proc)
        return proc

    procs.append(subprocess.Popen([sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1",
                                   "--port", str(port)], cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL, start_new_session=True))
    try:
        wait_for(f"{api}/health", 180)
        start("-m", "spica_cli.main", "serve")
        wait_for(f"{api}/deployments/name/spica-resweep/local", 120)
        _, deployment = _api(api, "/deployments/name/spica-resweep/local")
        assert isinstance(deployment, dict)
        # `spica serve` registers the trigger's automation after the deployment: wait until the server has it
        # (the server loads a new automation into its triggers when the creation commits), not for a guessed 3 s
        deadline = time.monotonic() + 120
        while True:
            _, automations = _api(api, f"/automations/related-to/prefect.deployment.{deployment['id']}")
            if isinstance(automations, list) and any(a.get("enabled", True) for a in automations):
                break
            assert time.monotonic() < deadline, f"no automation for the re-sweep deployment: {automations}"
            time.sleep(0.2)
        watcher = subprocess.Popen([sys.executable, "-m", "spica_cli.main", "watch", str(config), "--runs-root",
                                    str(tmp_path / "runs"), "--every", "0.5", "--once"], cwd=REPO,
                                   env={**env, "PREFECT_API_URL": api}, stdout=subprocess.PIPE,
                                   stderr=subprocess.DEVNULL, start_new_session=True, text=True)
        procs.append(watcher)  # type: ignore[arg-type]
        assert watcher.stdout is not None and watcher.stdout.readline().startswith("watching ")  # baseline taken
        write_poisson_trace(tmp_path / "trace.jsonl", num_requests=60, rate_rps=16, isl=2000, osl=100, seed=2)
        assert watcher.wait(timeout=120) == 0
        deadline = time.monotonic() + 400
        while True:
            _, runs = _api(api, "/flow_runs/filter",
                           {"flow_runs": {"deployment_id": {"any_": [deployment["id"]]}}})
            assert isinstance(runs, list)
            done = [r for r in runs if r["state"]["type"] in ("COMPLETED", "FAILED", "CRASHED")]
            if done:
                break
            assert time.monotonic() < deadline, runs
            time.sleep(2)
        [run] = done
        assert run["state"]["type"] == "COMPLETED", run["state"]
        assert run["parameters"]["config_path"] == str(config.resolve())
        [folder] = list((tmp_path / "runs").iterdir())
        assert (folder / "ranking.parquet").exists()
    finally:
        for proc in reversed(procs):
            stop(proc)

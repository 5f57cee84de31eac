"""The served flow, started the way the Prefect UI starts it: a local server, `serve`, a deployment run."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from conftest import REPO

TINY = """search_space:
  model_name: Qwen/Qwen3-32B
  hardware_sku: h200_sxm
  gpu_budget: 4
  deployment_mode: [agg]
  parallel_configs: [{tp: 2, replicas: 2}]
  agg_max_num_seqs: [256, 512]
  agg_max_num_batched_tokens: [8192]
  router_mode: [round_robin]
  planner_scaling_policy: [disabled]
workload: {isl: 1000, osl: 50, concurrency: 4, num_request_ratio: 2}
sweep: {max_rounds: 1, candidates_per_round: 2, parallel_evals: 1, algorithm: RANDOM_SEARCH}
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(url: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=5) as resp:
                if resp.status == 200:
                    return
        except OSError:
            pass
        time.sleep(1)
    raise TimeoutError(url)


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


@pytest.mark.slow
def test_served_deployment_runs_a_sweep(tmp_path: Path) -> None:
    port = free_port()
    api = f"http://127.0.0.1:{port}/api"
    env = {**os.environ, "PREFECT_HOME": str(tmp_path / "prefect"), "PREFECT_API_URL": api,
           "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "DO_NOT_TRACK": "1"}
    config = tmp_path / "tiny.yaml"
    config.write_text(TINY)
    server = subprocess.Popen([sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1",
                               "--port", str(port)], cwd=REPO, env={k: v for k, v in env.items()
                                                                    if k != "PREFECT_API_URL"},
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    served = None
    try:
        wait_for(f"{api}/health", 180)
        served = subprocess.Popen([sys.executable, "-m", "deployments.serve"], cwd=REPO, env=env,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        wait_for(f"{api}/deployments/name/spica-sweep/local", 120)
        run = subprocess.run([sys.executable, "-m", "prefect", "deployment", "run", "spica-sweep/local",
                              "-p", f"config_path={config}", "-p", f"runs_root={tmp_path / 'runs'}",
                              "--watch", "--watch-timeout", "300"], cwd=REPO, env=env, capture_output=True,
                             text=True, timeout=400)
        assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
        [run_dir] = list((tmp_path / "runs").iterdir())
        ranking = pq.read_table(run_dir / "ranking.parquet").to_pylist()
        assert len(ranking) == 2 and ranking[0]["score"] >= ranking[1]["score"] > 0
    finally:
        if served is not None:
            stop(served)
        stop(server)

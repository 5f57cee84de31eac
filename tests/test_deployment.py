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


def _api(api: str, path: str, body: dict | None = None) -> tuple[int, object]:
    """One JSON call to the local Prefect API: (status, decoded body); a busy server (503) is asked again."""
    import json
    import urllib.error

    for _ in range(30):
        request = urllib.request.Request(f"{api}{path}", data=None if body is None else json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"},
                                         method="GET" if body is None else "POST")
        try:
            with urllib.request.urlopen(request, timeout=30) as resp:
                return resp.status, json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as exc:
            if exc.code != 503:
                return exc.code, json.loads(exc.read() or b"null")
        time.sleep(1)
    raise TimeoutError(f"{api}{path} stayed unavailable")


@pytest.mark.slow
def test_spica_serve_runs_an_inline_config_from_the_api_and_publishes_artifacts(tmp_path: Path) -> None:
    import yaml

    port = free_port()
    api = f"http://127.0.0.1:{port}/api"
    env = {**os.environ, "PREFECT_HOME": str(tmp_path / "prefect"), "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
           "DO_NOT_TRACK": "1"}
    server = subprocess.Popen([sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1",
                               "--port", str(port)], cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, start_new_session=True)
    served = None
    try:
        wait_for(f"{api}/health", 180)
        served = subprocess.Popen([sys.executable, "-m", "spica_cli.main", "serve"], cwd=REPO,
                                  env={**env, "PREFECT_API_URL": api}, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL, start_new_session=True)
        wait_for(f"{api}/deployments/name/spica-sweep/local", 120)
        _, deployment = _api(api, "/deployments/name/spica-sweep/local")
        assert isinstance(deployment, dict)
        schema = deployment["parameter_openapi_schema"]
        assert {"config", "config_path", "runs_root", "run_dir", "seed"} <= set(schema["properties"])
        assert schema["properties"]["config_path"]["description"].startswith("A config YAML file")

        config = yaml.safe_load(TINY)
        bad = {**config, "search_space": {**config["search_space"], "gpu_budget": 100000}}
        status, body = _api(api, f"/deployments/{deployment['id']}/create_flow_run",
                            {"parameters": {"config": bad, "run_dir": str(tmp_path / "bad")}})
        assert status in (409, 422) and "gpu_budget" in json_text(body), body  # refused at run creation
        print("refused:", json_text(body)[:400])

        run_dir = tmp_path / "run"
        status, flow_run = _api(api, f"/deployments/{deployment['id']}/create_flow_run",
                                {"parameters": {"config": config, "run_dir": str(run_dir)}})
        assert status == 201 and isinstance(flow_run, dict), flow_run
        deadline = time.monotonic() + 400
        while True:
            _, current = _api(api, f"/flow_runs/{flow_run['id']}")
            assert isinstance(current, dict)
            if current["state"]["type"] in ("COMPLETED", "FAILED", "CRASHED", "CANCELLED"):
                break
            assert time.monotonic() < deadline, current["state"]
            time.sleep(2)
        assert current["state"]["type"] == "COMPLETED", current["state"]

        ranking = pq.read_table(run_dir / "ranking.parquet").to_pylist()
        assert len(ranking) == 2
        _, artifacts = _api(api, "/artifacts/filter", {"artifacts": {"flow_run_id": {"any_": [flow_run["id"]]}}})
        assert isinstance(artifacts, list)
        run_id = pq.read_table(run_dir / "config.parquet").to_pylist()[0]["run_id"]
        keys = {a["key"] for a in artifacts if a.get("key")}
        assert {f"spica-{run_id[:12]}-{name}" for name in ("progress", "ranking", "summary", "report")} <= keys
        [progress] = [a for a in artifacts if a.get("key") == f"spica-{run_id[:12]}-progress"]
        assert progress["data"] == 100.0
        [table] = [a for a in artifacts if a.get("key") == f"spica-{run_id[:12]}-ranking"]
        rows = json_rows(table["data"])
        assert [r["rank"] for r in rows] == [1, 2] and all(r["score"].endswith("tok/s") for r in rows)
    finally:
        for proc in (served, server):
            if proc is not None:
                stop(proc)


def json_text(body: object) -> str:
    import json

    return json.dumps(body)


def json_rows(data: object) -> list[dict]:
    import json

    return json.loads(data) if isinstance(data, str) else list(data)  # type: ignore[arg-type]

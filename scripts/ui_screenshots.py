"""Screenshots of the Prefect UI for docs/prefect.md, taken in headless Chromium (Debian's `chromium`).

    .venv/bin/python scripts/ui_screenshots.py      # ~2 min; writes docs/img/ui-*.png

Starts a local Prefect server and `spica serve` on 127.0.0.1, starts the quick start from the API
with the config inline (as the form does), photographs the form, the running sweep and the finished
run's artifacts, and stops everything it started.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "docs" / "img"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def call(api: str, path: str, body: dict | None = None) -> object:
    request = urllib.request.Request(f"{api}{path}", data=None if body is None else json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"},
                                     method="GET" if body is None else "POST")
    with urllib.request.urlopen(request, timeout=30) as resp:
        return json.loads(resp.read() or b"null")


def wait(url: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(1)


def shoot(url: str, name: str, height: int = 1100) -> None:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        raise SystemExit("needs Debian's chromium: apt-get install chromium")
    subprocess.run([browser, "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    f"--window-size=1500,{height}", "--virtual-time-budget=20000",
                    f"--screenshot={OUT / name}", url], check=True, capture_output=True, timeout=120)
    print("wrote", OUT / name)


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    port = free_port()
    ui, api = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{port}/api"
    with tempfile.TemporaryDirectory(prefix="spica-ui-") as tmp:
        env = {**os.environ, "PREFECT_HOME": f"{tmp}/prefect", "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
               "DO_NOT_TRACK": "1", "PREFECT_UI_API_URL": api}
        env.pop("PREFECT_API_URL", None)
        procs = [subprocess.Popen([sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1",
                                   "--port", str(port)], cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL, start_new_session=True)]
        try:
            wait(f"{api}/health", 180)
            procs.append(subprocess.Popen([sys.executable, "-m", "spica_cli.main", "serve"], cwd=REPO,
                                          env={**env, "PREFECT_API_URL": api}, stdout=subprocess.DEVNULL,
                                          stderr=subprocess.DEVNULL, start_new_session=True))
            wait(f"{api}/deployments/name/spica-sweep/local", 120)
            deployment = call(api, "/deployments/name/spica-sweep/local")
            assert isinstance(deployment, dict)
            shoot(f"{ui}/deployments/deployment/{deployment['id']}/run", "ui-form.png", 1400)
            config = yaml.safe_load((REPO / "examples" / "quickstart.yaml").read_text())
            run = call(api, f"/deployments/{deployment['id']}/create_flow_run",
                       {"parameters": {"config": config, "run_dir": f"{tmp}/run"}})
            assert isinstance(run, dict)
            deadline = time.monotonic() + 300
            while not Path(f"{tmp}/run/trials.parquet").exists() and time.monotonic() < deadline:
                time.sleep(0.5)
            time.sleep(6)
            shoot(f"{ui}/runs/flow-run/{run['id']}", "ui-running.png")
            while call(api, f"/flow_runs/{run['id']}")["state"]["type"] not in ("COMPLETED", "FAILED", "CRASHED"):  # type: ignore[index]
                time.sleep(2)
            shoot(f"{ui}/runs/flow-run/{run['id']}?tab=Artifacts", "ui-artifacts.png")
            artifacts = call(api, "/artifacts/filter", {"artifacts": {"flow_run_id": {"any_": [run["id"]]}}})
            assert isinstance(artifacts, list)
            for suffix, name in (("-ranking", "ui-ranking.png"), ("-summary", "ui-summary.png")):
                [artifact] = [a for a in artifacts if (a.get("key") or "").endswith(suffix)]
                shoot(f"{ui}/artifacts/artifact/{artifact['id']}", name)
        finally:
            for proc in reversed(procs):
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(timeout=30)


if __name__ == "__main__":
    main()

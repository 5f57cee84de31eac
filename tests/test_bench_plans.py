"""Benchmark plans (spica_core/emit/bench_plans.py): an AIPerf command next to each manifest that sends the
requests the replay ran to the deployed frontend, and names what it measured."""
from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from spica_core.config.model import SmartSearchConfig
from spica_core.emit import EmitOptions, write_manifests
from spica_core.emit.bench_plans import AIPERF, PLAN_FILE, target_of, write_plans
from spica_core.evaluate.workload import request_count
from tests.test_report import PROVENANCE, SCALAR_GOAL, SPACE, records_of, scalar_trials

# A stand-in for AIPerf that records how the plan called it (the real client's own run is for a later test).
FAKE_AIPERF = """#!/usr/bin/env bash
printf '%s\\n' "$@" > "$AIPERF_ARGS"
"""


def _config(workload: dict[str, Any]) -> SmartSearchConfig:
    return SmartSearchConfig.from_dict({"search_space": SPACE, "workload": workload, "goal": SCALAR_GOAL})


def _plans(tmp_path: Path, workload: dict[str, Any], trace: Path | None = None) -> tuple[dict[int, Path], Any]:
    cfg = _config(workload)
    records = records_of(scalar_trials(), cfg)
    manifests, _ = write_manifests(tmp_path / "manifests", records, EmitOptions.for_goal(cfg.goal, top=2), PROVENANCE)
    return write_plans(tmp_path / "benchmarks", manifests, records, cfg, trace, PROVENANCE), (cfg, records, manifests)


def _run(script: Path, tmp_path: Path, **env: str) -> list[str]:
    fake = tmp_path / "bin" / "aiperf"
    fake.parent.mkdir(exist_ok=True)
    fake.write_text(FAKE_AIPERF)
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    args = tmp_path / "args.txt"
    subprocess.run(["bash", str(script)], check=True, timeout=60, cwd=tmp_path,
                   env={**os.environ, "PATH": f"{fake.parent}:{os.environ['PATH']}", "AIPERF_ARGS": str(args), **env})
    return args.read_text().splitlines()


def _value(args: list[str], flag: str) -> str:
    return args[args.index(flag) + 1]


def test_a_closed_loop_plan_replays_the_synthetic_requests_at_the_sweeps_concurrency(tmp_path: Path) -> None:
    workload = {"isl": 4000, "osl": 200, "concurrency": 64, "num_request_ratio": 10, "length_spread": 0.2}
    plans, (cfg, records, manifests) = _plans(tmp_path, workload)
    assert sorted(plans) == sorted(manifests) == [1, 2]
    args = _run(plans[1], tmp_path)
    assert args[0] == "profile" and _value(args, "--concurrency") == "64" and "--no-fixed-schedule" in args
    assert _value(args, "--custom-dataset-type") == "mooncake_trace" and "--fixed-schedule" not in args
    assert "--use-server-token-count" in args   # output tokens as the deployment counts them, not the client
    rows = [json.loads(line) for line in Path(_value(args, "--input-file")).read_text().splitlines()]
    assert len(rows) == request_count(cfg.workload) == 640 == int(_value(args, "--request-count"))
    assert all(3200 <= r["input_length"] <= 4000 and 160 <= r["output_length"] <= 200 for r in rows)
    assert len({r["input_length"] for r in rows}) > 1  # spread as the replay spread them
    doc = yaml.safe_load(next(iter(manifests.values())).read_text())
    target = target_of(doc)
    assert _value(args, "--url") == target.url == (f"http://{doc['metadata']['name']}-frontend.default.svc.cluster."
                                                   "local:8000")
    assert _value(args, "--model") == target.model == SPACE["model_name"] == _value(args, "--tokenizer")
    out = Path(_value(args, "--artifact-dir"))
    assert out == plans[1].parent / "results" / target.name
    plan = json.loads((out / PLAN_FILE).read_text())
    assert (plan["rank"], plan["manifest"], plan["aiperf"]) == (1, target.name, AIPERF)
    assert (plan["requests"], plan["concurrency"]) == (640, 64)
    assert plan["candidate"] == records[0].candidate.to_sample()
    assert plan["config_fingerprint"] == PROVENANCE.config_fingerprint


def test_the_url_model_and_results_folder_can_be_overridden(tmp_path: Path) -> None:
    plans, _ = _plans(tmp_path, {"isl": 1000, "osl": 100, "concurrency": 8, "num_request_ratio": 2})
    args = _run(plans[2], tmp_path, URL="http://localhost:8000", MODEL="served", OUT=str(tmp_path / "mine"))
    assert (_value(args, "--url"), _value(args, "--model"), _value(args, "--tokenizer")) == (
        "http://localhost:8000", "served", "served")
    assert Path(_value(args, "--artifact-dir")).parent == tmp_path / "mine"
    rows = Path(_value(args, "--input-file")).read_text().splitlines()
    assert {json.loads(r)["input_length"] for r in rows} == {1000} and len(rows) == 16


def test_an_open_loop_trace_keeps_its_timestamps_sped_up_as_the_replay_was(tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    trace.write_text("".join(json.dumps({"timestamp": t, "input_length": 600, "output_length": 20,
                                         "hash_ids": [t, t + 1]}) + "\n" for t in (0, 1000, 3000)))
    plans, _ = _plans(tmp_path, {"trace_path": str(trace), "arrival_speedup_ratio": 2.0}, trace)
    args = _run(plans[1], tmp_path)
    assert "--fixed-schedule" in args and "--concurrency" not in args
    sent = [json.loads(r) for r in Path(_value(args, "--input-file")).read_text().splitlines()]
    assert [r["timestamp"] for r in sent] == [0, 500, 1500] and [r["hash_ids"] for r in sent] == [[0, 1], [1000, 1001],
                                                                                                    [3000, 3001]]
    closed, _ = _plans(tmp_path / "closed", {"trace_path": str(trace), "replay_concurrency": 4}, trace)
    args = _run(closed[1], tmp_path)
    assert _value(args, "--concurrency") == "4" and "--no-fixed-schedule" in args


@pytest.mark.parametrize(("workload", "why"), [
    ({"isl": 1000, "osl": 100, "concurrency": 8, "num_request_ratio": 2, "shared_prefix_ratio": 0.5,
      "num_prefix_groups": 2}, "shared-prefix"),
    ({"trace_path": "gone.jsonl"}, "trace file is not here"),
])
def test_traffic_a_plan_cannot_express_gets_a_note_not_a_plan(tmp_path: Path, workload: dict[str, Any],
                                                               why: str) -> None:
    plans, (_, _, manifests) = _plans(tmp_path, workload)
    assert plans == {} and manifests
    for rank in manifests:
        assert why in (tmp_path / "benchmarks" / f"rank-{rank}.txt").read_text()


# ---------------------------------------------------------------- the real client

@pytest.mark.slow
def test_the_real_aiperf_runs_a_plan_against_dynamos_frontend_and_measures_what_it_sent(tmp_path: Path) -> None:
    from tests.dynamo_fixture import run_plan

    plans, _ = _plans(tmp_path, {"isl": 60, "osl": 8, "concurrency": 2, "num_request_ratio": 3})
    run_plan(plans[1], tmp_path, tmp_path / "measured")
    [folder] = list((tmp_path / "measured").iterdir())
    export = json.loads((folder / "profile_export_aiperf.json").read_text())
    assert export["request_count"]["avg"] == 6                    # each of the 2 × 3 replayed requests, once
    assert export["input_sequence_length"]["avg"] == 60 and export["output_sequence_length"]["avg"] == 8
    assert export["time_to_first_token"]["avg"] > 0 and export["inter_token_latency"]["avg"] > 0
    assert json.loads((folder / PLAN_FILE).read_text())["rank"] == 1

"""The CLI contract: exit 0 on valid configs, exit 2 with field paths and no traceback otherwise."""
from __future__ import annotations

import io
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from conftest import EXAMPLES, REPO
from spica_cli.main import main
from spica_core.config import SmartSearchConfig
from spica_core.run.identity import config_from_row, identify
from tasks.validate import validate_config

# What each bundled example is for, as `spica validate` summarises it (the start of each summary line).
EXAMPLE_SUMMARIES: dict[str, dict[str, str]] = {
    "quickstart.yaml": {
        "branches": "agg, disagg (one Vizier study each); backends vllm",
        "workload": "synthetic isl 4000 / osl 500, concurrency 32 (closed loop)",
        "goal": "goodput_per_gpu, SLA ttft_ms=2000.0, itl_ms=40.0 held by at least 90 % of requests (planner target 'sla')",
    },
    "cost.yaml": {
        "goal": "cost_per_mtok, SLA ttft_ms=2000.0, itl_ms=40.0 held by at least 90 % of requests (planner target 'sla')",
        "GPU prices": "h100_sxm 3 USD/GPU-hour, h200_sxm 4 USD/GPU-hour",
    },
    "mixed_gpus.yaml": {
        "GPU types": "agg h100_sxm or h200_sxm; prefill h100_sxm; decode h200_sxm (inventory 4 × h100_sxm, 8 × h200_sxm)",
        "GPU prices": "h100_sxm 3 USD/GPU-hour, h200_sxm 4 USD/GPU-hour",
    },
    "deepseek_v3_trace.yaml": {
        "branches": "disagg, agg (one Vizier study each); backends vllm",
        "GPU types": "h200_sxm",
        "pinned context": "model_name=deepseek-ai/DeepSeek-V3, gpu_budget=32",
        "workload": "mooncake trace traces/sine_prefix.jsonl (open loop",
        "goal": "goodput_per_gpu, SLA ttft_ms=2000.0, itl_ms=30.0 held by at least 90 % of requests (planner target 'sla')",
    },
    "mooncake_qwen3_32b.yaml": {
        "workload": "mooncake trace traces/mooncake_synthetic_trace.jsonl (open loop",
        "over context": "307 requests (7.7% of requests, 28.6% of tokens) exceed the context; left out of the replay",
    },
    "pareto_kv_load.yaml": {
        "branches": "disagg (one Vizier study each); backends vllm, sglang",
        "workload": "synthetic isl 1000 / osl 1000, kv_load_ratio [0.05, 1.0]",
        "goal": "pareto [throughput_per_gpu, throughput_per_user] (planner target 'throughput')",
    },
    "router_only.yaml": {
        "branches": "agg (one Vizier study each); backends vllm",
        "parallel configs": "pinned",
        "workload": "mooncake trace traces/shared_prefix.jsonl (closed loop, 24 in flight)",
        "goal": "e2e_latency (planner target 'latency')",
    },
}


def summary_lines(out: str) -> dict[str, str]:
    """``label : value`` lines of a validate summary, keyed by label."""
    return {m[1]: m[2] for m in re.finditer(r"^(\w[\w ]*?)\s*: (.*)$", out, re.MULTILINE)}


def test_every_bundled_example_has_its_summary() -> None:
    assert sorted(p.name for p in EXAMPLES.glob("*.yaml")) == sorted(EXAMPLE_SUMMARIES)


@pytest.mark.parametrize("name", sorted(EXAMPLE_SUMMARIES))
def test_validate_summarises_each_example(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(EXAMPLES / name)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("config is valid\n")
    lines = summary_lines(out)
    for label, start in EXAMPLE_SUMMARIES[name].items():
        assert lines.get(label, "").startswith(start), f"{name} {label}: {lines.get(label)!r}"


def test_validate_summary_counts_choices(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(EXAMPLES / "router_only.yaml")]) == 0
    out = capsys.readouterr().out
    assert "prefill_load_scale" in out and "7 choices" in out
    assert "parallel configs: pinned" in out


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "c.yaml"
    p.write_text(text)
    return p


GOOD = """search_space:
  model_name: Qwen/Qwen3-32B
  hardware_sku: h200_sxm
  router_mode: [kv_router, rr]
workload: {isl: 100, osl: 10, concurrency: 4, num_request_ratio: 1}
"""


def test_validate_rejects_with_path_value_and_allowed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(write(tmp_path, GOOD))]) == 2
    err = capsys.readouterr().err
    assert "search_space.router_mode[1]" in err and "'rr'" in err and "round_robin" in err
    assert "Traceback" not in err


def test_malformed_yaml_gives_line_and_column(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(write(tmp_path, "search_space:\n  model_name: [a\nworkload: {}\n"))]) == 2
    err = capsys.readouterr().err
    assert "malformed YAML at line 3" in err and "column" in err


def test_missing_trace_file_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = write(tmp_path, "search_space: {model_name: Qwen/Qwen3-32B, hardware_sku: h200_sxm}\n"
                        "workload: {trace_path: nope.jsonl}\n")
    assert main(["validate", str(p)]) == 2
    err = capsys.readouterr().err
    assert "workload.trace_path" in err and "nope.jsonl" in err


def test_missing_config_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(tmp_path / "absent.yaml")]) == 2
    assert "config file not found" in capsys.readouterr().err


def test_output_into_a_closed_pipe_exits_0_without_an_error(monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """`spica schema | head -1`: the reader went away, which is not the user's mistake (BrokenPipeError is an
    OSError, so it must be caught first)."""
    class ClosedPipe(io.StringIO):
        def write(self, text: str) -> int:
            raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(sys, "stdout", ClosedPipe())
    assert main(["schema"]) == 0
    assert capsys.readouterr().err == ""


def test_schema_is_json_schema(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schema"]) == 0
    schema = json.loads(capsys.readouterr().out)
    assert set(schema["properties"]) == {"search_space", "workload", "goal", "sweep"}
    assert schema["required"] == ["search_space", "workload"]
    defs = schema["$defs"]
    assert defs["SearchSpace"]["additionalProperties"] is False


def test_cli_process_exits_2_without_traceback(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "spica_cli.main", "validate", str(write(tmp_path, GOOD))],
                          capture_output=True, text=True, cwd=REPO, timeout=120)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and "search_space.router_mode[1]" in proc.stderr


# ---------------------------------------------------------------- the first stage: config.parquet


def test_validate_stage_writes_config_parquet_that_reads_back_equal(tmp_path: Path) -> None:
    run = validate_config.fn(str(EXAMPLES / "quickstart.yaml"), run_dir=str(tmp_path / "run"))
    table = pq.read_table(tmp_path / "run" / "config.parquet")
    row = table.to_pylist()[0]
    assert row["run_id"] == run.identity.run_id
    assert config_from_row(row) == SmartSearchConfig.from_yaml(EXAMPLES / "quickstart.yaml")


def test_run_id_is_stable_and_follows_the_trace(tmp_path: Path) -> None:
    shutil.copy(EXAMPLES / "router_only.yaml", tmp_path / "c.yaml")
    (tmp_path / "traces").mkdir()
    trace = tmp_path / "traces" / "shared_prefix.jsonl"
    shutil.copy(EXAMPLES / "traces" / "shared_prefix.jsonl", trace)
    config = SmartSearchConfig.from_yaml(tmp_path / "c.yaml")
    first = identify(config, config.trace_file(tmp_path)).run_id
    assert identify(config, config.trace_file(tmp_path)).run_id == first
    data = bytearray(trace.read_bytes())
    data[-2] = ord("9") if data[-2] != ord("9") else ord("8")  # one byte of the last row
    trace.write_bytes(bytes(data))
    assert identify(config, config.trace_file(tmp_path)).run_id != first


def test_run_id_follows_the_config() -> None:
    a = SmartSearchConfig.from_yaml(EXAMPLES / "quickstart.yaml")
    b = a.model_copy(update={"sweep": a.sweep.model_copy(update={"seed": 2})})
    assert identify(a, None).run_id != identify(b, None).run_id


@pytest.mark.slow
def test_spica_sweep_runs_the_flow_twice_with_the_same_run_id(tmp_path: Path, capfd: pytest.CaptureFixture[str]
                                                              ) -> None:
    """The quick start end to end through Prefect: every stage's artifact, the table, then a resume."""
    assert main(["sweep", str(EXAMPLES / "quickstart.yaml"), "--runs-root", str(tmp_path)]) == 0
    out = capfd.readouterr().out  # (the flow's process prints the table: capfd, not capsys)
    assert "Top " in out and "tally:" in out and "score" in out
    runs = [p for p in tmp_path.iterdir() if p.is_dir()]
    assert len(runs) == 1
    for stage in ("config", "branches", "shapes", "load_predictor", "trials", "ranking"):
        assert (runs[0] / f"{stage}.parquet").is_file(), stage
    trials = pq.read_table(runs[0] / "trials.parquet").to_pylist()
    ranking = pq.read_table(runs[0] / "ranking.parquet").to_pylist()
    unique = [t for t in trials if t["status"] == "feasible" and not t["cache_hit"]]
    assert len(ranking) == len(unique) > 0
    meeting = [r for r in ranking if r["meets_sla"]]   # the SLA requirement first, best score first within it
    assert ranking[:len(meeting)] == meeting and meeting
    assert [r["score"] for r in meeting] == sorted((r["score"] for r in meeting), reverse=True)
    assert {t["mode"] for t in trials} == {"agg", "disagg"}
    # the same config again: same run id, every round resumed from trials.parquet, nothing re-run
    assert main(["sweep", str(EXAMPLES / "quickstart.yaml"), "--runs-root", str(tmp_path)]) == 0
    assert capfd.readouterr().out.split("artifacts:")[0] == out.split("artifacts:")[0]
    assert [p for p in tmp_path.iterdir() if p.is_dir()] == runs
    assert pq.read_table(runs[0] / "trials.parquet").to_pylist() == trials
    row = pq.read_table(runs[0] / "config.parquet").to_pylist()[0]
    assert row["run_id"] == runs[0].name


def test_seed_override_is_part_of_the_run_identity(tmp_path: Path) -> None:
    base = validate_config.fn(str(EXAMPLES / "quickstart.yaml"), run_dir=str(tmp_path / "a"))
    seeded = validate_config.fn(str(EXAMPLES / "quickstart.yaml"), run_dir=str(tmp_path / "b"), seed=7)
    assert seeded.config.sweep.seed == 7 and base.config.sweep.seed == 1
    assert seeded.identity.run_id != base.identity.run_id


def test_sweep_rejects_a_negative_seed(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["sweep", str(EXAMPLES / "quickstart.yaml"), "--seed", "-1"])
    assert info.value.code == 2 and "--seed must be an integer >= 0" in capsys.readouterr().err


@pytest.mark.slow
def test_sweep_error_inside_a_stage_exits_2_without_traceback(tmp_path: Path) -> None:
    """An inventory too small for any shape is only found by the KV filter stage, inside the Prefect flow: one
    48 GB L40S cannot hold Qwen3-32B's 64 GB of weights."""
    config = (EXAMPLES / "quickstart.yaml").read_text().replace("hardware_sku: h200_sxm",
                                                                "hardware_sku: l40s\n  gpu_inventory: {l40s: 1}")
    path = write(tmp_path, config)
    proc = subprocess.run([sys.executable, "-m", "spica_cli.main", "sweep", str(path), "--runs-root",
                           str(tmp_path / "runs")], capture_output=True, text=True, cwd=REPO, timeout=600)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr + proc.stdout
    assert "search_space.gpu_inventory" in proc.stderr and "holds no deployment" in proc.stderr

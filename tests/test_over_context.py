"""workload.over_context: refuse (the default), drop and fail, on a trace with requests over the context."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from spica_cli.main import main as spica
from spica_core.evaluate import EvalRequest, evaluate_one
from spica_core.deployment import Candidate
from examples.make_traces import write_mooncake_trace
from spica_core.run.inputs import load_inputs
from spica_core.space.parallel import ParallelConfig

CONTEXT = 8192


def _trace(path: Path) -> Path:
    rows = []
    for i in range(40):
        long = i % 8 == 3                       # 5 of 40 requests: input over the context, or input + output
        isl = 9000 if long and i < 20 else (8000 if long else 1000)
        osl = 400 if long else 100
        rows.append({"timestamp": i * 50.0, "input_length": isl, "output_length": osl,
                     "hash_ids": list(range(i * 100, i * 100 + -(-isl // 512)))})
    return write_mooncake_trace(path, rows)


def _config(tmp_path: Path, mode: str | None) -> Path:
    _trace(tmp_path / "t.jsonl")
    over = f", over_context: {mode}" if mode else ""
    path = tmp_path / f"c-{mode}.yaml"
    path.write_text(f"""search_space:
  model_name: Qwen/Qwen3-32B
  hardware_sku: h200_sxm
  gpu_budget: 2
  context_length: {CONTEXT}
  deployment_mode: [agg]
  backend: [vllm]
  parallel_configs: [{{tp: 2}}]
  agg_max_num_seqs: [256]
  agg_max_num_batched_tokens: [8192]
  router_mode: [round_robin]
  planner_scaling_policy: [disabled]
workload: {{trace_path: t.jsonl{over}}}
goal: {{target: goodput, sla: {{ttft_ms: 5000, itl_ms: 100}}}}
""")
    return path


def test_refuse_names_the_field_and_counts_the_requests(tmp_path: Path, capsys: Any) -> None:
    assert spica(["validate", str(_config(tmp_path, None))]) == 2
    err = capsys.readouterr().err
    assert "5 requests exceed the context length 8,192 (workload.over_context: refuse)" in err
    assert "over_context: drop" in err and "Traceback" not in err


def test_an_unknown_mode_exits_2_naming_the_field(tmp_path: Path, capsys: Any) -> None:
    assert spica(["validate", str(_config(tmp_path, "truncate"))]) == 2
    err = capsys.readouterr().err
    assert "workload.over_context" in err and "'refuse'" in err and "Traceback" not in err


@pytest.mark.parametrize("mode", ["drop", "fail"])
def test_validate_counts_the_requests_and_their_token_share(tmp_path: Path, capsys: Any, mode: str) -> None:
    path = _config(tmp_path, mode)
    assert spica(["validate", str(path)]) == 0
    out = capsys.readouterr().out
    inputs = load_inputs(path)
    assert inputs.trace is not None and inputs.trace.over_context_requests == 5
    tokens = 3 * (9000 + 400) + 2 * (8000 + 400)
    assert inputs.trace.over_context_tokens == tokens
    assert inputs.trace.total_tokens == tokens + 35 * 1100
    assert f"5 requests (12.5% of requests, {tokens / (tokens + 35 * 1100):.1%} of tokens)" in out


def _evaluate(path: Path) -> Any:
    inputs = load_inputs(path)
    cand = Candidate.unroll(inputs.config.search_space, {"deployment_mode": "agg"},
                            ParallelConfig.from_dict("agg", {"tp": 2}))
    return evaluate_one(EvalRequest.from_config(inputs.config, cand, trace_file=str(inputs.trace_file)))


def test_drop_replays_the_rest_and_fail_counts_them_as_rejected(tmp_path: Path) -> None:
    drop, fail = _evaluate(_config(tmp_path, "drop")), _evaluate(_config(tmp_path, "fail"))
    assert drop.feasible and fail.feasible
    assert drop.report["num_requests"] == 35 and "rejected_requests" not in drop.report
    assert fail.report["num_requests"] == 40 and fail.report["rejected_requests"] == 5
    assert fail.report["completed_requests"] == drop.report["completed_requests"] == 35
    assert fail.score <= drop.score
    assert fail.metrics["rejected_requests"] == 5

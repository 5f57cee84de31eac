"""Issue 21, prepare once: candidates sharing an engine shape, backend and precision share its AIC profile and
KV estimate, and all of a sweep's candidates share the fitted trace, in one worker process and across worker
processes (through the cache folder)."""
from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import aiconfigurator_core
import aiconfigurator_core.sdk.memory as aic_memory
from spica_core.config.model import SmartSearchConfig
from spica_core.config.trace import TraceRow
from spica_core.deployment import Candidate
from spica_core.evaluate import EvalRequest, evaluate_one, replay_traces
from spica_core.space import profiles
from spica_core.space.profiles import EngineShape
from spica_core.evaluate.replay_traces import fitted_trace
from examples.make_traces import write_poisson_trace
from spica_core.space.kv import _estimate, kv_tokens_per_rank
from spica_core.space.parallel import ParallelConfig, Shape
from spica_core.space.precision import precision_of

MODEL, SKU = "Qwen/Qwen3-32B", "h200_sxm"
FAST = {"isl": 1000, "osl": 50, "concurrency": 4, "num_request_ratio": 5}


@pytest.fixture
def aic_calls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, int]]:
    """An empty cache folder, and how often AIC estimates KV and builds a profile (the calls still run)."""
    monkeypatch.setenv("SPICA_CACHE_DIR", str(tmp_path))
    calls = {"kv": 0, "profile": 0}
    estimate, build = aic_memory.estimate_kv_cache, profiles.build_tables

    def counted_estimate(*args: Any, **kwargs: Any) -> dict[str, Any]:
        calls["kv"] += 1
        return estimate(*args, **kwargs)

    def counted_build(es: EngineShape) -> dict[str, np.ndarray]:
        calls["profile"] += 1
        return build(es)

    monkeypatch.setattr(aic_memory, "estimate_kv_cache", counted_estimate)
    monkeypatch.setattr(profiles, "build_tables", counted_build)
    _estimate.cache_clear()
    yield calls
    _estimate.cache_clear()


def request(tp: int, replicas: int, **space: Any) -> EvalRequest:
    cfg = SmartSearchConfig.from_dict({
        "search_space": {"model_name": MODEL, "hardware_sku": SKU, "deployment_mode": ["agg"], "gpu_budget": 8,
                         "router_mode": ["round_robin"], "planner_scaling_policy": ["disabled"],
                         "agg_max_num_batched_tokens": [8192], "agg_max_num_seqs": [256], **space},
        "workload": FAST, "goal": {"target": "throughput_per_gpu"}})
    candidate = Candidate.unroll(cfg.search_space, {"deployment_mode": "agg"},
                                 ParallelConfig.from_dict("agg", {"tp": tp, "replicas": replicas}))
    return EvalRequest.from_config(cfg, candidate)


def test_a_new_worker_reuses_a_shapes_profile_and_kv_estimate_and_another_shape_or_precision_does_not(
        aic_calls: dict[str, int]) -> None:
    first = evaluate_one(request(2, 1))
    assert first.feasible and aic_calls == {"kv": 1, "profile": 1}

    _estimate.cache_clear()  # as a new worker process starts
    same_shape = evaluate_one(request(2, 3))
    assert same_shape.feasible and aic_calls == {"kv": 1, "profile": 1}
    assert same_shape.report["num_requests"] == first.report["num_requests"]

    assert evaluate_one(request(4, 1)).feasible and aic_calls == {"kv": 2, "profile": 2}
    assert evaluate_one(request(2, 1, kv_cache_dtype=["fp8"])).feasible and aic_calls == {"kv": 3, "profile": 3}
    assert evaluate_one(request(2, 1, agg_max_num_batched_tokens=[16384])).feasible
    assert aic_calls == {"kv": 4, "profile": 3}  # batching moves the KV budget, not the step times


def test_a_kept_kv_estimate_reads_back_a_damaged_one_is_estimated_again_and_a_local_model_is_not_kept(
        aic_calls: dict[str, int], tmp_path: Path) -> None:
    bf16 = precision_of(MODEL, None, "bf16")
    tokens = kv_tokens_per_rank(MODEL, SKU, "vllm", Shape(2), precision=bf16)
    [kept] = (tmp_path / "kv").glob("*.json")
    _estimate.cache_clear()
    assert kv_tokens_per_rank(MODEL, SKU, "vllm", Shape(2), precision=bf16) == tokens and aic_calls["kv"] == 1

    kept.write_text('{"tokens": "many"')
    _estimate.cache_clear()
    assert kv_tokens_per_rank(MODEL, SKU, "vllm", Shape(2), precision=bf16) == tokens and aic_calls["kv"] == 2

    local = tmp_path / "models" / "my-qwen"  # its config.json may change under the same name
    local.mkdir(parents=True)
    shutil.copy(Path(aiconfigurator_core.__file__).parent / "model_configs" / "Qwen--Qwen3-32B_config.json",
                local / "config.json")
    assert kv_tokens_per_rank(str(local), SKU, "vllm", Shape(2), precision=bf16) == tokens
    assert list((tmp_path / "kv").glob("*.json")) == [kept]


def test_a_new_worker_reads_the_fitted_trace_and_its_counts_without_parsing_the_trace(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    trace = write_poisson_trace(tmp_path / "t.jsonl", num_requests=50, rate_rps=5.0, isl=3000, osl=200, seed=3)
    cache = tmp_path / "cache"
    first = fitted_trace(trace, 3100, cache)
    assert first.left_out > 0 and first.kept + first.left_out == 50

    parsed: list[Path] = []
    lines = replay_traces.trace_lines

    def counted(path: str | Path) -> Iterator[tuple[str, TraceRow]]:
        parsed.append(Path(path))
        return lines(path)

    monkeypatch.setattr(replay_traces, "trace_lines", counted)
    replay_traces._fitted.cache_clear()  # as a new worker process starts
    assert fitted_trace(trace, 3100, cache) == first and parsed == []
    assert fitted_trace(trace, 4000, cache).left_out < first.left_out and len(parsed) == 1  # another context

    first.path.with_suffix(".json").write_text("[]")  # damaged counts: the trace is parsed again
    replay_traces._fitted.cache_clear()
    assert fitted_trace(trace, 3100, cache) == first and len(parsed) == 2
    replay_traces._fitted.cache_clear()

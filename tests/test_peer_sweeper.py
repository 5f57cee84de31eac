"""Fast tests of bench/peer_sweeper.py: upstream config writing, result parsing, re-scoring pins (no AISimulate run).

The fixtures under tests/data/aisim_sweeper/ are from real ``aisimulate recommend`` runs (aisimulate
0.13.0.dev202610270000000085) on the search benchmark's 45-candidate agg space and a 400-request
shared-prefix trace: the configs that ran (trace path replaced by ``TRACE``) and ``recommendation.json``
cut down by ``peer_sweeper.trim_result``.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import yaml

from spica_core.config.model import SmartSearchConfig

_PATH = Path(__file__).resolve().parents[1] / "bench" / "peer_sweeper.py"
_spec = importlib.util.spec_from_file_location("peer_sweeper", _PATH)
ps = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ps)

DATA = Path(__file__).resolve().parent / "data" / "aisim_sweeper"
TRACE = "/tmp/trace.jsonl"


def _fixture(name: str) -> dict:
    return json.loads((DATA / f"recommendation_{name}.json").read_text())


def _ran_config(name: str, trace: str) -> dict:
    cfg = yaml.safe_load((DATA / f"recommend_{name}.yaml").read_text())
    cfg["traffic"]["source"]["paths"] = [trace]
    return cfg


def _base(space: dict) -> dict:
    return {"search_space": space, "workload": {"trace_path": TRACE},
            "goal": {"target": "goodput_per_gpu", "sla": ps.SLA}, "sweep": {"max_eval_seconds": 300}}


# ---------------------------------------------------------------- config writing

@pytest.mark.parametrize(("name", "budget"), [("exhaustive", None), ("bayesian24", 24)])
def test_config_is_the_one_that_ran(name, budget):
    cfg, notes = ps.upstream_config(ps.SMALL_SPACE, TRACE, ps.SLA, budget)
    assert cfg == _ran_config(name, str(Path(TRACE).resolve()))
    assert notes == []


def test_exhaustive_and_bayesian_optimizer_sections():
    exhaustive, _ = ps.upstream_config(ps.SMALL_SPACE, TRACE, ps.SLA, None)
    assert exhaustive["optimizer"]["algorithm"] == "random"
    assert exhaustive["optimizer"]["max_trials"] == ps.EXHAUSTIVE_TRIALS
    bayes, _ = ps.upstream_config(ps.SMALL_SPACE, TRACE, ps.SLA, 24, "bayesian", parallelism=4, cpu_limit=1, seed=3)
    assert bayes["optimizer"] == {"algorithm": "bayesian", "max_trials": 24, "parallelism": 4,
                                  "candidate_timeout_seconds": ps.CANDIDATE_TIMEOUT_S, "seed": 3}
    assert bayes["execution"]["resources"]["cpu_limit"] == 1
    for bad in (0, -1, True, 2.5):
        with pytest.raises(ValueError):
            ps.upstream_config(ps.SMALL_SPACE, TRACE, ps.SLA, bad)
    with pytest.raises(ValueError):
        ps.upstream_config(ps.SMALL_SPACE, TRACE, ps.SLA, 24, "GAUSSIAN_PROCESS_BANDIT")


def test_small_space_engine_section():
    cfg, _ = ps.upstream_config(ps.SMALL_SPACE, TRACE, ps.SLA, None)
    eng = cfg["engine"]
    assert eng["mode"] == {"choices": ["aggregated"]} and eng["backend"] == {"choices": ["vllm"]}
    assert (eng["model"], eng["hardware"], eng["context_length"]) == ("Qwen/Qwen3-32B", "h200_sxm", "max")
    agg = eng["workers"]["aggregated"]
    assert agg["parallelism"] == {"preset": "default"}
    assert agg["scheduler"] == {"max_batched_tokens": {"choices": [16384]},
                                "max_sequences": {"choices": [256, 512, 1024]}}
    assert agg["kv_cache"] == {"block_size": 64, "prefix_caching": True, "capacity": {"memory_fraction": 0.9}}
    assert cfg["optimization"] == {"target": "goodput_per_gpu", "hardware": "h200_sxm",
                                   "constraints": {"max_candidate_gpus": 8}}
    assert cfg["evaluation"] == {"sla": {"ttft_ms": 1500, "itl_ms": 30}}
    assert cfg["traffic"]["load"] == {"type": "trace_timestamps"}
    assert cfg["traffic"]["source"]["block_size"] == 512


def test_disagg_space_takes_spica_defaults_and_notes_the_router():
    space = {**ps.SMALL_SPACE, "deployment_mode": ["agg", "disagg"], "router_mode": ["kv_router", "round_robin"],
             "prefill_max_num_seqs": [4, 16], "context_length": 8192, "min_gpu_budget": 2}
    cfg, notes = ps.upstream_config(space, TRACE, ps.SLA, 32, workload={"arrival_speedup_ratio": 2.0})
    eng = cfg["engine"]
    assert eng["mode"] == {"choices": ["aggregated", "disaggregated"]}
    assert set(eng["workers"]) == {"aggregated", "prefill", "decode"}
    assert eng["workers"]["prefill"]["scheduler"]["max_sequences"] == {"choices": [4, 16]}
    # Left out of the space: Spica's defaults, not the upstream's.
    assert eng["workers"]["prefill"]["scheduler"]["max_batched_tokens"] == {"choices": [8192, 16384, 32768]}
    assert eng["workers"]["decode"]["scheduler"]["max_sequences"] == {"choices": [256, 512, 1024]}
    assert eng["workers"]["prefill"]["kv_cache"]["prefix_caching"] is True
    assert eng["workers"]["decode"]["kv_cache"]["prefix_caching"] is False
    assert eng["context_length"] == 8192
    assert cfg["optimization"]["constraints"] == {"max_candidate_gpus": 8, "min_candidate_gpus": 2}
    assert cfg["traffic"]["load"] == {"type": "trace_timestamps", "speedup": 2.0}
    assert any("KV router" in n for n in notes)


def test_closed_loop_trace_and_pinned_shapes():
    agg = {**ps.SMALL_SPACE, "parallel_configs": [{"tp": 4, "replicas": 2}]}
    cfg, _ = ps.upstream_config(agg, TRACE, ps.SLA, None, workload={"replay_concurrency": 64})
    assert cfg["traffic"]["load"] == {"type": "concurrency", "concurrency": 64}
    assert cfg["engine"]["workers"]["aggregated"]["parallelism"] == {"preset": [
        {"replicas": 2, "tensor": 4, "pipeline": 1, "attention_data": 1, "moe_tensor": 1, "moe_expert": 1}]}
    pins = [{"prefill": {"tp": 2, "replicas": 1}, "decode": {"tp": 4, "replicas": 1}},
            {"prefill": {"tp": 1, "replicas": 2}, "decode": {"tp": 2, "replicas": 2}}]
    disagg = {**ps.SMALL_SPACE, "deployment_mode": ["disagg"], "parallel_configs": pins}
    cfg, notes = ps.upstream_config(disagg, TRACE, ps.SLA, 8)
    assert [s["tensor"] for s in cfg["engine"]["workers"]["prefill"]["parallelism"]["preset"]] == [2, 1]
    assert [s["tensor"] for s in cfg["engine"]["workers"]["decode"]["parallelism"]["preset"]] == [4, 2]
    assert any("crosses 2 prefill x 2 decode" in n for n in notes)


# ---------------------------------------------------------------- output parsing

def test_parse_exhaustive_run():
    out = ps.parse_result(_fixture("exhaustive"))
    assert (out["trials"], out["unique"], out["replayed"], out["feasible"]) == (45, 45, 45, 45)
    assert out["counts"]["cache_hits"] == 0 and out["best_ties"] == 3
    best = out["best"]
    assert {k: best[k] for k in ("deployment_mode", "backend", "tp", "replicas", "pp", "attention_dp", "used_gpus",
                                 "agg_max_num_seqs", "agg_max_num_batched_tokens")} == {
        "deployment_mode": "agg", "backend": "vllm", "tp": 4, "replicas": 1, "pp": 1, "attention_dp": 1,
        "used_gpus": 4, "agg_max_num_seqs": 1024, "agg_max_num_batched_tokens": 16384}
    assert best["score"] == pytest.approx(1075.3269, rel=1e-6)
    # goodput per GPU: the score is goodput tok/s over the candidate's GPUs
    assert best["score"] == pytest.approx(best["metrics"]["goodput_output_throughput_tok_s"] / best["used_gpus"])


def test_parse_bayesian_run_counts_duplicates_as_trials_not_evaluations():
    doc = _fixture("bayesian24")
    out = ps.parse_result(doc)
    assert out["trials"] == 24 and out["unique"] == 11 and out["counts"]["cache_hits"] == 13
    assert out["trials"] == len(doc["candidates"]) + doc["counts"]["cache_hits"]
    assert (out["best"]["tp"], out["best"]["replicas"]) == (4, 1)


def test_parse_dedupes_retried_candidates_and_ignores_unsupported():
    doc = _fixture("bayesian24")
    first = doc["candidates"][0]
    retried = {**first, "candidate_id": "candidate-000099", "status": "timed_out", "score": None,
               "reason_category": "runtime_timeout", "reason": "exceed runtime"}
    unsupported = {**first, "candidate_id": "candidate-000100", "status": "unsupported", "score": None,
                   "config": {**first["config"], "tp": 3}, "prediction_config": None}
    doc["candidates"] += [retried, unsupported]
    out = ps.parse_result(doc)
    assert out["trials"] == 26 and out["unique"] == 11


def test_parse_refuses_partial_retention():
    with pytest.raises(ValueError, match="keeps only"):
        ps.parse_result({**_fixture("exhaustive"), "candidate_retention": "views"})


def test_trim_keeps_what_parse_reads():
    doc = _fixture("exhaustive")
    assert ps.parse_result(ps.trim_result(doc)) == ps.parse_result(doc)


# ---------------------------------------------------------------- running without the venv

def test_missing_venv_is_an_error_not_an_exception(tmp_path):
    out = ps.run_upstream(ps.SMALL_SPACE, Path(TRACE), ps.SLA, None, "bayesian", tmp_path / "w",
                          venv=tmp_path / "no-venv")
    assert out["error"] and "venv missing" in out["error"] and str(tmp_path / "no-venv") in out["error"]
    assert out["wall_s"] is None and out["best"] is None
    assert out["command"][1:3] == ["recommend", "-c"]
    assert (tmp_path / "w" / "aisimulate-recommend.yaml").is_file()


def test_bad_space_is_an_error_not_an_exception(tmp_path):
    out = ps.run_upstream({"model_name": "x"}, Path(TRACE), ps.SLA, None, "bayesian", tmp_path)
    assert out["error"].startswith("cannot write the upstream config")


# ---------------------------------------------------------------- re-scoring pins

def test_spica_config_for_agg_best_is_a_pinned_spica_config():
    best = ps.parse_result(_fixture("exhaustive"))["best"]
    space = {**ps.SMALL_SPACE, "router_mode": ["kv_router", "round_robin"], "kv_cache_dtype": ["bf16", "fp8"]}
    cfg = ps.spica_config_for(best, _base(space))
    config = SmartSearchConfig.from_dict(cfg)
    ss = config.search_space
    assert ss.deployment_mode == ["agg"] and ss.backend == ["vllm"]
    assert [p.model_dump() for p in ss.parallel_configs] == [
        {"tp": 4, "attention_dp": 1, "moe_tp": 1, "moe_ep": 1, "pp": 1, "replicas": 1}]
    assert ss.agg_max_num_seqs == [1024] and ss.agg_max_num_batched_tokens == [16384]
    assert ss.router_mode == ["round_robin"] and ss.kv_cache_dtype == ["bf16"]
    assert config.workload.trace_path == TRACE and config.goal.target.value == "goodput_per_gpu"
    assert space["router_mode"] == ["kv_router", "round_robin"]          # base left untouched
    from spica_core.evaluate import unpinned_knobs

    assert unpinned_knobs(config) == []                                  # `spica evaluate` accepts it


def test_spica_config_for_disagg_best():
    best = {"deployment_mode": "disagg", "backend": "vllm", "prefill_tp": 2, "prefill_replicas": 1,
            "prefill_pp": 1, "decode_tp": 4, "decode_replicas": 1, "prefill_max_num_seqs": 16,
            "prefill_max_num_batched_tokens": 16384, "decode_max_num_seqs": 512, "decode_max_num_batched_tokens": 8192}
    space = {**ps.SMALL_SPACE, "deployment_mode": ["agg", "disagg"], "prefill_max_num_seqs": [4, 16]}
    config = SmartSearchConfig.from_dict(ps.spica_config_for(best, _base(space)))
    ss = config.search_space
    assert ss.deployment_mode == ["disagg"]
    pc = ss.parallel_configs[0]
    assert (pc.prefill.tp, pc.prefill.replicas, pc.decode.tp, pc.decode.replicas) == (2, 1, 4, 1)
    assert ss.prefill_max_num_seqs == [16] and ss.decode_max_num_seqs == [512]
    assert ss.decode_max_num_batched_tokens == [8192]
    with pytest.raises(ValueError):
        ps.spica_config_for({"deployment_mode": None}, _base(space))

"""§7.1 step 4, §2.11 and §2.13: branches, backend viability, pins and dead-dimension pruning."""
from __future__ import annotations

from typing import Any

import pytest

from spica_cli.main import main
from spica_core.run.catalog import RunDir
from spica_core.space.branches import (
    TRTLLM_DISAGG_REASON,
    BranchSet,
    enumerate_branches,
    legal_space,
)
from spica_core.config.model import SmartSearchConfig
from spica_core.errors import NoViableParallelConfigError, UnknownModelError, UnknownSystemError
from spica_core.space.parallel import ParallelConfig, RoleConfig, Shape

ALL = ["vllm", "sglang", "trtllm"]
WORKLOAD = {"isl": 1000, "osl": 200, "num_request_ratio": 4, "concurrency": 16}


def make(model: str = "Qwen/Qwen3-32B", budget: int = 8, backends: list[str] | None = None,
         goal: dict[str, Any] | None = None, workload: dict[str, Any] | None = None, **space: Any) -> SmartSearchConfig:
    if model.startswith("deepseek-ai/"):  # the DeepSeek counts below are for an fp8 KV cache
        space.setdefault("kv_cache_dtype", "fp8")
    data: dict[str, Any] = {
        "search_space": {"model_name": model, "hardware_sku": "h200_sxm", "gpu_budget": budget,
                         "backend": backends or ALL, **space},
        "workload": workload or WORKLOAD,
    }
    if goal:
        data["goal"] = goal
    return SmartSearchConfig.from_dict(data)


def agg(tp: int, dp: int = 1, mtp: int = 1, mep: int = 1, r: int = 1) -> ParallelConfig:
    return ParallelConfig("agg", agg=RoleConfig(Shape(tp, dp, mtp, mep), r))


@pytest.fixture(scope="module")
def qwen() -> BranchSet:
    return enumerate_branches(make())


@pytest.fixture(scope="module")
def dsv3() -> BranchSet:
    return enumerate_branches(make("deepseek-ai/DeepSeek-V3", 32))


# ---------------------------------------------------------------- dense: Qwen3-32B on 8 × H200


def test_qwen_one_branch_per_mode_trtllm_dropped_from_disagg(qwen: BranchSet) -> None:
    assert [b.mode for b in qwen.branches] == ["disagg", "agg"]  # configured order [disagg, agg]
    assert qwen.branch("agg").backends == ("vllm", "sglang", "trtllm")
    assert qwen.branch("disagg").backends == ("vllm", "sglang")
    assert [(d.mode, d.backend, d.reason) for d in qwen.dropped] == [("disagg", "trtllm", TRTLLM_DISAGG_REASON)]


def test_qwen_pools(qwen: BranchSet) -> None:
    a, d = qwen.branch("agg"), qwen.branch("disagg")
    assert len(a.pool) == 15 and len(d.pool) == 71  # see test_enumeration for the hand counts
    assert all(s == ("vllm", "sglang", "trtllm") for s in a.supported_backends.values())
    assert a.summary()["trtllm"] == {"num_configs": 15, "strategies": ["tp"], "engine_sizes": {"agg": [1, 2, 4, 8]},
                                   "precisions": ["bf16"], "hardware": ["h200_sxm"]}
    assert d.summary()["vllm"]["engine_sizes"] == {"prefill": [1, 2, 4], "decode": [1, 2, 4]}
    # deterministic order: used GPUs, then the tie-break key
    assert a.pool[0] == agg(1) and a.pool[-1] in (agg(1, r=8), agg(2, r=4), agg(4, r=2), agg(8))


def test_qwen_kv_records_per_backend(qwen: BranchSet) -> None:
    rows = {(r.backend, r.shape.tp): r for r in qwen.shape_records}
    assert len(rows) == 3 * 4  # TP1..8 for each backend, estimated once across modes
    assert all(r.feasible for r in rows.values())
    assert rows[("vllm", 1)].kv_tokens_per_rank == 249_864 and rows[("trtllm", 1)].kv_tokens_per_rank == 276_856


def test_qwen_context_length_prunes_tp1_on_vllm_and_sglang_only() -> None:
    bs = enumerate_branches(make(context_length=250_000, deployment_mode=["agg"]))
    a = bs.branch("agg")
    # vLLM 249,864 and SGLang 244,386 tokens ≤ 250,000; TRT-LLM 276,856 > 250,000
    assert a.supported_backends[agg(1)] == ("trtllm",)
    assert a.supported_backends[agg(2)] == ("vllm", "sglang", "trtllm")
    assert len(a.configs_for("vllm")) == 7 and len(a.configs_for("trtllm")) == 15


# ---------------------------------------------------------------- MoE: DeepSeek-V3 on 32 × H200


def test_dsv3_agg_per_backend(dsv3: BranchSet) -> None:
    """Shapes ≤ 4 GPUs have no KV budget. 8-GPU shapes get 4 replica counts, 16-GPU shapes 2.
    vLLM keeps DEP8/TEP8/TP8 + all four 16-GPU shapes: 3·4 + 4·2 = 20. SGLang drops DTP8 and
    DTP16: 3·4 + 3·2 = 18. TRT-LLM keeps all eight: 4·4 + 4·2 = 24."""
    a = dsv3.branch("agg")
    counts = {b: s["num_configs"] for b, s in a.summary().items()}
    assert counts == {"vllm": 20, "sglang": 18, "trtllm": 24}
    assert a.summary()["sglang"]["strategies"] == ["tp", "tep", "dep"]
    assert a.summary()["vllm"]["strategies"] == ["tp", "tep", "dep", "dtp"]
    assert len(a.pool) == 24  # the union = TRT-LLM's list
    assert a.supported_backends[agg(1, 8, 8, 1)] == ("trtllm",)                    # DTP8
    assert a.supported_backends[agg(1, 16, 16, 1, r=2)] == ("vllm", "trtllm")      # DTP16 ×2
    assert a.supported_backends[agg(8, 1, 1, 8, r=4)] == ("vllm", "sglang", "trtllm")
    assert {c.used_gpus for c in a.pool} == {8, 16, 24, 32}


def test_dsv3_disagg_pairs(dsv3: BranchSet) -> None:
    """Role footprints (vLLM): 8 → 3 configs (DEP8/TEP8/TP8 ×1); 16 → 3 (×2) + 4 (16-GPU ×1) = 7;
    24 → 3. Pairs with total ≤ 32: 3·3 + 3·7 + 3·3 + 7·3 + 7·7 + 3·3 = 118.
    SGLang has 3 16-GPU shapes: footprint 16 → 6: 9 + 18 + 9 + 18 + 36 + 9 = 99."""
    d = dsv3.branch("disagg")
    assert d.backends == ("vllm", "sglang")
    assert d.summary()["vllm"]["num_configs"] == 118
    assert d.summary()["sglang"]["num_configs"] == 99
    assert len(d.pool) == 118
    assert all(16 <= c.used_gpus <= 32 for c in d.pool)
    dtp16 = RoleConfig(Shape(1, 16, 16, 1))
    tep8 = RoleConfig(Shape(8, 1, 1, 8))
    assert d.supported_backends[ParallelConfig("disagg", prefill=dtp16, decode=tep8)] == ("vllm",)


def test_dsv3_records_and_legal_rows(dsv3: BranchSet) -> None:
    # 16 legal shapes per backend (4 patterns × {2,4,8,16}); all estimated for the 3 backends
    assert len(dsv3.shape_records) == 48
    assert sum(r.feasible for r in dsv3.shape_records if r.backend == "trtllm") == 8
    rows = dsv3.legal.rows()
    trt_disagg = [r for r in rows if r["mode"] == "disagg" and r["backend"] == "trtllm"]
    assert trt_disagg == [{"mode": "disagg", "backend": "trtllm", "hardware_sku": "h200_sxm", "backend_version": "1.3.0rc20",
                           "parallel_config": None, "label": None, "strategy": None, "used_gpus": None,
                           "pinned": False, "supported": False, "reason": TRTLLM_DISAGG_REASON}]


def test_model_too_large_for_the_budget() -> None:
    with pytest.raises(NoViableParallelConfigError) as err:
        enumerate_branches(make("deepseek-ai/DeepSeek-V3", 4))
    text = str(err.value)
    assert "no deployment mode is viable" in text and "no KV budget" in text


# ---------------------------------------------------------------- unknowns, modes, pins


def test_unknown_sku_and_model() -> None:
    with pytest.raises(UnknownSystemError, match="h200_sxm"):
        enumerate_branches(SmartSearchConfig.from_dict({
            "search_space": {"model_name": "Qwen/Qwen3-32B", "hardware_sku": "h20"}, "workload": WORKLOAD}))
    with pytest.raises(UnknownModelError):
        enumerate_branches(make("Qwen/Qwen9-1T"))


def test_mode_without_viable_backend_is_skipped_with_a_warning() -> None:
    bs = enumerate_branches(make(backends=["trtllm"]))
    assert [b.mode for b in bs.branches] == ["agg"]
    assert any("disagg skipped" in w for w in bs.warnings)
    assert ("disagg", None) in {(d.mode, d.backend) for d in bs.dropped}
    with pytest.raises(NoViableParallelConfigError, match="no deployment mode is viable"):
        enumerate_branches(make(backends=["trtllm"], deployment_mode=["disagg"]))


def test_pinned_illegal_config_fails_before_any_estimate() -> None:
    config = make(deployment_mode=["agg"], parallel_configs=[{"tp": 3}])
    with pytest.raises(NoViableParallelConfigError) as err:
        legal_space(config)
    text = str(err.value)
    assert '"tp": 3' in text and "not in [1, 2, 4, 8, 16]" in text
    assert all(b in text for b in ALL)


def test_pinned_mixed_moe_shape_is_illegal() -> None:
    config = make("deepseek-ai/DeepSeek-V3", 32, deployment_mode=["agg"],
                  parallel_configs=[{"tp": 2, "attention_dp": 4, "moe_ep": 8}])
    with pytest.raises(NoViableParallelConfigError, match="pure MoE patterns"):
        legal_space(config)


def test_pinned_kv_infeasible_config_fails_with_the_estimator_reason() -> None:
    config = make("deepseek-ai/DeepSeek-V3", 32, deployment_mode=["agg"],
                  parallel_configs=[{"tp": 4, "moe_ep": 4, "replicas": 2}])
    legal_space(config)  # legal by the enumeration rules
    with pytest.raises(NoViableParallelConfigError, match="no KV budget"):
        enumerate_branches(config)


def test_pinned_menu_is_kept_per_backend() -> None:
    config = make("deepseek-ai/DeepSeek-V3", 32, backends=["vllm", "sglang"], deployment_mode=["agg"],
                  parallel_configs=[{"tp": 1, "attention_dp": 16, "moe_tp": 16},
                                    {"tp": 8, "moe_ep": 8, "replicas": 2}])
    a = enumerate_branches(config).branch("agg")
    assert a.pinned and not a.is_strict_pin
    assert a.supported_backends == {agg(8, 1, 1, 8, r=2): ("vllm", "sglang"), agg(1, 16, 16, 1): ("vllm",)}
    assert a.configs_for("sglang") == (agg(8, 1, 1, 8, r=2),)


def test_single_pin_is_a_strict_pin() -> None:
    a = enumerate_branches(make(deployment_mode=["agg"], parallel_configs=[{"tp": 2, "replicas": 2}])).branch("agg")
    assert a.is_strict_pin and a.pool == (agg(2, r=2),)


def test_pinned_disagg_legal_only_where_replay_runs_it() -> None:
    config = make(deployment_mode=["disagg"], backends=["trtllm", "vllm"],
                  parallel_configs=[{"prefill": {"tp": 2, "replicas": 2}, "decode": {"tp": 4}}])
    bs = enumerate_branches(config)
    d = bs.branch("disagg")
    assert d.backends == ("vllm",) and d.is_strict_pin
    rows = {r["backend"]: r for r in bs.legal.rows()}
    assert rows["trtllm"]["supported"] is False and rows["trtllm"]["reason"] == TRTLLM_DISAGG_REASON
    assert rows["vllm"]["supported"] is True and rows["vllm"]["used_gpus"] == 8


# ---------------------------------------------------------------- §2.11 dead dimensions


def test_knobs_only_for_the_branch_and_backend_is_viable_list(qwen: BranchSet) -> None:
    a, d = qwen.branch("agg").knob_choices, qwen.branch("disagg").knob_choices
    assert a["backend"] == ["vllm", "sglang", "trtllm"] and d["backend"] == ["vllm", "sglang"]
    assert "agg_max_num_seqs" in a and "prefill_max_num_seqs" not in a
    assert {"prefill_max_num_seqs", "decode_max_num_seqs"} <= set(d) and "agg_max_num_seqs" not in d
    assert "load_predictor_candidates" not in a  # swept separately, never a study dimension
    # defaults: kv_router in the list, no host offload, planner policies enable scaling
    assert {"overlap_score_credit", "prefill_load_scale", "router_temperature"} <= set(a)
    assert "host_cache_hit_weight" not in a and "disk_cache_hit_weight" not in a
    assert {"planner_fpm_sampling", "planner_load_sensitivity"} <= set(a)


def test_round_robin_only_keeps_only_router_mode() -> None:
    k = enumerate_branches(make(deployment_mode=["agg"], router_mode=["round_robin"], num_g2_blocks=100,
                                kv_bytes_per_token=1024)).branch("agg").knob_choices
    assert k["router_mode"] == ["round_robin"]
    assert not {"overlap_score_credit", "prefill_load_scale", "router_temperature", "host_cache_hit_weight"} & set(k)


def test_host_offload_keeps_cache_hit_weights() -> None:
    k = enumerate_branches(make(deployment_mode=["agg"], num_g2_blocks=100,
                                kv_bytes_per_token=1024)).branch("agg").knob_choices
    assert k["host_cache_hit_weight"] == [0.5, 0.75, 1.0] and k["disk_cache_hit_weight"] == [0.0, 0.25, 0.5]


def test_static_planner_drops_planner_details() -> None:
    policy = {"enable_throughput_scaling": False, "enable_load_scaling": False,
              "throughput_adjustment_interval_seconds": None, "load_adjustment_interval_seconds": None}
    k = enumerate_branches(make(deployment_mode=["agg"],
                                planner_scaling_policy=["disabled", policy])).branch("agg").knob_choices
    assert k["planner_scaling_policy"] == ["disabled", policy]
    assert "planner_fpm_sampling" not in k and "planner_load_sensitivity" not in k


def test_kv_load_ratio_range_and_scalar() -> None:
    wl = {"isl": 1000, "osl": 200, "num_request_ratio": 4}
    ranged = enumerate_branches(make(deployment_mode=["agg"], goal={"target": "pareto"},
                                     workload={**wl, "kv_load_ratio": [0.1, 0.9]})).branch("agg")
    assert ranged.float_ranges == {"kv_load_ratio": (0.1, 0.9)} and "kv_load_ratio" not in ranged.knob_choices
    p = [p for p in ranged.knob_params() if p.name == "kv_load_ratio"][0]
    assert p.kind == "float" and p.bounds == (0.1, 0.9) and p.default == pytest.approx(0.5)
    scalar = enumerate_branches(make(deployment_mode=["agg"], workload={**wl, "kv_load_ratio": 0.7})).branch("agg")
    assert scalar.float_ranges == {} and scalar.constants()["kv_load_ratio"] == 0.7


def test_knob_params_follow_7_3() -> None:
    policy = {"enable_throughput_scaling": True, "enable_load_scaling": False,
              "throughput_adjustment_interval_seconds": 240, "load_adjustment_interval_seconds": 5}
    a = enumerate_branches(make(deployment_mode=["agg"], backends=["sglang", "vllm"], agg_max_num_seqs=[512, 256],
                                planner_scaling_policy=["throughput_180_5", policy],
                                overlap_score_credit=[1.0])).branch("agg")
    params = {p.name: p for p in a.knob_params()}
    assert params["backend"].kind == "categorical" and params["backend"].default == "sglang"
    assert params["agg_max_num_seqs"].kind == "discrete" and params["agg_max_num_seqs"].values == (256.0, 512.0)
    assert params["agg_max_num_seqs"].is_int and params["agg_max_num_seqs"].decode(512.0) == 512
    sp = params["planner_scaling_policy"]
    assert sp.values == ("0", "1") and sp.decode("1") == policy
    assert params["router_mode"].default is None  # only backend gets a default
    assert "overlap_score_credit" not in params and a.constants()["overlap_score_credit"] == 1.0


# ---------------------------------------------------------------- artifacts through the Prefect tasks


def test_tasks_write_branches_and_shapes(tmp_path: Any) -> None:
    from tasks.space import enumerate_branches_task, kv_filter_task

    run = RunDir(tmp_path)
    config = make(context_length=250_000, deployment_mode=["agg"], backends=["vllm", "trtllm"])
    space = enumerate_branches_task.fn(config, run)
    bs = kv_filter_task.fn(space, run)
    branches = run.rows("branches")
    assert len(branches) == 2 * 15 and all(r["supported"] for r in branches)
    assert set(branches[0]) == {"mode", "backend", "hardware_sku", "backend_version", "parallel_config", "label", "strategy",
                                "used_gpus", "pinned", "supported", "reason"}
    shapes = {(r["backend"], r["shape"]): r for r in run.rows("shapes")}
    assert shapes[("vllm", "TP1")]["kv_tokens_per_rank"] == 249_864 and not shapes[("vllm", "TP1")]["feasible"]
    assert shapes[("trtllm", "TP1")]["feasible"] and shapes[("trtllm", "TP1")]["reason"] == ""
    assert len(bs.branch("agg").configs_for("vllm")) == 7


def test_kv_filter_task_writes_shapes_even_when_nothing_fits(tmp_path: Any) -> None:
    from tasks.space import enumerate_branches_task, kv_filter_task

    run = RunDir(tmp_path)
    space = enumerate_branches_task.fn(make("deepseek-ai/DeepSeek-V3", 4, deployment_mode=["agg"]), run)
    with pytest.raises(NoViableParallelConfigError):
        kv_filter_task.fn(space, run)
    rows = run.rows("shapes")
    assert rows and not any(r["feasible"] for r in rows) and rows[0]["kv_tokens_per_rank"] is None


# ---------------------------------------------------------------- `spica space`


def _write(tmp_path: Any, text: str) -> str:
    path = tmp_path / "c.yaml"
    path.write_text(text)
    return str(path)


SPACE_YAML = """search_space:
  model_name: deepseek-ai/DeepSeek-V3
  hardware_sku: h200_sxm
  gpu_budget: 32
  backend: [vllm, sglang, trtllm]
  kv_cache_dtype: fp8
workload: {isl: 1000, osl: 100, num_request_ratio: 2, concurrency: 8}
"""


def test_space_json_lists_every_config(tmp_path: Any, capsys: Any) -> None:
    import json

    from spica_cli.space import space_command

    assert space_command(_write(tmp_path, SPACE_YAML), True) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema"] == "spica.space/2"
    modes = {b["mode"]: b for b in doc["branches"]}
    assert len(modes["agg"]["configs"]) == 24 and len(modes["disagg"]["configs"]) == 118
    assert modes["agg"]["per_backend"]["sglang"]["num_configs"] == 18
    dtp8 = [c for c in modes["agg"]["configs"] if c["strategy"] == "dtp" and c["gpus_per_worker"] == 8]
    assert {c["replicas"] for c in dtp8} == {1, 2, 3, 4} and all(c["backends"] == ["trtllm"] for c in dtp8)
    one = modes["disagg"]["configs"][0]
    assert set(one) == {"prefill", "decode", "strategy", "used_gpus", "backends", "variants"}
    assert {v["kv_cache_dtype"] for v in one["variants"]} == {"fp8"}
    assert set(one["prefill"]) == {"tp", "attention_dp", "moe_tp", "moe_ep", "pp", "replicas", "strategy",
                                   "gpus_per_worker"}
    assert doc["dropped"] == [{"mode": "disagg", "backend": "trtllm", "hardware_sku": "h200_sxm",
                               "reason": TRTLLM_DISAGG_REASON}]
    assert len(doc["shapes"]) == 48


def test_space_text_and_errors(tmp_path: Any, capsys: Any) -> None:
    from spica_cli.space import space_command

    assert space_command(_write(tmp_path, SPACE_YAML), False) == 0
    out = capsys.readouterr().out
    assert "agg: backends vllm, sglang, trtllm; 24 parallel configs" in out
    assert "DEP8(tp1 dp8 mtp1 mep8) 630,721 ok" in out and "dropped (no KV budget)" in out
    assert "disagg / trtllm" in out
    assert main(["space", str(_write(tmp_path, SPACE_YAML.replace("h200_sxm", "h20")))]) == 2
    err = capsys.readouterr().err
    assert "search_space.hardware_sku[0]: 'h20' is not an aiconfigurator-core system" in err and "h200_sxm" in err


@pytest.mark.slow
def test_space_on_every_example_under_a_minute() -> None:
    import glob
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parent.parent
    sys.path.insert(0, str(repo / "bench"))
    from space_check import LIMIT_SECONDS, bench_one

    for path in sorted(glob.glob(str(repo / "examples" / "*.yaml"))):
        result = bench_one(path)
        assert "error" not in result, result
        assert float(result["wall_s"]) < LIMIT_SECONDS, result  # type: ignore[arg-type]

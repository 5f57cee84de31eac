"""GPU type as a searched knob: SKU lists, per-role SKUs in disagg, the inventory, and where each part shows it."""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from spica_cli.main import main as spica
from spica_core.config.model import SmartSearchConfig
from spica_core.deployment import Candidate
from spica_core.emit import check_manifest
from spica_core.emit.manifest_options import ManifestOptions
from spica_core.emit.manifests import manifest
from spica_core.errors import ConfigError, ManifestError, NoPerfDatabaseError
from spica_core.evaluate.cost import role_skus
from spica_core.evaluate.engine_args import KV_TRANSFER_ENV, build_engine_args
from spica_core.search.candidates import CandidateSpace
from spica_core.space.branches import enumerate_branches, over_inventory
from spica_core.space.facts import shared_backend_version
from spica_core.space.parallel import ParallelConfig

QWEN = "Qwen/Qwen3-32B"
WORKLOAD = {"isl": 1000, "osl": 200, "num_request_ratio": 4, "concurrency": 16}
PIN = {"router_mode": ["round_robin"], "planner_scaling_policy": ["disabled"], "agg_max_num_seqs": [256],
       "agg_max_num_batched_tokens": [8192], "prefill_max_num_seqs": [4], "prefill_max_num_batched_tokens": [8192],
       "decode_max_num_seqs": [256], "decode_max_num_batched_tokens": [8192]}


def make(budget: int = 8, **space: Any) -> SmartSearchConfig:
    body = {"model_name": QWEN, "gpu_budget": budget, "backend": ["vllm"], **PIN, **space}
    return SmartSearchConfig.from_dict({"search_space": body, "workload": WORKLOAD})


def write(tmp_path: Path, space: dict[str, Any], goal: dict[str, Any] | None = None) -> Path:
    path = tmp_path / "c.yaml"
    body = {"search_space": {"model_name": QWEN, "gpu_budget": 8, "backend": ["vllm"], **PIN, **space},
            "workload": WORKLOAD, **({"goal": goal} if goal else {})}
    path.write_text(yaml.safe_dump(body))
    return path


def mixed(prefill: str = "h100_sxm", decode: str = "h200_sxm", pc: dict[str, Any] | None = None) -> Candidate:
    config = make(deployment_mode=["disagg"], prefill_hardware_sku=prefill, decode_hardware_sku=decode)
    pc = pc or {"prefill": {"tp": 2}, "decode": {"tp": 4}}
    c = Candidate.unroll(config.search_space, {"deployment_mode": "disagg"}, ParallelConfig.from_dict("disagg", pc))
    return c.resolved(backend_version=shared_backend_version(c.hardware.values(), c.backend))


# ---------------------------------------------------------------- the config


def test_one_sku_pins_a_list_is_searched_and_the_roles_default_to_it() -> None:
    ss = make(hardware_sku="h200_sxm").search_space
    assert ss.hardware_sku == ["h200_sxm"] and ss.role_skus("disagg") == {"prefill": ["h200_sxm"],
                                                                        "decode": ["h200_sxm"]}
    ss = make(hardware_sku=["h100_sxm", "h200_sxm", "h100_sxm"], decode_hardware_sku=["h200_sxm"]).search_space
    assert ss.hardware_sku == ["h100_sxm", "h200_sxm"]
    assert ss.role_skus("agg") == {"agg": ["h100_sxm", "h200_sxm"]}
    assert ss.role_skus("disagg") == {"prefill": ["h100_sxm", "h200_sxm"], "decode": ["h200_sxm"]}
    only_roles = make(deployment_mode=["disagg"], prefill_hardware_sku="h100_sxm", decode_hardware_sku="b200_sxm")
    assert only_roles.search_space.skus == ["h100_sxm", "b200_sxm"]


@pytest.mark.parametrize("space, field, words", [
    ({"hardware_sku": "h200_sxm", "deployment_mode": ["agg"], "prefill_hardware_sku": ["h100_sxm"]},
     "search_space.prefill_hardware_sku", "only disaggregated deployments have"),
    ({"hardware_sku": "h200_sxm", "deployment_mode": ["agg"], "decode_hardware_sku": "h100_sxm"},
     "search_space.decode_hardware_sku", "only disaggregated deployments have"),
    ({"deployment_mode": ["disagg"], "prefill_hardware_sku": ["h100_sxm"]}, "search_space.hardware_sku",
     "is required"),
    ({"hardware_sku": ["h200_sxm", "h20"]}, "search_space.hardware_sku[1]", "'h20' is not an aiconfigurator-core"),
    ({"hardware_sku": "h200_sxm", "deployment_mode": ["disagg"], "decode_hardware_sku": ["b200", "h100_sxm"]},
     "search_space.decode_hardware_sku[0]", "'b200' is not an aiconfigurator-core"),
    ({"hardware_sku": "h200_sxm", "gpu_inventory": {"h300": 8}}, "search_space.gpu_inventory.h300",
     "'h300' is not an aiconfigurator-core"),
    ({"hardware_sku": "h200_sxm", "gpu_inventory": {"h200_sxm": 0}}, "search_space.gpu_inventory.h200_sxm", ""),
    ({"hardware_sku": "h200_sxm", "gpu_inventory": {"h200_sxm": 2.5}}, "search_space.gpu_inventory.h200_sxm", ""),
    ({"hardware_sku": []}, "search_space.hardware_sku", ""),
])
def test_bad_gpu_types_exit_2_with_the_field_named(tmp_path: Path, capsys: Any, space: dict[str, Any], field: str,
                                                   words: str) -> None:
    assert spica(["validate", str(write(tmp_path, space))]) == 2
    err = capsys.readouterr().err
    assert f"- {field}:" in err and "Traceback" not in err
    assert words in err


def test_prices_must_cover_every_role_sku(tmp_path: Path, capsys: Any) -> None:
    space = {"hardware_sku": "h200_sxm", "deployment_mode": ["disagg"], "prefill_hardware_sku": ["h100_sxm"]}
    goal = {"target": "cost_per_mtok", "gpu_hour_usd": {"h200_sxm": 4.0}}
    assert spica(["validate", str(write(tmp_path, space, goal))]) == 2
    assert "- goal.gpu_hour_usd: has no price for h100_sxm" in capsys.readouterr().err


# ---------------------------------------------------------------- branches: variants, inventory, drops


def test_a_sku_list_is_a_variant_knob_and_each_sku_keeps_its_own_feasible_shapes() -> None:
    bs = enumerate_branches(make(hardware_sku=["h100_sxm", "h200_sxm"], deployment_mode=["agg"]))
    agg = bs.branch("agg")
    assert agg.knob_choices["hardware_sku"] == ["h100_sxm", "h200_sxm"]
    tp1 = ParallelConfig.from_dict("agg", {"tp": 1})
    # 61 GiB of weights: one 80 GB H100 has no room for a 40,960-token sequence, one 141 GB H200 has
    assert [v.skus for v in agg.supported[tp1]] == [("h200_sxm",)]
    assert {v.skus for v in agg.supported[ParallelConfig.from_dict("agg", {"tp": 2})]} == {("h100_sxm",),
                                                                                            ("h200_sxm",)}
    assert {r.hardware_sku for r in bs.shape_records} == {"h100_sxm", "h200_sxm"}
    space = CandidateSpace(agg)
    assert "hardware_sku" in [p.name for p in space.params]
    picked = {space.proposal(i).selection["hardware_sku"] for i in range(space.size)}
    assert picked == {"h100_sxm", "h200_sxm"}
    assert space.size == sum(len(vs) for vs in agg.supported.values())


def test_the_inventory_caps_each_type_on_top_of_the_budget() -> None:
    bs = enumerate_branches(make(hardware_sku=["h100_sxm", "h200_sxm"], deployment_mode=["agg", "disagg"],
                                 gpu_inventory={"h100_sxm": 4}))
    for branch in bs.branches:
        for config, variants in branch.supported.items():
            for v in variants:
                assert not over_inventory(config, v.skus, {"h100_sxm": 4})
                if "h100_sxm" in v.skus:
                    on_h100 = sum(rc.gpus for rc, sku in zip(config.roles.values(), v.skus) if sku == "h100_sxm")
                    assert on_h100 <= 4
    assert any(c.used_gpus == 8 and any(v.skus == ("h200_sxm",) for v in vs)
               for c, vs in bs.branch("agg").supported.items())
    mixed_8 = [(c, v) for c, vs in bs.branch("disagg").supported.items() for v in vs if c.used_gpus == 8
               and v.skus == ("h100_sxm", "h200_sxm")]
    assert mixed_8 and all(c.roles["prefill"].gpus <= 4 for c, _ in mixed_8)
    assert over_inventory(ParallelConfig.from_dict("agg", {"tp": 4, "replicas": 2}), ("h100_sxm",),
                          {"h100_sxm": 4}) == {"h100_sxm": 8}


def test_an_inventory_that_holds_no_shape_is_refused_naming_it() -> None:
    with pytest.raises(ConfigError) as err:
        enumerate_branches(make(hardware_sku=["l40s"], deployment_mode=["agg"], gpu_inventory={"l40s": 1}))
    issue = err.value.issues[0]
    assert issue.path == "search_space.gpu_inventory" and "holds no deployment" in issue.message


def test_disagg_pairs_each_prefill_sku_with_each_decode_sku() -> None:
    bs = enumerate_branches(make(deployment_mode=["disagg"], prefill_hardware_sku=["h100_sxm", "h200_sxm"],
                                 decode_hardware_sku="h200_sxm"))
    d = bs.branch("disagg")
    assert d.knob_choices["prefill_hardware_sku"] == ["h100_sxm", "h200_sxm"]
    assert d.knob_choices["decode_hardware_sku"] == ["h200_sxm"]
    p1 = ParallelConfig.from_dict("disagg", {"prefill": {"tp": 1}, "decode": {"tp": 1}})
    assert [v.hardware for v in d.supported[p1]] == [(("prefill_hardware_sku", "h200_sxm"),
                                                      ("decode_hardware_sku", "h200_sxm"))]
    space = CandidateSpace(d)
    proposal = space.proposal(0)
    assert {"prefill_hardware_sku", "decode_hardware_sku"} <= set(proposal.selection)
    c = Candidate.unroll(bs.legal.config.search_space, proposal.selection, proposal.parallel)
    assert c.hardware == {"prefill": proposal.selection["prefill_hardware_sku"],
                          "decode": proposal.selection["decode_hardware_sku"]}


def test_a_sku_without_data_for_a_backend_is_dropped_with_its_reason() -> None:
    bs = enumerate_branches(make(hardware_sku=["h200_sxm", "b60"], backend=["vllm", "sglang"],
                                 deployment_mode=["agg"]))
    dropped = [(d.backend, d.hardware_sku) for d in bs.dropped]
    assert ("sglang", "b60") in dropped
    reason = next(d.reason for d in bs.dropped if (d.backend, d.hardware_sku) == ("sglang", "b60"))
    assert "no perf database for sglang on b60" in reason
    assert "sglang" in bs.branch("agg").backends   # still on the H200


def test_a_mixed_pair_needs_one_engine_version() -> None:
    bs = enumerate_branches(make(deployment_mode=["disagg"], prefill_hardware_sku=["a100_sxm", "h200_sxm"],
                                 decode_hardware_sku=["h200_sxm"]))
    why = next(d.reason for d in bs.dropped if d.hardware_sku == "a100_sxm+h200_sxm")
    assert "different engine versions" in why
    assert {v.skus for vs in bs.branch("disagg").supported.values() for v in vs} == {("h200_sxm", "h200_sxm")}
    with pytest.raises(NoPerfDatabaseError):
        shared_backend_version(["a100_sxm", "h200_sxm"], "vllm")


# ---------------------------------------------------------------- the candidate, its engines, cost and manifest


def test_the_sample_carries_the_per_role_pair_and_reads_back() -> None:
    c = mixed()
    sample = c.to_sample()
    assert (sample["prefill_hardware_sku"], sample["decode_hardware_sku"]) == ("h100_sxm", "h200_sxm")
    assert "hardware_sku" not in sample and c.hardware_sku is None and c.system == "h100_sxm+h200_sxm"
    assert Candidate.from_sample(sample) == c
    assert role_skus(c) == {"prefill": "h100_sxm", "decode": "h200_sxm"}
    assert over_inventory(c.parallel, list(c.hardware.values()), {"h100_sxm": 1, "h200_sxm": 4}) == {"h100_sxm": 2}
    same = mixed("h200_sxm", "h200_sxm")
    assert same.to_sample()["hardware_sku"] == "h200_sxm" and same.group == (QWEN, "h200_sxm", "vllm")
    shared_only = {k: v for k, v in same.to_sample().items() if not k.endswith("_hardware_sku")}
    assert Candidate.from_sample(shared_only) == same     # hardware_sku alone names every role's type


def test_each_role_is_timed_and_sized_on_its_own_sku_and_the_hand_off_runs_at_the_slower_side(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(KV_TRANSFER_ENV, raising=False)
    roles = build_engine_args(mixed("b200_sxm", "h200_sxm"))
    assert "b200_sxm" in Path(roles["prefill"].profile).name and "h200_sxm" in Path(roles["decode"].profile).name
    alone = build_engine_args(mixed("h200_sxm", "h200_sxm"))
    assert roles["decode"].num_gpu_blocks == alone["decode"].num_gpu_blocks      # same shape, same SKU
    assert roles["prefill"].num_gpu_blocks > alone["prefill"].num_gpu_blocks     # 192 GB B200 vs 141 GB H200
    # B200 ships KV at 100 GB/s per GPU, H200 at 50: the pair moves at 50, over prefill's 2 TP ranks
    assert roles["prefill"].payload["engine"]["kv_transfer_bandwidth"] == 50.0 * 2
    b200 = build_engine_args(mixed("b200_sxm", "b200_sxm"))
    assert b200["prefill"].payload["engine"]["kv_transfer_bandwidth"] == 100.0 * 2
    monkeypatch.setenv(KV_TRANSFER_ENV, "25")
    assert build_engine_args(mixed())["prefill"].payload["engine"]["kv_transfer_bandwidth"] == 25.0 * 2


def test_the_manifest_places_each_role_on_its_gpu_type() -> None:
    doc = manifest(mixed())
    assert check_manifest(doc, used_gpus=6) == []
    selectors = {c["name"]: c["podTemplate"]["spec"].get("nodeSelector") for c in doc["spec"]["components"]}
    assert selectors["prefill"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert selectors["decode"] == {"nvidia.com/gpu.product": "NVIDIA-H200"}
    notes = doc["metadata"]["annotations"]
    assert (notes["spica.dev/prefill-hardware-sku"], notes["spica.dev/decode-hardware-sku"]) == ("h100_sxm",
                                                                                                "h200_sxm")
    own = manifest(mixed(), ManifestOptions(gpu_product_labels=(("h200_sxm", "NVIDIA-H200-141GB-HBM3e"),)))
    decode = next(c for c in own["spec"]["components"] if c["name"] == "decode")
    assert decode["podTemplate"]["spec"]["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H200-141GB-HBM3e"}
    assert check_manifest(own) == []


def test_a_gpu_type_without_a_known_product_label_is_refused_until_given() -> None:
    c = replace(mixed(), hardware={"prefill": "h100_sxm", "decode": "b60"})
    with pytest.raises(ManifestError) as err:
        manifest(c)
    assert "decode_hardware_sku" in str(err.value) and "--gpu-product-label b60=" in str(err.value)
    doc = manifest(c, ManifestOptions(gpu_product_labels=(("b60", "Intel-Arc-Pro-B60"),)))
    assert check_manifest(doc) == []


# ---------------------------------------------------------------- end to end


@pytest.mark.slow
def test_a_mixed_pair_decodes_like_its_decode_sku_and_prefills_towards_its_prefill_sku(tmp_path: Path,
                                                                                    capsys: Any) -> None:
    """Open loop (a fixed request rate), so TTFT is the prefill side's own and not coupled to decode speed."""
    out = {}
    workload = {"isl": 4000, "osl": 300, "request_rate": 2.0, "num_request_ratio": 40}
    for prefill, decode in (("h100_sxm", "h200_sxm"), ("h200_sxm", "h200_sxm"), ("h100_sxm", "h100_sxm")):
        path = tmp_path / f"{prefill}-{decode}.yaml"
        path.write_text(yaml.safe_dump({
            "search_space": {"model_name": QWEN, "gpu_budget": 8, "backend": ["vllm"], **PIN,
                             "deployment_mode": ["disagg"], "prefill_hardware_sku": prefill,
                             "decode_hardware_sku": decode,
                             "parallel_configs": [{"prefill": {"tp": 2}, "decode": {"tp": 4}}]},
            "workload": workload}))
        assert spica(["evaluate", str(path), "--json"]) == 0
        out[prefill, decode] = json.loads(capsys.readouterr().out)["metrics"]
    mix, h200, h100 = out["h100_sxm", "h200_sxm"], out["h200_sxm", "h200_sxm"], out["h100_sxm", "h100_sxm"]
    assert mix["mean_itl_ms"] == pytest.approx(h200["mean_itl_ms"], rel=0.03)
    assert abs(mix["mean_itl_ms"] - h100["mean_itl_ms"]) > 0.1 * h200["mean_itl_ms"]
    assert abs(mix["mean_ttft_ms"] - h100["mean_ttft_ms"]) < abs(h200["mean_ttft_ms"] - h100["mean_ttft_ms"])


@pytest.mark.slow
def test_a_thorough_cost_sweep_over_two_skus_ranks_by_the_formula(tmp_path: Path, capfd: Any) -> None:
    prices = {"h100_sxm": 3.0, "h200_sxm": 4.0}
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({
        "search_space": {"model_name": QWEN, "hardware_sku": ["h100_sxm", "h200_sxm"], "gpu_budget": 4,
                         "deployment_mode": ["agg"], "backend": ["vllm"], **PIN},
        "workload": {"isl": 2000, "osl": 200, "concurrency": 16, "num_request_ratio": 4},
        "goal": {"target": "cost_per_mtok", "sla": {"ttft_ms": 3000, "itl_ms": 60}, "gpu_hour_usd": prices,
                 "sla_attainment": 0.0},
        "sweep": {"policy": "thorough", "parallel_evals": 2}}))
    runs = tmp_path / "runs"
    assert spica(["sweep", str(path), "--runs-root", str(runs)]) == 0
    assert "GPU type" in capfd.readouterr().out   # the sweep's table (a supervised child writes it)
    body = json.loads(next(runs.glob("*/candidates.json")).read_text())
    cands = body["candidates"]
    assert {c["config"]["hardware_sku"] for c in cands} == {"h100_sxm", "h200_sxm"}
    costs = []
    for c in cands:
        m, sku = c["metrics"], c["config"]["hardware_sku"]
        usd = sum(m[f"{r}_worker_seconds"] * m[f"{r}_gpus_per_worker"] / 3600 * prices[sku]
                  for r in ("prefill", "decode"))
        tokens = m["goodput_output_throughput_tok_s"] * m["duration_ms"] / 1000 / 1e6
        assert m["cost_per_mtok"] == pytest.approx(usd / tokens)
        costs.append(usd / tokens)
    assert costs == sorted(costs) and [c["rank"] for c in cands] == list(range(1, len(cands) + 1))
    labels = {"h100_sxm": "NVIDIA-H100-SXM5-80GB", "h200_sxm": "NVIDIA-H200-141GB-HBM3e"}
    out = tmp_path / "k8s"
    assert spica(["emit", str(next(runs.iterdir())), "--top", "2", "--out", str(out),
                  *(a for sku, label in labels.items() for a in ("--gpu-product-label", f"{sku}={label}"))]) == 0
    for rank in (1, 2):
        doc = yaml.safe_load((out / f"rank-{rank}.yaml").read_text())
        worker = next(c for c in doc["spec"]["components"] if c["name"] != "Frontend")
        sku = cands[rank - 1]["config"]["hardware_sku"]
        assert worker["podTemplate"]["spec"]["nodeSelector"] == {"nvidia.com/gpu.product": labels[sku]}


def test_spica_evaluate_needs_one_type_per_role_within_the_inventory(tmp_path: Path, capsys: Any) -> None:
    pin = {"deployment_mode": ["disagg"], "parallel_configs": [{"prefill": {"tp": 2}, "decode": {"tp": 4}}]}
    two = write(tmp_path, {**pin, "hardware_sku": "h200_sxm", "prefill_hardware_sku": ["h100_sxm", "h200_sxm"]})
    assert spica(["evaluate", str(two)]) == 2
    assert "prefill_hardware_sku (2 values: ['h100_sxm', 'h200_sxm'])" in capsys.readouterr().err
    capped = write(tmp_path, {**pin, "hardware_sku": "h200_sxm", "gpu_inventory": {"h200_sxm": 4}})
    assert spica(["evaluate", str(capped)]) == 2
    assert "search_space.gpu_inventory: the pinned deployment needs 6 × h200_sxm" in capsys.readouterr().err


def test_emit_refuses_a_product_label_that_is_not_sku_equals_a_label_value(tmp_path: Path, capsys: Any) -> None:
    for bad in ("h200_sxm", "h200_sxm=NVIDIA H200", "=NVIDIA-H200"):
        with pytest.raises(SystemExit) as exit_:
            spica(["emit", str(tmp_path), "--gpu-product-label", bad])
        assert exit_.value.code == 2 and "--gpu-product-label" in capsys.readouterr().err

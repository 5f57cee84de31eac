"""The pure parts of bench/bench_accuracy.py: row → config, coverage and skip decisions, summary maths, bands."""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.accuracy_rows import band_keys, bands, error_stats, summarize  # noqa: E402
from spica_core.calibrate.silicon import (Checkpoint, choose_precision, make_config, parse_row,  # noqa: E402
                                          plan_row, recipe_recv_interval)
from spica_core.config.model import SmartSearchConfig  # noqa: E402
from spica_core.evaluate.replay_traces import spread_lengths  # noqa: E402
from spica_core.evaluate.workload import replay_workload  # noqa: E402

BUNDLED = ["Qwen/Qwen3-32B", "meta-llama/Meta-Llama-3.1-70B", "MiniMaxAI/MiniMax-M2.5", "nvidia/MiniMax-M2.5-NVFP4",
           "Qwen/Qwen3.5-397B-A17B", "deepseek-ai/DeepSeek-R1", "openai/gpt-oss-120b"]
CKPT = {"Qwen/Qwen3-32B": Checkpoint("Qwen/Qwen3-32B", "bf16", "bf16", "bf16", False),
        "meta-llama/Meta-Llama-3.1-70B": Checkpoint("meta-llama/Meta-Llama-3.1-70B", "bf16", "bf16", "bf16", False),
        "MiniMaxAI/MiniMax-M2.5": Checkpoint("MiniMaxAI/MiniMax-M2.5", "fp8_block", "fp8_block", "fp8_block", True),
        "nvidia/MiniMax-M2.5-NVFP4": Checkpoint("nvidia/MiniMax-M2.5-NVFP4", "nvfp4", "nvfp4", "nvfp4", True),
        "Qwen/Qwen3.5-397B-A17B": Checkpoint("Qwen/Qwen3.5-397B-A17B", "bf16", "bf16", "bf16", True),
        "deepseek-ai/DeepSeek-R1": Checkpoint("deepseek-ai/DeepSeek-R1", "fp8_block", "fp8_block", "fp8_block", True),
        "openai/gpt-oss-120b": Checkpoint("openai/gpt-oss-120b", "w4a16_mxfp4", "bf16", "w4a16_mxfp4", True)}


def ck(name: str) -> Checkpoint:
    return CKPT[name]


def raw(**kw: str) -> dict[str, str]:
    base = {"id": "r1", "silicon_data_source": "db-dump/2026-04-27; silicon_concurrency=64", "backend": "vllm",
            "backend_version": "0.19.0", "model_path": "Qwen/Qwen3-32B", "system": "h100_sxm", "precision": "",
            "mode": "agg", "isl": "1024", "osl": "128", "gemm_quant_mode": "", "moe_quant_mode": "",
            "batch_size": "64", "tp_size": "2", "pp_size": "1", "attention_dp_size": "1", "moe_tp_size": "",
            "moe_ep_size": "", "silicon_ttft_ms": "200.0", "silicon_tpot_ms": "20.0"}
    base.update(kw)
    return base


def plan(**kw: str):
    return plan_row(parse_row(raw(**kw)), BUNDLED, ck)


def test_agg_row_maps_to_closed_loop_config(tmp_path: Path) -> None:
    p = plan()
    assert p.concurrency == 64 and p.measured_requests == 640 and p.total_requests == 640
    assert p.parallel == {"tp": 2, "attention_dp": 1, "replicas": 1} and p.gpus == 2
    cfg = make_config(p)
    ss, wl = cfg["search_space"], cfg["workload"]
    assert ss["model_name"] == "Qwen/Qwen3-32B" and ss["hardware_sku"] == "h100_sxm" and ss["backend"] == ["vllm"]
    assert ss["parallel_configs"] == [{"tp": 2, "attention_dp": 1, "replicas": 1}]
    assert ss["agg_max_num_batched_tokens"] == [8192] and ss["agg_max_num_seqs"] == [256]
    assert ss["agg_enable_prefix_caching"] is False and "quantization" not in ss
    assert wl == {"isl": 1024, "osl": 128, "concurrency": 64, "num_request_ratio": 10.0, "length_spread": 0.2}
    config = SmartSearchConfig.from_dict(cfg)          # the product's own option: self-contained, re-runnable
    rw = replay_workload(config.workload, directory=tmp_path)
    assert rw.kind == "trace" and rw.kwargs["replay_concurrency"] == 64
    lines = [json.loads(x) for x in Path(rw.trace_path).read_text().splitlines()]
    assert len(lines) == 640
    ins = [x["input_length"] for x in lines]
    outs = [x["output_length"] for x in lines]
    assert min(ins) >= 819 and max(ins) <= 1024 and min(outs) >= 102 and max(outs) <= 128
    assert 0.85 < sum(ins) / len(ins) / 1024 < 0.95          # mean 0.9 L
    hashes = [h for x in lines for h in x["hash_ids"]]
    assert len(hashes) == len(set(hashes))                    # nothing shared
    assert all(len(x["hash_ids"]) == -(-x["input_length"] // 512) for x in lines)


def test_aic_gap_analysis_rows_replay_aics_own_benchmark() -> None:
    """AIC's generated benchmark: aiperf, 20 × c requests of fixed lengths; InferenceX rows keep theirs."""
    gap = plan(silicon_data_source="source_file=/Users/x/projects/aic-auto-gap-analysis/data/h100_sxm/sglang/q.csv",
               batch_size="16")
    cfg = make_config(gap)["workload"]
    assert cfg["length_spread"] == 0.0 and cfg["num_request_ratio"] == 20.0 and gap.measured_requests == 320
    assert make_config(plan())["workload"]["length_spread"] == 0.2


def test_inferencex_sglang_rows_poll_at_their_recipes_interval_on_the_day_they_were_measured() -> None:
    """InferenceX's B200 DeepSeek-R1 recipe: every 30 iterations at CONC >= 16, else 10; a GLM-5 FP4 row measured
    before its recipe added the flag, a vLLM row, an H200 row and an AIC gap-analysis row keep SGLang's 1."""
    def recv(**kw: str) -> int:
        base = {"backend": "sglang", "model_path": "deepseek-ai/DeepSeek-R1", "system": "b200_sxm",
                "precision": "fp4", "tp_size": "8"}
        return recipe_recv_interval(parse_row(raw(**{**base, **kw})))

    ix = "source_file=2026-03-25.csv; model=DeepSeek-R1; silicon_concurrency={c}; measured=2026-02-05T19:55:05Z"
    assert recv(silicon_data_source=ix.format(c=64)) == 30
    assert recv(silicon_data_source=ix.format(c=8), batch_size="8") == 10
    assert recv(silicon_data_source=ix.format(c=8), backend="vllm") == 1
    assert recv(silicon_data_source=ix.format(c=8), system="h200_sxm", precision="fp8") == 1
    assert recv(silicon_data_source=ix.format(c=64), precision="fp8", tp_size="4") == 10   # the TP4 lane: always 10
    glm = "source_file=2026-03-25.csv; model=GLM-5; silicon_concurrency=8; measured={day}T05:43:03Z"
    assert recv(silicon_data_source=glm.format(day="2026-03-29"), model_path="zhipuai/GLM-5") == 1
    assert recv(silicon_data_source=glm.format(day="2026-04-10"), model_path="zhipuai/GLM-5") == 10
    gap = "source_file=/Users/x/projects/aic-auto-gap-analysis/data/b200_sxm/sglang/d.csv; silicon_concurrency=64"
    assert recv(silicon_data_source=gap) == 1
    row = plan_row(parse_row(raw(silicon_data_source=ix.format(c=64), backend="sglang", system="b200_sxm",
                                 model_path="deepseek-ai/DeepSeek-R1", precision="fp4", gemm_quant_mode="fp8_block",
                                 moe_quant_mode="fp8_block", tp_size="8", moe_tp_size="8", moe_ep_size="1")),
                   BUNDLED, ck)
    assert not isinstance(row, str), row
    assert make_config(row)["search_space"]["scheduler_recv_interval"] == 30
    assert "scheduler_recv_interval" not in make_config(plan())["search_space"]


def test_rows_measured_with_mtp_replay_at_their_recipes_depth() -> None:
    """InferenceX's DeepSeek-R1 B200 TRT-LLM MTP recipes ran TRT-LLM 1.2.0rc6.post3 (the plain ones post2) with 3
    draft layers, 1 with attention DP: a post3 row replays with that ``aic_nextn``; the same row on post2, on
    another SKU, or from a source other than InferenceX replays without a draft."""
    ix = "source_file=2026-04-06.csv; model=DeepSeek-R1; silicon_concurrency=4; measured=2026-02-05T00:00:00.000Z"
    base = {"silicon_data_source": ix, "backend": "trtllm", "backend_version": "1.2.0rc6.post3",
            "model_path": "deepseek-ai/DeepSeek-R1", "system": "b200_sxm", "precision": "fp8",
            "gemm_quant_mode": "fp8_block", "moe_quant_mode": "fp8_block", "batch_size": "4", "tp_size": "8",
            "moe_tp_size": "8", "moe_ep_size": "1"}

    def nextn(**kw: str) -> int | None:
        p = plan(**{**base, **kw})
        assert not isinstance(p, str), p
        return make_config(p)["search_space"].get("aic_nextn")

    assert nextn() == 3
    adp = "source_file=2026-04-06.csv; model=DeepSeek-R1; silicon_concurrency=256; measured=2026-02-05T00:00:00Z"
    assert nextn(silicon_data_source=adp, batch_size="32", tp_size="1", attention_dp_size="8", moe_tp_size="1",
                 moe_ep_size="8") == 1
    assert nextn(backend_version="1.2.0rc6.post2") is None
    assert nextn(system="h200_sxm") is None
    gap = "source_file=/Users/x/projects/aic-auto-gap-analysis/data/b200_sxm/trtllm/d.csv; silicon_concurrency=4"
    assert nextn(silicon_data_source=gap) is None
    SmartSearchConfig.from_dict(make_config(plan(**base)))     # the product takes the pin


def test_lengths_uniform_and_deterministic() -> None:
    a = spread_lengths(8192, 1024, 2000, 0.2)
    assert a == spread_lengths(8192, 1024, 2000, 0.2)
    assert min(i for i, _ in a) == math.floor(0.8 * 8192) and max(i for i, _ in a) == 8192
    assert min(o for _, o in a) == math.floor(0.8 * 1024) and max(o for _, o in a) == 1024


def test_large_concurrency_rounds_max_num_seqs_to_allowed_value() -> None:
    p = plan(batch_size="600", silicon_data_source="x")
    assert p.concurrency == 600 and make_config(p)["search_space"]["agg_max_num_seqs"] == [1024]
    p = plan(batch_size="256", attention_dp_size="4", tp_size="1", silicon_data_source="x")
    assert p.concurrency == 1024                                   # batch_size is per attention-DP rank
    assert make_config(p)["search_space"]["agg_max_num_seqs"] == [256]   # 256 per DP rank


def test_concurrency_from_source_and_replicas() -> None:
    p = plan(silicon_data_source="db-dump; silicon_concurrency=512", batch_size="128", attention_dp_size="4",
             tp_size="1")
    assert p.concurrency == 512 and p.parallel["replicas"] == 1
    p = plan(silicon_data_source="gap; silicon_concurrency=32", batch_size="8")   # c = 4 × batch: 4 replicas
    assert p.concurrency == 32 and p.parallel["replicas"] == 4 and p.gpus == 8
    assert plan(id="x_c16_y", silicon_data_source="x", batch_size="").concurrency == 16


def test_quantization_pin_for_bf16_checkpoint() -> None:
    p = plan(model_path="meta-llama/Llama-3.1-70B", gemm_quant_mode="fp8", moe_quant_mode="fp8", precision="fp8")
    assert p.model == "meta-llama/Meta-Llama-3.1-70B" and p.quantization == "fp8"
    assert "Meta-Llama-3.1-70B" in p.notes
    assert make_config(p)["search_space"]["quantization"] == "fp8"
    assert make_config(p)["search_space"]["kv_cache_dtype"] == "fp8"     # FP8/FP4 rows: fp8 KV
    assert "kv_cache_dtype" not in make_config(plan())["search_space"]   # bf16 rows: the default
    assert plan_row(parse_row(raw(gemm_quant_mode="fp8")), BUNDLED, ck, quantization_available=False).startswith(
        "precision: needs search_space.quantization")


def test_precision_families_and_inexpressible_rows() -> None:
    fp4 = plan(model_path="MiniMaxAI/MiniMax-M2.5", gemm_quant_mode="nvfp4", moe_quant_mode="nvfp4", tp_size="4",
               moe_tp_size="4", moe_ep_size="1")
    assert fp4.model == "nvidia/MiniMax-M2.5-NVFP4" and fp4.quantization is None
    fp8 = plan(model_path="MiniMaxAI/MiniMax-M2.5", gemm_quant_mode="fp8", moe_quant_mode="fp8", tp_size="4",
               moe_tp_size="4", moe_ep_size="1")
    assert fp8.model == "MiniMaxAI/MiniMax-M2.5" and fp8.quantization is None and "same family" in fp8.notes
    gptoss = plan(model_path="openai/gpt-oss-120b", gemm_quant_mode="nvfp4", moe_quant_mode="nvfp4")
    assert gptoss.quantization is None
    mixed = plan(model_path="Qwen/Qwen3.5-397B-A17B", gemm_quant_mode="fp8", moe_quant_mode="fp8_block")
    assert isinstance(mixed, str) and "differ from each other" in mixed
    r1 = plan(model_path="deepseek-ai/DeepSeek-R1", gemm_quant_mode="nvfp4", moe_quant_mode="nvfp4", tp_size="8",
              moe_tp_size="8", moe_ep_size="1")     # NVIDIA's NVFP4 export of the FP8 checkpoint: fewer bits, pinned
    assert r1.model == "deepseek-ai/DeepSeek-R1" and r1.quantization == "nvfp4" and "nvfp4 checkpoint" in r1.notes
    up = plan(model_path="openai/gpt-oss-120b", gemm_quant_mode="fp8", moe_quant_mode="fp8")  # more bits: refused
    assert isinstance(up, str) and "fewer weight bits" in up
    assert "not an aiconfigurator-core bundled id" in plan(model_path="nvidia/DeepSeek-R1-NVFP4")
    assert choose_precision(parse_row(raw()), BUNDLED, ck).quantization is None


def test_skip_decisions() -> None:
    assert plan(silicon_ttft_ms="").startswith("measured")
    assert plan(pp_size="2").startswith("shape: pipeline")
    no_workers = plan(mode="disagg", batch_size="")
    assert no_workers.startswith("disagg: no prefill/decode worker counts")
    assert plan(batch_size="", silicon_data_source="x").startswith("no batch_size")
    refused = plan_row(parse_row(raw()), BUNDLED, ck, legal=lambda p: "pin not legal: x")
    assert refused == "pin not legal: x"


def test_disagg_row_rebuilds_xpyd() -> None:
    p = plan(mode="disagg", batch_size="", tp_size="", silicon_data_source="db-dump; silicon_concurrency=192",
             prefill_num_workers="1", prefill_tp_size="4", prefill_attention_dp_size="1", prefill_pp_size="1",
             decode_num_workers="2", decode_tp_size="8", decode_attention_dp_size="1", decode_pp_size="1")
    assert p.concurrency == 192 and p.gpus == 4 + 16
    assert p.parallel == {"prefill": {"tp": 4, "attention_dp": 1, "replicas": 1},
                          "decode": {"tp": 8, "attention_dp": 1, "replicas": 2}}
    ss = make_config(p)["search_space"]
    assert ss["prefill_max_num_seqs"] == [256] and ss["decode_max_num_seqs"] == [256]
    assert ss["prefill_enable_prefix_caching"] is False and ss["deployment_mode"] == ["disagg"]


def test_error_stats() -> None:
    s = error_stats([(100.0, 150.0), (100.0, 50.0), (200.0, 200.0), (100.0, None), (0.0, 5.0)])
    assert s["rows"] == 3
    assert s["mape"] == pytest.approx((0.5 + 0.5 + 0.0) / 3)
    assert s["median_signed_error"] == pytest.approx(0.0)
    ratios = sorted([100 / 150, 2.0, 1.0])
    assert s["ratio_p10"] == pytest.approx(ratios[0] + 0.2 * (ratios[1] - ratios[0]))
    assert s["ratio_p90"] == pytest.approx(ratios[1] + 0.8 * (ratios[2] - ratios[1]))
    assert error_stats([])["mape"] is None


def _row(i: int, model: str, meas: float, pred: float, aic: float | None) -> dict:
    return {"id": f"r{i}", "model": model, "system": "h100_sxm", "backend": "vllm", "mode": "agg",
            "measured": {"ttft_ms": meas, "tpot_ms": meas / 10}, "predicted": {"ttft_ms": pred, "tpot_ms": pred / 10},
            "aic": None if aic is None else {"ttft_ms": aic, "tpot_ms": aic / 10}, "aisim": None}


def test_summary_and_bands() -> None:
    rows = [_row(i, "A", 100.0, 80.0, 100.0) for i in range(10)] + [_row(10 + i, "B", 100.0, 200.0, None)
                                                                      for i in range(3)]
    s = summarize(rows)
    assert s["counts"] == {"rows": 13, "models": 2, "systems": 1}
    o = s["overall"]
    assert o["predicted_ttft_ms"]["mape"] == pytest.approx((10 * 0.2 + 3 * 1.0) / 13)
    assert o["predicted_tpot_ms"]["median_signed_error"] == pytest.approx(-0.2)
    assert o["aic_ttft_ms"]["rows"] == 10 and o["aic_ttft_ms"]["mape"] == pytest.approx(0.0)
    assert o["aisim_ttft_ms"]["rows"] == 0 and o["common_rows"] == 0
    assert s["groups"]["model"]["B"]["predicted_ttft_ms"]["ratio_p50"] == pytest.approx(0.5)
    b = bands(rows, min_rows=10)
    assert set(b) == {"ttft_ms", "itl_ms"}
    key_a = "model=A;system=h100_sxm;backend=vllm"
    assert key_a in b["ttft_ms"] and "model=B;system=h100_sxm;backend=vllm" not in b["ttft_ms"]
    assert b["ttft_ms"][key_a] == {"p05": 1.25, "p10": 1.25, "p50": 1.25, "p90": 1.25, "p95": 1.25, "p99": 1.25,
                                   "rows": 10}
    assert b["itl_ms"]["all"]["rows"] == 13 and b["ttft_ms"]["all"]["p10"] == pytest.approx(0.5)
    assert b["ttft_ms"]["all"]["p50"] == pytest.approx(1.25) and "backend=vllm" not in b["ttft_ms"]
    assert band_keys(rows[0]) == [key_a, "all"]
    assert bands(rows[:3], min_rows=10)["ttft_ms"].keys() == {"all"}

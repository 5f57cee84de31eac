"""Pure-parsing tests of bench/peer_aisim.py (no AISimulate venv needed)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parents[1] / "bench" / "peer_aisim.py"
_spec = importlib.util.spec_from_file_location("peer_aisim", _PATH)
peer = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(peer)

AGG = {"id": "x_agg_c512_cfg1", "silicon_data_source": "db-dump/2026-04-27; silicon_concurrency=512; measured=x",
       "backend": "vllm", "backend_version": "0.19.0", "model_path": "meta-llama/Llama-3.1-70B",
       "system": "b300_sxm", "mode": "agg", "isl": "1024", "osl": "1024", "gemm_quant_mode": "fp8",
       "moe_quant_mode": "", "batch_size": "128", "tp_size": "1", "pp_size": "1", "attention_dp_size": "4",
       "moe_tp_size": "", "moe_ep_size": "0"}
DISAGG = {"id": "k_disagg_1024x1024_c192_cfg759", "silicon_data_source": "db-dump; silicon_concurrency=192",
          "backend": "trtllm", "model_path": "moonshotai/Kimi-K2.5", "system": "gb200", "mode": "disagg",
          "isl": "1024", "osl": "1024", "gemm_quant_mode": "nvfp4", "moe_quant_mode": "nvfp4", "batch_size": "",
          "prefill_num_workers": "1", "prefill_tp_size": "1", "prefill_pp_size": "1",
          "prefill_attention_dp_size": "4", "prefill_moe_tp_size": "1", "prefill_moe_ep_size": "4",
          "decode_batch_size": "48", "decode_num_workers": "4", "decode_tp_size": "8", "decode_pp_size": "1",
          "decode_attention_dp_size": "1", "decode_moe_tp_size": "1", "decode_moe_ep_size": "8"}


def test_concurrency_prefers_recorded_client_concurrency():
    assert peer.client_concurrency(AGG) == 512                      # not batch_size (per attention-DP rank)
    assert peer.client_concurrency({**AGG, "silicon_data_source": ""}) == 512          # from _c512_ in the id
    assert peer.client_concurrency({**AGG, "silicon_data_source": "", "id": "x"}) == 128 * 4
    assert peer.client_concurrency({**DISAGG, "silicon_data_source": "", "id": "x"}) == 48 * 4
    with pytest.raises(peer.RowError):
        peer.client_concurrency({**DISAGG, "silicon_data_source": "", "id": "x", "decode_batch_size": ""})


def test_agg_replicas_and_quant_rules():
    gap = {**AGG, "silicon_data_source": "gap; silicon_concurrency=288", "batch_size": "144",
           "attention_dp_size": "0", "tp_size": "2"}
    assert peer.agg_replicas(gap, 288) == 2 and peer.agg_replicas(AGG, 512) == 1
    assert peer.row_config(gap, "t")["engine"]["workers"]["aggregated"]["parallelism"]["replicas"] == 2
    oss = peer.row_config({**AGG, "model_path": "openai/gpt-oss-120b", "moe_quant_mode": "nvfp4"}, "t")["engine"]
    assert "gemm_quant_mode" not in oss and "moe_quant_mode" not in oss
    sgl = peer.row_config({**AGG, "backend": "sglang", "moe_quant_mode": "fp8"}, "t")["engine"]
    assert sgl["moe_quant_mode"] == "fp8_block"


def test_agg_config():
    cfg = peer.row_config(AGG, "/tmp/t.jsonl")
    eng = cfg["engine"]
    assert cfg["traffic"]["load"] == {"type": "concurrency", "concurrency": 512}
    assert cfg["traffic"]["source"]["paths"] == ["/tmp/t.jsonl"]
    assert eng["model"] == "meta-llama/Meta-Llama-3.1-70B" and eng["mode"] == "aggregated"
    assert eng["gemm_quant_mode"] == "fp8" and "moe_quant_mode" not in eng
    w = eng["workers"]["aggregated"]
    assert w["parallelism"] == {"replicas": 1, "tensor": 1, "pipeline": 1, "attention_data": 4, "moe_tensor": 1,
                                "moe_expert": 1}
    assert w["scheduler"] == {"max_batched_tokens": 8192, "max_sequences": 512}
    assert w["kv_cache"] == {"prefix_caching": False}


def test_disagg_config_and_missing_workers():
    w = peer.row_config(DISAGG, "t")["engine"]["workers"]
    assert w["prefill"]["parallelism"]["replicas"] == 1 and w["prefill"]["parallelism"]["attention_data"] == 4
    assert w["decode"]["parallelism"]["replicas"] == 4 and w["decode"]["parallelism"]["tensor"] == 8
    assert w["decode"]["scheduler"]["max_sequences"] == 256
    with pytest.raises(peer.RowError, match="worker counts"):
        peer.row_config({**DISAGG, "prefill_num_workers": ""}, "t")


def test_job_and_trace():
    job = peer.row_job(DISAGG, "t")
    assert job["trace"] == {"path": "t", "isl": 1024, "osl": 1024, "n": 1920, "low": 0.8, "seed": 0}
    recs = list(peer.trace_lines(1000, 100, 500))
    assert len(recs) == 500 and recs == list(peer.trace_lines(1000, 100, 500))       # seeded
    assert all(800 <= r["input_length"] <= 1000 and 80 <= r["output_length"] <= 100 for r in recs)
    ids = [h for r in recs for h in r["hash_ids"]]
    assert len(ids) == len(set(ids))                                                 # no shared prefixes
    assert all(len(r["hash_ids"]) * peer.TRACE_BLOCK >= r["input_length"] for r in recs)
    json.dumps(recs[0])


def test_cache_is_keyed_and_summary(tmp_path):
    cache = tmp_path / "c.json"
    key = peer._cache_key()
    peer._write_cache(cache, {key: {"a": {"ttft_ms": 110.0, "tpot_ms": 9.0, "cpu_s": 1.0}, "b": {"error": "no"}}})
    out = peer.predict_rows(["a", "b"], cache=cache)                                 # all cached: no venv needed
    assert out["a"]["ttft_ms"] == 110.0 and out["b"] == {"error": "no"}
    rows = {"a": {"silicon_ttft_ms": "100", "silicon_tpot_ms": "10"}}
    s = peer.summarize(rows, out)
    assert s["predicted"] == 1 and s["errors"] == 1
    assert s["mape_ttft"] == pytest.approx(10.0) and s["mape_tpot"] == pytest.approx(10.0)

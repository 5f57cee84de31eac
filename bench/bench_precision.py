"""Precision as a deployment choice: what fp8 weights and an fp8 KV cache change, through ``spica evaluate``'s path.

    PYTHONPATH=. .venv/bin/python bench/bench_precision.py

1. Llama-3.1-70B on H200, vLLM, agg TP2, a closed loop of 64 requests of 1k in / 1k out (10 × 64
   requests): tokens/s per GPU and mean ITL at fp8 ÷ bf16 weights (target ≥ 1.15, with lower ITL).
2. KV tokens per rank at TP2 with an fp8 ÷ a bf16 KV cache (target about 2), for Llama-3.1-70B and
   Qwen3-32B on H200 with vLLM.
3. Feasibility: Llama-3.1-70B on one H200 (TP1) holds no KV cache in bf16 and does in fp8.

Writes ``bench/results/precision.json`` and the Precision section of ``docs/benchmarks.md``.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.results_doc import write_section  # noqa: E402
from spica_core.config.model import SmartSearchConfig  # noqa: E402
from spica_core.evaluate import EvalRequest, evaluate_one  # noqa: E402
from spica_core.deployment import Candidate  # noqa: E402
from spica_core.space.kv import kv_tokens_per_rank, shape_kv  # noqa: E402
from spica_core.space.parallel import ParallelConfig, Shape  # noqa: E402
from spica_core.space.precision import precision_of  # noqa: E402

OUT = Path(__file__).resolve().parent / "results" / "precision.json"
LLAMA, QWEN, SKU = "meta-llama/Meta-Llama-3.1-70B", "Qwen/Qwen3-32B", "h200_sxm"


def evaluate(quantization: str, kv: str) -> dict[str, float]:
    config = SmartSearchConfig.from_dict({
        "search_space": {"model_name": LLAMA, "hardware_sku": SKU, "gpu_budget": 2, "deployment_mode": ["agg"],
                         "backend": ["vllm"], "parallel_configs": [{"tp": 2}], "quantization": quantization,
                         "kv_cache_dtype": kv, "router_mode": ["round_robin"], "planner_scaling_policy": ["disabled"],
                         "agg_max_num_seqs": [256], "agg_max_num_batched_tokens": [8192]},
        "workload": {"isl": 1024, "osl": 1024, "concurrency": 64, "num_request_ratio": 10},
        "goal": {"target": "throughput_per_gpu"}})
    cand = Candidate.unroll(config.search_space, {"deployment_mode": "agg"}, ParallelConfig.from_dict("agg", {"tp": 2}))
    out = evaluate_one(EvalRequest.from_config(config, cand))
    assert out.feasible, out.reason
    return {"tok_s_per_gpu": float(out.score or 0.0), "mean_itl_ms": out.metrics["mean_itl_ms"],
            "mean_ttft_ms": out.metrics["mean_ttft_ms"]}


def kv_ratio(model: str) -> dict[str, Any]:
    bf16 = kv_tokens_per_rank(model, SKU, "vllm", Shape(2), precision=precision_of(model, None, "bf16"))
    fp8 = kv_tokens_per_rank(model, SKU, "vllm", Shape(2), precision=precision_of(model, None, "fp8"))
    assert bf16 and fp8
    return {"model": model, "bf16_kv_tokens": bf16, "fp8_kv_tokens": fp8, "ratio": fp8 / bf16}


def main() -> None:
    runs = {f"{q}/kv-{kv}": evaluate(q, kv) for q in ("bf16", "fp8") for kv in ("bf16", "fp8")}
    base, fp8 = runs["bf16/kv-bf16"], runs["fp8/kv-bf16"]
    tp1 = {q: shape_kv(LLAMA, SKU, "vllm", Shape(1), 8192, precision_of(LLAMA, q, "bf16")) for q in ("bf16", "fp8")}
    result = {
        "case": "Llama-3.1-70B, h200_sxm, vLLM, agg TP2, 1024/1024, concurrency 64, 640 requests",
        "runs": runs,
        "fp8_over_bf16_tok_s_per_gpu": fp8["tok_s_per_gpu"] / base["tok_s_per_gpu"],
        "fp8_over_bf16_itl": fp8["mean_itl_ms"] / base["mean_itl_ms"],
        "kv_fp8_over_bf16": [kv_ratio(LLAMA), kv_ratio(QWEN)],
        "llama_tp1": {q: {"feasible": r.feasible, "kv_tokens_per_rank": r.kv_tokens_per_rank, "reason": r.reason}
                      for q, r in tp1.items()},
    }
    OUT.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    lines = [f"Measured by `PYTHONPATH=. .venv/bin/python bench/bench_precision.py` ({result['case']}).", "",
             "| weights / KV | tok/s/GPU | mean ITL | mean TTFT |", "|---|---|---|---|"]
    lines += [f"| {name} | {r['tok_s_per_gpu']:.0f} | {r['mean_itl_ms']:.2f} ms | {r['mean_ttft_ms']:.0f} ms |"
              for name, r in runs.items()]
    lines += ["", f"- fp8 ÷ bf16 weights: **{result['fp8_over_bf16_tok_s_per_gpu']:.2f}×** tok/s/GPU (target ≥ 1.15), "
              f"ITL × {result['fp8_over_bf16_itl']:.2f} (lower)."]
    lines += [f"- fp8 ÷ bf16 KV cache, tokens per rank at TP2, {k['model']}: **{k['ratio']:.2f}×** "
              f"({k['fp8_kv_tokens']:,} vs {k['bf16_kv_tokens']:,}; target about 2)." for k in result["kv_fp8_over_bf16"]]
    t = result["llama_tp1"]
    lines += [f"- Llama-3.1-70B on one H200 (TP1): bf16 {'fits' if t['bf16']['feasible'] else 'does not fit'} "
              f"({t['bf16']['reason'] or 'ok'}); fp8 {'fits' if t['fp8']['feasible'] else 'does not fit'} "
              f"({t['fp8']['kv_tokens_per_rank']:,} KV tokens per rank)."]
    write_section("precision", "Precision (`bench/bench_precision.py`)", lines)
    print(json.dumps(result, indent=1, sort_keys=True))


if __name__ == "__main__":
    main()

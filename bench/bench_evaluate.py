"""How much of an evaluation is spent outside the replay call? Target: under 10 % of replay time.

Overhead = everything one evaluation costs besides ``run_mocker_*_replay`` itself: resolving the
backend version, the profile lookup (warm cache), KV blocks, building and validating the engine
arguments, scoring, and — on the pool path — the hop to a worker process and back.

    PYTHONPATH=. /work/venv/bin/python bench/bench_evaluate.py [--repeats 7] [--requests 1000]
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

os.environ.setdefault("DYN_LOG", "error")

from spica_core.config.model import SmartSearchConfig  # noqa: E402
from spica_core.deployment import Candidate
from spica_core.evaluate import EvalPool, EvalRequest, evaluate_one  # noqa: E402
from spica_core.space.parallel import ParallelConfig  # noqa: E402
from examples.make_traces import write_poisson_trace  # noqa: E402


def make_request(trace: Path, router: str) -> EvalRequest:
    space = {"model_name": "Qwen/Qwen3-32B", "hardware_sku": "h200_sxm", "deployment_mode": ["agg"],
             "router_mode": [router], "overlap_score_credit": [1.0], "prefill_load_scale": [1.0],
             "router_temperature": [0.0], "planner_scaling_policy": ["disabled"],
             "agg_max_num_batched_tokens": [8192], "agg_max_num_seqs": [256], "gpu_budget": 8}
    cfg = SmartSearchConfig.from_dict({"search_space": space, "workload": {"trace_path": str(trace)},
                                       "goal": {"target": "goodput_per_gpu", "sla": {"ttft_ms": 1000, "itl_ms": 30}}})
    candidate = Candidate.unroll(cfg.search_space, {"deployment_mode": "agg"},
                                 ParallelConfig.from_dict("agg", {"tp": 2, "replicas": 4}))
    return EvalRequest.from_config(cfg, candidate, trace_file=str(trace))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--router", default="round_robin", choices=("round_robin", "kv_router"))
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="spica-bench-"))
    trace = write_poisson_trace(tmp / "bench.jsonl", num_requests=args.requests, rate_rps=6.0, isl=3000, osl=200,
                                prefix_groups=50, prefix_blocks=4, seed=7)
    req = make_request(trace, args.router)

    t0 = time.perf_counter()
    first = evaluate_one(req)  # cold: builds (or loads) the profile, loads AIC's perf DB
    assert first.status == "feasible", first.reason
    print(f"cold first evaluation: {time.perf_counter() - t0:.2f}s (profile cache: {os.environ.get('SPICA_CACHE_DIR') or '~/.cache/spica/profiles'})")

    # in-process, warm
    prep, replay, score = [], [], []
    for _ in range(args.repeats):
        out = evaluate_one(req)
        prep.append(out.timings["prepare_s"])
        replay.append(out.timings["replay_s"])
        score.append(out.timings["score_s"])
    p, r, s = statistics.median(prep), statistics.median(replay), statistics.median(score)
    print(f"in-process (median of {args.repeats}): replay {r * 1e3:.1f} ms | outside replay {(p + s) * 1e3:.2f} ms "
          f"(prepare {p * 1e3:.2f}, score {s * 1e3:.3f}) | ratio {(p + s) / r:.1%}")

    # worker process, warm: add the hop (pickling the request, the outcome, pipe round trip)
    with EvalPool(1, max_eval_seconds=600) as pool:
        pool.evaluate_batch([req])
        hops, outside, replay_p = [], [], []
        for _ in range(args.repeats):
            (out,) = pool.evaluate_batch([req])
            hop = out.timings["wall_s"] - out.timings["total_s"]
            hops.append(hop)
            replay_p.append(out.timings["replay_s"])
            outside.append(out.timings["wall_s"] - out.timings["replay_s"])
    h, o, rp = statistics.median(hops), statistics.median(outside), statistics.median(replay_p)
    print(f"worker process (median of {args.repeats}): replay {rp * 1e3:.1f} ms | outside replay {o * 1e3:.2f} ms "
          f"(process hop {h * 1e3:.2f}) | ratio {o / rp:.1%}")
    print(f"RATIO outside/replay = {o / rp:.1%} (target < 10%)")


if __name__ == "__main__":
    main()

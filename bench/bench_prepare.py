"""What does a candidate cost outside its replay when many candidates share an engine shape?

Issue 21 ("prepare once"): on a real trace a sweep's candidates repeat a few engine shapes with
different batching knobs and replica counts. This evaluates such a batch one after the other in
ONE process, as a sweep worker does, through ``evaluate_one``: Llama-3.1-70B on 16 × H200, vLLM,
agg, replaying the public Mooncake trace with the round-robin router (deterministic). It prints
one JSON line: per evaluation its ``timings`` (prepare parts, replay, total) and score, and the
mean time outside the replay (and that of the evaluations after the first).

    .venv/bin/python bench/bench_prepare.py [--cache-dir DIR] [--workers N] [--outcomes FILE] [--profile]

The cache (``SPICA_CACHE_DIR``: profiles, SKU facts, KV estimates, fitted traces) is a new empty
folder unless ``--cache-dir`` names one: run twice with the same folder to see what a second
worker process pays once the first has filled it. ``--outcomes`` writes each evaluation's score,
metrics and report (to check that a change leaves results alone); ``--workers N`` evaluates the
batch on a pool of N worker processes instead, as a sweep does (each worker's first candidate
pays that process's start-up costs); ``--profile`` (in-process only) prints the cProfile
functions that cost the most to stderr.
"""
from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("DYN_LOG", "error")

from spica_core.config.model import SmartSearchConfig  # noqa: E402
from spica_core.deployment import Candidate
from spica_core.evaluate import EvalPool, EvalRequest, Outcome, evaluate_one  # noqa: E402
from spica_core.space.parallel import ParallelConfig  # noqa: E402

MODEL = "meta-llama/Meta-Llama-3.1-70B"
TRACE = Path(__file__).resolve().parents[1] / "examples/traces/mooncake_synthetic_trace.jsonl"  # Mooncake, FAST'25
# (tp, replicas, max_num_batched_tokens, max_num_seqs): three candidates on TP4, two on TP8, one on TP2.
CANDIDATES = [(4, 4, 8192, 256), (4, 4, 16384, 1024), (4, 2, 8192, 512), (8, 2, 8192, 256), (8, 1, 16384, 256),
              (2, 8, 8192, 256)]


def config(trace: Path) -> SmartSearchConfig:
    space = {"model_name": MODEL, "hardware_sku": "h200_sxm", "gpu_budget": 16, "deployment_mode": ["agg"],
             "backend": ["vllm"], "router_mode": ["round_robin"], "planner_scaling_policy": ["disabled"],
             "agg_max_num_batched_tokens": [8192, 16384], "agg_max_num_seqs": [256, 512, 1024]}
    return SmartSearchConfig.from_dict({"search_space": space,
                                        "workload": {"trace_path": str(trace), "over_context": "drop"},
                                        "goal": {"target": "goodput_per_gpu", "sla": {"ttft_ms": 10000, "itl_ms": 40}}})


def requests(cfg: SmartSearchConfig, trace: Path) -> list[EvalRequest]:
    """One request per candidate, built the way ``SearchContext.request`` builds a sweep's."""
    out = []
    for i, (tp, replicas, mnbt, mns) in enumerate(CANDIDATES):
        selection = {"deployment_mode": "agg", "agg_max_num_batched_tokens": mnbt, "agg_max_num_seqs": mns}
        parallel = ParallelConfig.from_dict("agg", {"tp": tp, "replicas": replicas})
        candidate = Candidate.unroll(cfg.search_space, selection, parallel)
        out.append(EvalRequest.from_config(cfg, candidate, trace_file=str(trace), eval_id=f"c{i}"))
    return out


def profiled(prof: cProfile.Profile | None, req: EvalRequest) -> Outcome:
    """One in-process evaluation, profiled when asked (the profile covers evaluations only)."""
    if prof is None:
        return evaluate_one(req)
    prof.enable()
    try:
        return evaluate_one(req)
    finally:
        prof.disable()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", type=Path, default=TRACE)
    ap.add_argument("--cache-dir", type=Path, help="SPICA_CACHE_DIR (default: a new empty folder)")
    ap.add_argument("--outcomes", type=Path, help="write each evaluation's score, metrics and report here (JSON)")
    ap.add_argument("--workers", type=int, default=0, help="evaluate on a pool of N worker processes (0: in-process)")
    ap.add_argument("--profile", action="store_true", help="cProfile the batch; top functions to stderr")
    args = ap.parse_args()

    cache = args.cache_dir or Path(tempfile.mkdtemp(prefix="spica-bench-prepare-"))
    os.environ["SPICA_CACHE_DIR"] = str(cache)
    reqs = requests(config(args.trace), args.trace)
    prof = cProfile.Profile() if args.profile and not args.workers else None
    t0 = time.perf_counter()
    if args.workers:
        with EvalPool(args.workers, max_eval_seconds=600) as pool:
            outcomes = pool.evaluate_batch(reqs)
    else:
        outcomes = [profiled(prof, req) for req in reqs]
    wall = time.perf_counter() - t0
    rows: list[dict[str, Any]] = []
    results: list[dict[str, Any]] = []
    for req, out in zip(reqs, outcomes):
        t = out.timings
        results.append({"eval_id": req.eval_id, "status": str(out.status), "reason": out.reason, "score": out.score,
                        "metrics": out.metrics, "report": out.report})
        rows.append({"eval_id": req.eval_id, "label": req.candidate.parallel.label(), "status": str(out.status),
                     "score": out.score, "outside_replay_s": round(t["total_s"] - t.get("replay_s", 0.0), 4),
                     "timings": {k: round(v, 4) for k, v in t.items()}})
    warm = [r["outside_replay_s"] for r in rows[1:]]
    if args.outcomes:
        args.outcomes.write_text(json.dumps(results, indent=1, sort_keys=True))
    print(json.dumps({"bench": "prepare", "model": MODEL, "trace": str(args.trace), "cache_dir": str(cache),
                      "workers": args.workers,
                      "wall_s": round(wall, 3), "first_outside_replay_s": rows[0]["outside_replay_s"],
                      "mean_outside_replay_s": round(statistics.mean(r["outside_replay_s"] for r in rows), 4),
                      "mean_replay_s": round(statistics.mean(r["timings"].get("replay_s", 0.0) for r in rows), 4),
                      "median_outside_replay_s_after_first": round(statistics.median(warm), 4),
                      "evaluations": rows}))
    if prof:
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats("cumulative").print_stats(45)
        print(s.getvalue(), file=sys.stderr)


if __name__ == "__main__":
    main()

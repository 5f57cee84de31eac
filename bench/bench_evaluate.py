"""Evaluation overhead: how much of an evaluation is spent outside the replay call? Target: under 10 % of replay time.

    .venv/bin/python bench/bench_evaluate.py        # about a minute on 2 cores
    .venv/bin/python bench/bench_evaluate.py --repeats 3 --requests 300   # smaller; prints, writes nothing

Overhead = everything one evaluation costs besides ``run_mocker_*_replay`` itself: resolving the backend
version, the profile lookup, KV blocks, building and validating the engine arguments, scoring, and — on the
pool path — the hop to a worker process and back. Two cases, through ``evaluate_one`` as a sweep's worker
calls it:

1. ``one_candidate``: Qwen3-32B, agg 4 × TP2 on h200_sxm, a generated 1,000-request shared-prefix trace, the
   same candidate again and again after a cold first evaluation (warm profile cache): median of ``--repeats``,
   in-process and through one worker process (``EvalPool``).
2. ``shared_shapes`` (issue 21, "prepare once"): six candidates of Llama-3.1-70B on 16 × H200 (vLLM, agg,
   round robin) on the public Mooncake trace that share three engine shapes (TP4 three times, TP8 twice, TP2
   once) with different batching knobs and replica counts, one after another in ONE process from an empty
   cache folder (``SPICA_CACHE_DIR``), in a fresh process: what the first pays outside its replay, and the
   others after it.

With the default arguments it overwrites ``bench/results/evaluate.json`` and the ``evaluate`` block of
``docs/benchmarks.md``.
"""
from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

os.environ.setdefault("DYN_LOG", "error")
ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from results_doc import headline, provenance, write_results, write_section  # noqa: E402

from examples.make_traces import write_poisson_trace  # noqa: E402
from spica_core.config.model import SmartSearchConfig  # noqa: E402
from spica_core.deployment import Candidate  # noqa: E402
from spica_core.evaluate import EvalPool, EvalRequest, evaluate_one  # noqa: E402
from spica_core.space.parallel import ParallelConfig  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "evaluate.json"
MOONCAKE = ROOT / "examples" / "traces" / "mooncake_synthetic_trace.jsonl"  # the public trace (FAST'25)
LLAMA = "meta-llama/Meta-Llama-3.1-70B"
# (tp, replicas, max_num_batched_tokens, max_num_seqs): three candidates on TP4, two on TP8, one on TP2.
SHARED_SHAPES = [(4, 4, 8192, 256), (4, 4, 16384, 1024), (4, 2, 8192, 512), (8, 2, 8192, 256), (8, 1, 16384, 256),
                 (2, 8, 8192, 256)]
DEFAULTS = {"repeats": 7, "requests": 1000, "router": "round_robin"}


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


def one_candidate(repeats: int, requests: int, router: str) -> dict[str, Any]:
    """The same candidate again and again: in-process, then through one worker process."""
    tmp = Path(tempfile.mkdtemp(prefix="spica-bench-"))
    trace = write_poisson_trace(tmp / "bench.jsonl", num_requests=requests, rate_rps=6.0, isl=3000, osl=200,
                                prefix_groups=50, prefix_blocks=4, seed=7)
    req = make_request(trace, router)
    t0 = time.perf_counter()
    first = evaluate_one(req)  # cold: builds (or loads) the profile, loads AIC's perf DB
    assert first.status == "feasible", first.reason
    cold = time.perf_counter() - t0
    print(f"cold first evaluation: {cold:.2f}s", flush=True)

    prep, replay, score = [], [], []
    for _ in range(repeats):
        out = evaluate_one(req)
        prep.append(out.timings["prepare_s"])
        replay.append(out.timings["replay_s"])
        score.append(out.timings["score_s"])
    p, r, s = statistics.median(prep), statistics.median(replay), statistics.median(score)
    print(f"in-process (median of {repeats}): replay {r * 1e3:.1f} ms | outside replay {(p + s) * 1e3:.2f} ms "
          f"(prepare {p * 1e3:.2f}, score {s * 1e3:.3f}) | ratio {(p + s) / r:.1%}", flush=True)

    with EvalPool(1, max_eval_seconds=600) as pool:  # the hop: pickling the request and the outcome, the pipe
        pool.evaluate_batch([req])
        hops, outside, replay_p = [], [], []
        for _ in range(repeats):
            (out,) = pool.evaluate_batch([req])
            hops.append(out.timings["wall_s"] - out.timings["total_s"])
            replay_p.append(out.timings["replay_s"])
            outside.append(out.timings["wall_s"] - out.timings["replay_s"])
    h, o, rp = statistics.median(hops), statistics.median(outside), statistics.median(replay_p)
    print(f"worker process (median of {repeats}): replay {rp * 1e3:.1f} ms | outside replay {o * 1e3:.2f} ms "
          f"(process hop {h * 1e3:.2f}) | ratio {o / rp:.1%} (target < 10%)", flush=True)
    return {"case": f"Qwen3-32B, h200_sxm, agg 4 × TP2, {router}, {requests}-request shared-prefix trace",
            "repeats": repeats, "cold_first_s": cold,
            "in_process": {"replay_s": r, "prepare_s": p, "score_s": s, "outside_replay_s": p + s,
                           "ratio": (p + s) / r},
            "worker_process": {"replay_s": rp, "outside_replay_s": o, "hop_s": h, "ratio": o / rp}}


def shared_shapes() -> dict[str, Any]:
    """Six candidates sharing three engine shapes, one after another in one process, from an empty cache."""
    cache = Path(tempfile.mkdtemp(prefix="spica-bench-shapes-"))
    previous = os.environ.get("SPICA_CACHE_DIR")
    os.environ["SPICA_CACHE_DIR"] = str(cache)
    try:
        space = {"model_name": LLAMA, "hardware_sku": "h200_sxm", "gpu_budget": 16, "deployment_mode": ["agg"],
                 "backend": ["vllm"], "router_mode": ["round_robin"], "planner_scaling_policy": ["disabled"],
                 "agg_max_num_batched_tokens": [8192, 16384], "agg_max_num_seqs": [256, 512, 1024]}
        cfg = SmartSearchConfig.from_dict({
            "search_space": space, "workload": {"trace_path": str(MOONCAKE), "over_context": "drop"},
            "goal": {"target": "goodput_per_gpu", "sla": {"ttft_ms": 10000, "itl_ms": 40}}})
        rows = []
        for i, (tp, replicas, mnbt, mns) in enumerate(SHARED_SHAPES):  # built as SearchContext.request builds them
            selection = {"deployment_mode": "agg", "agg_max_num_batched_tokens": mnbt, "agg_max_num_seqs": mns}
            candidate = Candidate.unroll(cfg.search_space, selection,
                                         ParallelConfig.from_dict("agg", {"tp": tp, "replicas": replicas}))
            out = evaluate_one(EvalRequest.from_config(cfg, candidate, trace_file=str(MOONCAKE), eval_id=f"c{i}"))
            t = out.timings
            rows.append({"label": candidate.parallel.label(), "status": str(out.status), "score": out.score,
                         "outside_replay_s": t["total_s"] - t.get("replay_s", 0.0), "replay_s": t.get("replay_s", 0.0)})
            print(f"[shared shapes] {rows[-1]}", flush=True)
    finally:
        if previous is None:
            os.environ.pop("SPICA_CACHE_DIR", None)
        else:
            os.environ["SPICA_CACHE_DIR"] = previous
    after = [r["outside_replay_s"] for r in rows[1:]]
    return {"case": f"{LLAMA}, 16 × h200_sxm, vLLM, agg, round robin, the public Mooncake trace; "
                    "6 candidates on 3 engine shapes, one after another in a fresh process, empty cache folder",
            "first_outside_replay_s": rows[0]["outside_replay_s"],
            "median_outside_replay_s_after_first": statistics.median(after),
            "mean_replay_s": statistics.mean(r["replay_s"] for r in rows), "evaluations": rows}


def write_docs(doc: dict[str, Any]) -> None:
    """The ``evaluate`` block of docs/benchmarks.md from evaluate.json."""
    one, shapes = doc["one_candidate"], doc["shared_shapes"]
    ip, wp = one["in_process"], one["worker_process"]
    lines = [f"{headline(doc, doc['bench_wall_s'] / 60)}:", "",
             f"- {one['case']}, warm profile cache, median of {one['repeats']}: in-process "
             f"**{ip['outside_replay_s'] * 1e3:.1f} ms** outside a {ip['replay_s'] * 1e3:.0f} ms replay "
             f"({ip['ratio']:.1%}); through a worker process **{wp['outside_replay_s'] * 1e3:.1f} ms** "
             f"(the hop {wp['hop_s'] * 1e3:.1f} ms; {wp['ratio']:.1%} of the replay; target < 10 %).",
             f"- Shared engine shapes ({shapes['case']}): the first candidate "
             f"**{shapes['first_outside_replay_s']:.2f} s** outside its replay, each later one "
             f"**{shapes['median_outside_replay_s_after_first']:.2f} s** (median), against a mean replay of "
             f"{shapes['mean_replay_s']:.2f} s."]
    write_section("evaluate", "Evaluation overhead (`bench/bench_evaluate.py`)", lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n", 2)[2])
    ap.add_argument("--repeats", type=int, default=DEFAULTS["repeats"])
    ap.add_argument("--requests", type=int, default=DEFAULTS["requests"])
    ap.add_argument("--router", default=DEFAULTS["router"], choices=("round_robin", "kv_router"))
    args = ap.parse_args()
    started = time.perf_counter()
    # A fresh process for the shared shapes, as a sweep's new worker: nothing loaded yet (AIC's perf data included)
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as fresh:
        shapes = fresh.submit(shared_shapes).result()
    result: dict[str, Any] = {**provenance("python bench/bench_evaluate.py"),
                              "one_candidate": one_candidate(args.repeats, args.requests, args.router),
                              "shared_shapes": shapes}
    result["bench_wall_s"] = time.perf_counter() - started
    if {k: getattr(args, k) for k in DEFAULTS} != DEFAULTS:
        print(result)
        return
    doc = write_results(RESULTS, result)
    write_docs(doc)
    print(f"wrote {RESULTS} and the evaluate block of docs/benchmarks.md")


if __name__ == "__main__":
    main()

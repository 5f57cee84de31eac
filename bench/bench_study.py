"""Measure the Vizier study: GP-UCB-PE suggest time and RSS growth with and without jax.clear_caches().

Usage (from the repo root):

    PYTHONPATH=. /work/venv/bin/python bench/bench_study.py            # everything (~10 min on 2 cores)
    PYTHONPATH=. /work/venv/bin/python bench/bench_study.py --timing   # only the suggest timings
    PYTHONPATH=. /work/venv/bin/python bench/bench_study.py --rss      # only the RSS comparison

The RSS runs each use a fresh subprocess, because jax's compile cache is per process: a process that
already leaked cannot show the fix.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from typing import Any

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import psutil  # noqa: E402

from spica_core.space.params import Param  # noqa: E402
from spica_core.search.study import Study  # noqa: E402

# A branch-sized space: 2 categorical, 3 discrete (one log-scale engine size), 2 float, 1 composite.
PARAMS: list[Param] = [
    Param("backend", "categorical", ("vllm", "sglang")),
    Param("router_mode", "categorical", ("kv_router", "round_robin")),
    Param("agg_num_gpus_per_engine_target", "discrete", (1, 2, 4, 8), log_scale=True, is_int=True, default=2),
    Param("agg_max_num_seqs", "discrete", (256, 512, 1024), is_int=True),
    Param("prefill_load_scale", "discrete", (0.0, 0.25, 0.5, 1.0, 2.0, 4.0)),
    Param("used_gpu_ratio", "float", bounds=(0.25, 1.0), default=1.0),
    Param("kv_load_ratio", "float", bounds=(0.0, 1.0), default=0.5),
    Param("planner_scaling_policy", "categorical", ("0", "1", "2"),
          entries=("disabled", "load_180_5", {"enable_load_scaling": True})),
]


def objective(d: dict[str, Any]) -> float:
    """A smooth synthetic score with a categorical bonus, so the GP has something to model."""
    return (-(math.log2(d["agg_num_gpus_per_engine_target"]) - 2) ** 2 - (d["used_gpu_ratio"] - 0.7) ** 2
            + 0.2 * (d["backend"] == "vllm") + 0.1 * math.log1p(d["prefill_load_scale"])
            - 0.3 * abs(d["kv_load_ratio"] - 0.4) + 0.05 * (d["agg_max_num_seqs"] == 512))


def seeded_study(n_trials: int, *, clear: bool = True) -> Study:
    """A GP-UCB-PE study holding n_trials completed trials (from random search, every 7th infeasible)."""
    filler = Study(PARAMS, algorithm="RANDOM_SEARCH", seed=123)
    for i, raw in enumerate(filler.suggest(n_trials, step=0)):
        if i % 7 == 6:
            filler.complete(raw, None, "kv capacity")
        else:
            filler.complete(raw, {"objective": objective(filler.decode(raw))})
    return Study(PARAMS, algorithm="DEFAULT", seed=7, trials=filler.trials, clear_jax_caches=clear)


def rss_mb() -> float:
    return psutil.Process().memory_info().rss / 2**20


def timing() -> None:
    print("GP-UCB-PE (DEFAULT) suggest time, fresh designer per call, 8 params, one objective")
    print(f"{'N completed':>11} {'batch':>5} {'1st call s':>10} {'2nd call s':>10} {'RSS MB':>7}")
    for n in (10, 40):
        for batch in (1, 4):
            study = seeded_study(n)
            times = []
            for step in (1, 2):
                t0 = time.perf_counter()
                out = study.suggest(batch, step=step)
                times.append(time.perf_counter() - t0)
                assert len(out) == batch
            print(f"{n:>11} {batch:>5} {times[0]:>10.1f} {times[1]:>10.1f} {rss_mb():>7.0f}", flush=True)


def rss_child(clear: bool, calls: int) -> None:
    """Child process: `calls` successive suggests (one new trial each), RSS after each, as JSON."""
    study = seeded_study(10, clear=clear)
    rows = [{"call": 0, "rss_mb": rss_mb(), "seconds": 0.0}]
    for step in range(1, calls + 1):
        t0 = time.perf_counter()
        raw = study.suggest(1, step=step)[0]
        rows.append({"call": step, "rss_mb": rss_mb(), "seconds": time.perf_counter() - t0})
        study.complete(raw, {"objective": objective(study.decode(raw))})
    print(json.dumps(rows))


def rss(calls: int) -> None:
    print(f"\nRSS over {calls} successive GP-UCB-PE suggests (batch 1, N = 10 → {9 + calls}), fresh process each")
    for clear in (True, False):
        proc = subprocess.run([sys.executable, __file__, "--rss-child", "1" if clear else "0", "--calls", str(calls)],
                              capture_output=True, text=True, check=True, env={**os.environ})
        rows = json.loads(proc.stdout.strip().splitlines()[-1])
        label = "with jax.clear_caches()" if clear else "without clear_caches  "
        trace = " ".join(f"{r['rss_mb']:.0f}" for r in rows)
        mean_s = sum(r["seconds"] for r in rows[1:]) / calls
        print(f"{label}: RSS MB per call [{trace}]; after call 1 → last: "
              f"{rows[1]['rss_mb']:.0f} → {rows[-1]['rss_mb']:.0f} MB (+{rows[-1]['rss_mb'] - rows[1]['rss_mb']:.0f}); "
              f"mean {mean_s:.1f} s/call", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timing", action="store_true")
    parser.add_argument("--rss", action="store_true")
    parser.add_argument("--calls", type=int, default=10)
    parser.add_argument("--rss-child", choices=("0", "1"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rss_child is not None:
        rss_child(args.rss_child == "1", args.calls)
        return
    both = not (args.timing or args.rss)
    if args.timing or both:
        timing()
    if args.rss or both:
        rss(args.calls)


if __name__ == "__main__":
    main()

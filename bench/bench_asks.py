"""What one GP-UCB-PE ask costs, ask by ask: wall time, jax tracing and compiles, and RSS.

A study on the benchmark's dense disagg pool (bench_search.py's "dense" space, 568 candidates) with a synthetic
objective (no replay), asked ``--asks`` times for ``--count`` candidates, with the previous ask's picks pending,
as the search loop does. ``--restarts`` sets the ARD random restarts (Spica's ARD_RESTARTS; Vizier's default is 4),
so the variants can be compared in one run:

    python bench/bench_asks.py                      # Spica's settings
    python bench/bench_asks.py --restarts 4         # Vizier's four ARD restarts
    python bench/bench_asks.py --ard-per-trial 0    # the ARD fit's iterations uncapped (Vizier's 500)
    python bench/bench_asks.py --busy 2             # beside two busy processes, as beside two replay workers
    python bench/bench_asks.py --busy 2 --blas-threads 0   # the same with OpenBLAS's own thread count
    python bench/bench_asks.py --space real --asks 3     # a study per branch of the one-hour case, in order:
                                                         # what a second branch's first ask still compiles
    python bench/bench_asks.py --pick-predictions vizier # GP-UCB-PE's per-pick predictions (aux) computed

Each row also has the ask's CPU seconds (``cpu_s``): more than its wall time means threads that spin, and the
seconds spent in the GP's ARD fit (``ard_fit_s``, tracing included).
"""
from __future__ import annotations

import argparse
import collections
import contextlib
import functools
import json
import multiprocessing
import os
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("DYN_LOG", "error")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import numpy as np  # noqa: E402
import psutil  # noqa: E402

import spica_core.search.study as study_module  # noqa: E402
from bench_search import SPACES, make_config, make_trace, real_config  # noqa: E402
from spica_core.search.suggesters import VizierSuggester  # noqa: E402
from spica_core.space.branches import enumerate_branches  # noqa: E402


def objective(raw: dict) -> float:
    """A fixed, deterministic landscape over the candidate's raw parameters."""
    return float(sum(sum(map(ord, f"{k}={v}")) % 97 for k, v in raw.items()))


def burn(stop: Any) -> None:
    """A CPU-bound process (the stand-in for a replay worker's load; it computes nothing)."""
    x = 0
    while not stop.is_set():
        for _ in range(100_000):
            x += 1


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--asks", type=int, default=14)
    ap.add_argument("--count", type=int, default=4)
    ap.add_argument("--restarts", type=int, default=study_module.ARD_RESTARTS)
    ap.add_argument("--ard-per-trial", type=int, default=study_module.ARD_ITERATIONS_PER_TRIAL,
                    help="L-BFGS-B iterations per completed trial (Spica's ARD_ITERATIONS_PER_TRIAL); 0 = Vizier's 500")
    ap.add_argument("--busy", type=int, default=0, help="CPU-bound processes running beside the asks")
    ap.add_argument("--blas-threads", type=int, default=1, help="Spica's limit is 1; 0 leaves OpenBLAS's own")
    ap.add_argument("--space", choices=("dense-disagg", "dense", "real"), default="dense-disagg",
                    help="dense-disagg: one study; dense, real: one study per branch of that space, in order")
    ap.add_argument("--pick-predictions", choices=("none", "vizier"), default="none",
                    help="none: Spica's (an ask skips them); vizier: Vizier's own, traced once per process")
    args = ap.parse_args()
    if args.pick_predictions == "vizier":
        from spica_core.search import vizier_private

        vizier_private.without_pick_predictions = contextlib.nullcontext  # type: ignore[assignment]
    study_module.ARD_ITERATIONS_PER_TRIAL = args.ard_per_trial or study_module.ARD_MAX_ITERATIONS
    if not args.blas_threads:
        study_module.threadpool_limits = lambda **_: contextlib.nullcontext()  # type: ignore[assignment]
    elif args.blas_threads != 1:
        limit = functools.partial(study_module.threadpool_limits, limits=args.blas_threads)
        study_module.threadpool_limits = lambda **_: limit()  # type: ignore[assignment]
    new_designer = study_module.Study._new_designer

    def with_restarts(self: study_module.Study) -> object:
        designer = new_designer(self)
        designer._ard_random_restarts = args.restarts  # a Vizier attrs field; this bench only
        return designer

    study_module.Study._new_designer = with_restarts  # type: ignore[method-assign]
    fit = study_module._ArdFit.__call__

    def timed_fit(self: object, *a: Any, **k: Any) -> Any:
        start = time.perf_counter()
        try:
            return fit(self, *a, **k)
        finally:
            seconds["ard_fit"] += time.perf_counter() - start

    study_module._ArdFit.__call__ = timed_fit  # type: ignore[method-assign]
    import jax.monitoring

    seconds: collections.Counter[str] = collections.Counter()
    events: collections.Counter[str] = collections.Counter()

    def listen(event: str, duration: float, **_: object) -> None:
        seconds[event.rsplit("/", 1)[-1]] += duration
        events[event.rsplit("/", 1)[-1]] += 1

    jax.monitoring.register_event_duration_secs_listener(listen)
    config = real_config() if args.space == "real" else make_config(SPACES["dense"], make_trace("dense", 400))
    branches = [b for b in enumerate_branches(config).branches if args.space != "dense-disagg" or b.mode == "disagg"]
    proc, rows = psutil.Process(), []
    stop = multiprocessing.Event()
    burners = [multiprocessing.Process(target=burn, args=(stop,), daemon=True) for _ in range(args.busy)]
    for b in burners:
        b.start()
    for branch in branches:
        suggester = VizierSuggester(branch, [("objective", "max")], pareto=False, algorithm="DEFAULT", seed=1,
                                    budget=64)
        study, (_, pool), pending = suggester.study, suggester.pool(set(), 0), []
        for i in np.random.default_rng(0).choice(len(pool), 4, replace=False):
            study.complete(pool[int(i)], {"objective": objective(pool[int(i)])})
        for k in range(args.asks):
            seconds.clear(), events.clear()
            allowed = [True] * len(pool)
            for p in pending:
                allowed[p] = False
            start, cpu = time.perf_counter(), time.process_time()
            picks = study.suggest(args.count, 10 + k, pool, allowed, pending=[pool[p] for p in pending],
                                  exploit=k % 2 == 0)
            wall, cpu = time.perf_counter() - start, time.process_time() - cpu
            for p in pending:
                study.complete(pool[p], {"objective": objective(pool[p])})
            pending = picks
            rows.append({"branch": branch.mode, "pool": len(pool), "trials": len(study.trials),
                         "wall_s": round(wall, 2), "cpu_s": round(cpu, 2),
                         "compiles": events["backend_compile_duration"],
                         "compile_s": round(seconds["backend_compile_duration"], 2),
                         "trace_s": round(seconds["jaxpr_trace_duration"], 2),
                         "ard_fit_s": round(seconds["ard_fit"], 2),
                         "rss_mb": round(proc.memory_info().rss / 2**20)})
            print(json.dumps(rows[-1]), flush=True)
    stop.set()
    for b in burners:
        b.join()
    steady = [r["wall_s"] for r in rows[1:]]
    print(json.dumps({"space": args.space, "pick_predictions": args.pick_predictions, "restarts": args.restarts,
                      "ard_per_trial": args.ard_per_trial,
                      "count": args.count,
                      "busy": args.busy, "blas_threads": args.blas_threads or "OpenBLAS default",
                      "median_ask_s": float(np.median(steady)), "rss_growth": rows[-1]["rss_mb"] / rows[1]["rss_mb"] - 1}))


if __name__ == "__main__":
    main()

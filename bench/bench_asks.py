"""What one GP-UCB-PE ask costs, ask by ask: wall time, jax tracing and compiles, and RSS.

A study on the benchmark's dense disagg pool (bench_search.py's "dense" space, 568 candidates) with a synthetic
objective (no replay), asked ``--asks`` times for ``--count`` candidates, with the previous ask's picks pending,
as the search loop does. ``--restarts`` sets the ARD random restarts (Spica's ARD_RESTARTS; Vizier's default is 4) and
``--clear-every`` how often jax's caches are cleared (Spica's CLEAR_CACHES_EVERY; 0 = never), so the
variants can be compared in one run:

    python bench/bench_asks.py                      # Spica's settings
    python bench/bench_asks.py --clear-every 0      # caches kept
    python bench/bench_asks.py --restarts 4         # Vizier's four ARD restarts
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("DYN_LOG", "error")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import numpy as np  # noqa: E402
import psutil  # noqa: E402

import spica_core.search.study as study_module  # noqa: E402
from bench_search import SPACES, make_config, make_trace  # noqa: E402
from spica_core.search.suggesters import VizierSuggester  # noqa: E402
from spica_core.space.branches import enumerate_branches  # noqa: E402


def objective(raw: dict) -> float:
    """A fixed, deterministic landscape over the candidate's raw parameters."""
    return float(sum(sum(map(ord, f"{k}={v}")) % 97 for k, v in raw.items()))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--asks", type=int, default=14)
    ap.add_argument("--count", type=int, default=4)
    ap.add_argument("--restarts", type=int, default=study_module.ARD_RESTARTS)
    ap.add_argument("--clear-every", type=int, default=study_module.CLEAR_CACHES_EVERY)
    args = ap.parse_args()
    study_module.CLEAR_CACHES_EVERY = args.clear_every or 10**9
    new_designer = study_module.Study._new_designer

    def with_restarts(self: study_module.Study) -> object:
        designer = new_designer(self)
        designer._ard_random_restarts = args.restarts  # a Vizier attrs field; this bench only
        return designer

    study_module.Study._new_designer = with_restarts  # type: ignore[method-assign]
    import jax.monitoring

    seconds: collections.Counter[str] = collections.Counter()
    events: collections.Counter[str] = collections.Counter()

    def listen(event: str, duration: float, **_: object) -> None:
        seconds[event.rsplit("/", 1)[-1]] += duration
        events[event.rsplit("/", 1)[-1]] += 1

    jax.monitoring.register_event_duration_secs_listener(listen)
    config = make_config(SPACES["dense"], make_trace("dense", 400))
    branch = next(b for b in enumerate_branches(config).branches if b.mode == "disagg")
    suggester = VizierSuggester(branch, [("objective", "max")], pareto=False, algorithm="DEFAULT", seed=1, budget=64)
    study, pool = suggester.study, suggester.space.raws
    for i in np.random.default_rng(0).choice(len(pool), 4, replace=False):
        study.complete(pool[int(i)], {"objective": objective(pool[int(i)])})
    proc, rows, pending = psutil.Process(), [], []
    for k in range(args.asks):
        seconds.clear(), events.clear()
        allowed = [True] * len(pool)
        for p in pending:
            allowed[p] = False
        start = time.perf_counter()
        picks = study.suggest(args.count, 10 + k, pool, allowed, pending=[pool[p] for p in pending], exploit=k % 2 == 0)
        wall = time.perf_counter() - start
        for p in pending:
            study.complete(pool[p], {"objective": objective(pool[p])})
        pending = picks
        rows.append({"trials": len(study.trials), "wall_s": round(wall, 2),
                     "compiles": events["backend_compile_duration"],
                     "compile_s": round(seconds["backend_compile_duration"], 2),
                     "trace_s": round(seconds["jaxpr_trace_duration"], 2),
                     "rss_mb": round(proc.memory_info().rss / 2**20)})
        print(json.dumps(rows[-1]), flush=True)
    steady = [r["wall_s"] for r in rows[1:]]
    print(json.dumps({"restarts": args.restarts, "clear_every": args.clear_every, "count": args.count,
                      "median_ask_s": float(np.median(steady)), "rss_growth": rows[-1]["rss_mb"] / rows[1]["rss_mb"] - 1}))


if __name__ == "__main__":
    main()

"""The 45-candidate space, default vs thorough, six alternations in one process: thorough, the default with its
studies in the optimizer process (as the flow asks), the default with a study in this process. Medians leave out
the first alternation (the tracing still runs then). It answers whether the default pays for its optimizer
process on a space it enumerates anyway (its evaluations take about 0.02 s).

    .venv/bin/python bench/bench_small_probe.py
"""
from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_search as b  # noqa: E402

from spica_core.evaluate import EvalPool  # noqa: E402
from spica_core.search import EvalCache, SearchContext, optimizer_for, search_branches  # noqa: E402


def run(config: Any, branches: Any, trace: Path, pool: EvalPool, remote: bool) -> tuple[float, list[float]]:
    """One sweep's wall and when its first results came (seconds from its start)."""
    context = SearchContext(config, str(trace), None, optimizer=optimizer_for(config) if remote else None)
    results: list[float] = []
    started = time.perf_counter()
    search_branches(branches, context, pool, EvalCache(), (), lambda t: results.append(time.perf_counter() - started))
    return time.perf_counter() - started, results


def main() -> None:
    trace = b.make_trace("shared_prefix_400", 400)
    branches = b.enumerate_branches(b.make_config(b.SMALL_SPACE, trace)).branches
    thorough = b.make_config(b.SMALL_SPACE, trace, policy="thorough")
    default = b.make_config(b.SMALL_SPACE, trace, max_rounds=3, candidates_per_round=b.PER_ROUND)
    walls: dict[str, list[float]] = {"thorough": [], "default, optimizer process": [], "default, in process": []}
    with EvalPool(b.WORKERS, max_eval_seconds=300) as pool:
        b.ready_as_the_cli_is(pool)
        for i in range(6):
            for name, config, remote in (("thorough", thorough, False), ("default, optimizer process", default, True),
                                         ("default, in process", default, False)):
                wall, results = run(config, branches, trace, pool, remote)
                walls[name].append(wall)
                if i == 5:
                    print(f"{name}: last wall {wall:.3f} s, first results at {[round(r, 3) for r in results[:6]]} s")
    for name, w in walls.items():
        print(f"{name}: walls {[round(x, 2) for x in w]} s, median of the last 5 {statistics.median(w[1:]):.3f} s")


if __name__ == "__main__":
    main()

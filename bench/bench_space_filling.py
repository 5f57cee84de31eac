"""What a branch's first space-filling asks cost: two asks of 2 candidates on the 45-candidate space of
bench_search.py (the second with the first's picks pending), in a process where jax and Vizier are imported,
three times with a new study each (the first pays for whatever a new pool shape compiles).

    .venv/bin/python bench/bench_space_filling.py
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_search import SMALL_SPACE, make_config, make_trace  # noqa: E402
from spica_core.search.study import warm_up  # noqa: E402
from spica_core.search.suggesters import VizierSuggester  # noqa: E402
from spica_core.space.branches import enumerate_branches  # noqa: E402


def main() -> None:
    warm_up()
    branch = enumerate_branches(make_config(SMALL_SPACE, make_trace("shared_prefix_400", 400))).branches[0]
    for seed in range(3):
        suggester = VizierSuggester(branch, [("objective", "max")], pareto=False, algorithm="DEFAULT", seed=seed,
                                    budget=24)
        _, pool = suggester.pool(set(), 0)
        start = time.perf_counter()
        first = suggester.study.suggest(2, 0, pool, model=False)
        first_s, start = time.perf_counter() - start, time.perf_counter()
        second = suggester.study.suggest(2, 1, pool, [i not in first for i in range(len(pool))], model=False,
                                         pending=[pool[i] for i in first])
        print(json.dumps({"seed": seed, "first_ask_s": round(first_s, 3),
                          "second_ask_s": round(time.perf_counter() - start, 3), "picks": [first, second]}))


if __name__ == "__main__":
    main()

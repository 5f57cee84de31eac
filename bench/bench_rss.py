"""RSS of the optimizer process over 200 suggestions, started fresh: bench_search.py's RSS case alone (its
``--live`` run measures it after the other sweeps of that process, whose executables are then already in the
baseline).

    .venv/bin/python bench/bench_rss.py      # about 80 s; prints the growth and the series (MB every 8 trials)
"""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))


def main() -> None:
    import bench_search as bs
    from spica_core.evaluate import EvalPool

    trace = bs.make_trace("shared_prefix_3000", 3000)
    with EvalPool(bs.WORKERS, max_eval_seconds=300) as pool:
        bs.ready_as_the_cli_is(pool, trace=False)  # the first ask's tracing counts in the growth, as before
        rss = bs.bench_rss(bs.SPACES["dense"], trace, pool, 200)
    print([round(mb) for mb in rss["rss_mb"]])


if __name__ == "__main__":
    main()

"""The real-trace case of bench_search.py (Llama-3.1-70B on 16 × H200, agg + disagg, 96 evaluations of the
public Mooncake trace) at several ``costs.BATCH_SHARE`` values, each in a fresh process:

    .venv/bin/python bench/bench_batch_share.py 1.0 0.25 0.1

Prints one line per value: wall, optimizer seconds, share outside replays and the best goodput per GPU.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def one(share: float) -> None:
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "bench"))
    import bench_search

    import spica_core.search.costs as costs
    from spica_core.evaluate import EvalPool

    costs.BATCH_SHARE = share
    with EvalPool(bench_search.WORKERS, max_eval_seconds=300) as pool:
        result = bench_search.bench_real(pool)
    print(json.dumps({"batch_share": share, **{k: result[k] for k in (
        "wall_s", "optimizer_s", "replay_s", "outside_replay_ratio", "best", "methods")}}), flush=True)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--one":
        one(float(sys.argv[2]))
    else:
        for value in sys.argv[1:] or ["1.0", "0.25", "0.1"]:
            subprocess.run([sys.executable, __file__, "--one", value], check=True)

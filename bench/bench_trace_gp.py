"""Seconds of ``study.trace_gp`` (GP-UCB-PE traced ahead, in the optimizer process) in a fresh process: as shipped,
its ARD fit capped at 12 iterations, against uncapped (the 100 iterations of its four trials), alternated in pairs.

    .venv/bin/python bench/bench_trace_gp.py [--pairs 3]
"""
from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_RUN = """
import sys, time
from spica_core.search import study
study.warm_up()
if sys.argv[1] == "uncapped":  # the cap is set inside trace_gp: make the attribute ignore it
    study.Study._ard_cap = property(lambda self: None, lambda self, value: None)
started = time.perf_counter()
study.trace_gp()
print(f"{time.perf_counter() - started:.2f}")
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=3)
    args = ap.parse_args()
    seconds: dict[str, list[str]] = {"capped": [], "uncapped": []}
    for _ in range(args.pairs):
        for how in seconds:
            out = subprocess.run([sys.executable, "-c", _RUN, how], capture_output=True, text=True, check=True, cwd=ROOT)
            seconds[how].append(out.stdout.strip())
    for how, values in seconds.items():
        print(f"trace_gp {how}: {', '.join(values)} s")


if __name__ == "__main__":
    main()

"""Time ``spica space`` on every example config: each must finish in under a minute.

Each example runs in a fresh Python process (cold aiconfigurator caches, imports included: what a
user waits for). Prints seconds per example and the ratio to the 60-second limit; exits 1 if any
example is over the limit or fails.

    PYTHONPATH=. .venv/bin/python bench/space_check.py [examples/*.yaml ...]

Not one of the maintained benchmarks (bench/README.md): a pass/fail check that writes no results file. Its
``bench_one`` and ``LIMIT_SECONDS`` are what ``tests/test_branches.py::test_space_on_every_example_under_a_minute``
(a slow test) runs.
"""
from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import time
from pathlib import Path

LIMIT_SECONDS = 60.0
REPO = Path(__file__).resolve().parent.parent

_CHILD = """
import json, sys, time
t0 = time.perf_counter()
from spica_cli.space import compute_space
from spica_core.config.model import SmartSearchConfig
t1 = time.perf_counter()
doc = compute_space(SmartSearchConfig.from_yaml(sys.argv[1]))
t2 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "compute_s": t2 - t1,
                  "configs": sum(len(b["configs"]) for b in doc["branches"]),
                  "shapes": len(doc["shapes"])}))
"""


def bench_one(path: str) -> dict[str, object]:
    """Run one example in a child process; returns timings or the error text."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", _CHILD, path], capture_output=True, text=True, env=env,
                          cwd=REPO, timeout=10 * LIMIT_SECONDS)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["failed"])[-1]
        return {"example": path, "wall_s": wall, "error": last}
    return {"example": path, "wall_s": wall, **json.loads(proc.stdout.strip().splitlines()[-1])}


def main(argv: list[str]) -> int:
    paths = argv or sorted(glob.glob(str(REPO / "examples" / "*.yaml")))
    if not paths:
        print("no examples/*.yaml found")
        return 0
    worst = 0.0
    failed = False
    print(f"{'example':<40} {'wall s':>7} {'ratio':>6} {'compute s':>9} {'configs':>8} {'shapes':>6}")
    for path in paths:
        r = bench_one(path)
        name = os.path.relpath(str(r["example"]), REPO)
        wall = float(r["wall_s"])  # type: ignore[arg-type]
        ratio = wall / LIMIT_SECONDS
        worst = max(worst, ratio)
        if "error" in r:
            failed = True
            print(f"{name:<40} {wall:>7.2f} {ratio:>6.3f}  error: {r['error']}")
            continue
        print(f"{name:<40} {wall:>7.2f} {ratio:>6.3f} {float(r['compute_s']):>9.2f} "  # type: ignore[arg-type]
              f"{r['configs']:>8} {r['shapes']:>6}")
    print(f"worst ratio to the {LIMIT_SECONDS:.0f} s limit: {worst:.3f}")
    return 1 if failed or worst >= 1.0 else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

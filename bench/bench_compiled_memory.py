"""What jax's small executables cost in RSS, and what comes back after ``jax.clear_caches()`` and glibc's
``malloc_trim``: the measure behind clearing only at bucket growth, with a trim (``study._release_compiled``).

``--count`` joins of two small float64 arrays (numpy arrays put on the device, which compiles nothing), each
join of a shape no other has (as Vizier's inline join of completed and pending trials had, one per ask), then
the clear, then the trim:

    .venv/bin/python bench/bench_compiled_memory.py              # 100 joins, a few seconds
"""
from __future__ import annotations

import argparse
import ctypes
import gc
import json

import numpy as np
import psutil


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--count", type=int, default=100)
    args = ap.parse_args()
    import jax

    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp

    proc = psutil.Process()

    def rss() -> float:
        return proc.memory_info().rss / 2**20

    jnp.concatenate([jnp.asarray(np.ones((1, 16))), jnp.asarray(np.ones((1, 16)))]).block_until_ready()  # start-up
    gc.collect()
    start = rss()
    for n in range(2, 2 + args.count):
        jnp.concatenate([jnp.asarray(np.ones((n, 16))), jnp.asarray(np.ones((1, 16)))]).block_until_ready()
    compiled = rss()
    jax.clear_caches()
    gc.collect()
    cleared = rss()
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    trimmed = rss()
    print(json.dumps({"joins": args.count, "rss_start_mb": round(start), "after_joins_mb": round(compiled),
                      "per_join_mb": round((compiled - start) / args.count, 2),
                      "after_clear_caches_mb": round(cleared), "after_malloc_trim_mb": round(trimmed)}))


if __name__ == "__main__":
    main()

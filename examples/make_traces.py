"""Generate mooncake JSONL traces for the examples and tests (no downloads needed).

    python examples/make_traces.py                 # regenerate the bundled example traces
    python examples/make_traces.py sine OUT.jsonl --duration-s 3600 --base-rps 4 --amplitude-rps 3
    python examples/make_traces.py poisson OUT.jsonl --num-requests 2000 --rate-rps 8 --prefix-groups 40

A sine trace's arrival rate is base + amplitude·sin(2πt/period) (what an autoscaling planner
should follow); ``--prefix-groups`` gives requests shared prompt prefixes through ``hash_ids``
(what a KV-aware router exploits). The same arguments and seed always give the same file.
Tests and benchmarks import the writers below (``from examples.make_traces import write_poisson_trace``).
"""
from __future__ import annotations

import argparse
import json
import math
import random
from pathlib import Path
from typing import Any, Iterable, Iterator

from spica_core.config import TRACE_BLOCK_SIZE


def write_mooncake_trace(path: str | Path, rows: Iterable[dict[str, Any]]) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        for row in rows:
            f.write(json.dumps(row, separators=(",", ":")) + "\n")
    return path


def _rows(arrivals_ms: Iterable[float], rng: random.Random, *, isl: int, osl: int, isl_jitter: float,
          osl_jitter: float, prefix_groups: int, prefix_blocks: int, block: int) -> Iterator[dict[str, Any]]:
    next_id = prefix_groups * prefix_blocks
    for t in arrivals_ms:
        n_in = max(1, round(isl * (1 + rng.uniform(-isl_jitter, isl_jitter))))
        n_out = max(1, round(osl * (1 + rng.uniform(-osl_jitter, osl_jitter))))
        blocks = -(-n_in // block)
        shared: list[int] = []
        if prefix_groups > 0:
            g = rng.randrange(prefix_groups)
            shared = list(range(g * prefix_blocks, g * prefix_blocks + min(prefix_blocks, blocks)))
        own = list(range(next_id, next_id + blocks - len(shared)))
        next_id += len(own)
        yield {"timestamp": round(t, 3), "input_length": n_in, "output_length": n_out, "hash_ids": shared + own}


def sine_rate(t_s: float, base_rps: float, amplitude_rps: float, period_s: float) -> float:
    return max(0.0, base_rps + amplitude_rps * math.sin(2 * math.pi * t_s / period_s))


def write_sine_trace(path: str | Path, *, duration_s: float = 5400.0, base_rps: float = 6.0,
                     amplitude_rps: float = 4.0, period_s: float = 900.0, isl: int = 4000, osl: int = 200,
                     seed: int = 0, isl_jitter: float = 0.2, osl_jitter: float = 0.2, prefix_groups: int = 0,
                     prefix_blocks: int = 4, block: int = TRACE_BLOCK_SIZE) -> Path:
    """Non-homogeneous Poisson arrivals with rate base + amplitude·sin(2πt/period) (thinning)."""
    rng = random.Random(seed)
    peak = base_rps + abs(amplitude_rps)
    arrivals: list[float] = []
    t = 0.0
    while True:
        t += rng.expovariate(peak)
        if t >= duration_s:
            break
        if rng.random() * peak <= sine_rate(t, base_rps, amplitude_rps, period_s):
            arrivals.append(t * 1000.0)
    return write_mooncake_trace(path, _rows(arrivals, rng, isl=isl, osl=osl, isl_jitter=isl_jitter,
                                            osl_jitter=osl_jitter, prefix_groups=prefix_groups,
                                            prefix_blocks=prefix_blocks, block=block))


def write_poisson_trace(path: str | Path, *, num_requests: int, rate_rps: float, isl: int = 4000, osl: int = 200,
                        seed: int = 0, isl_jitter: float = 0.2, osl_jitter: float = 0.2, prefix_groups: int = 0,
                        prefix_blocks: int = 4, block: int = TRACE_BLOCK_SIZE) -> Path:
    """Homogeneous Poisson arrivals; ``prefix_groups`` > 0 gives each request a group's shared prefix."""
    rng = random.Random(seed)
    arrivals: list[float] = []
    t = 0.0
    for _ in range(num_requests):
        t += rng.expovariate(rate_rps)
        arrivals.append(t * 1000.0)
    return write_mooncake_trace(path, _rows(arrivals, rng, isl=isl, osl=osl, isl_jitter=isl_jitter,
                                            osl_jitter=osl_jitter, prefix_groups=prefix_groups,
                                            prefix_blocks=prefix_blocks, block=block))


HERE = Path(__file__).resolve().parent

BUNDLED = {
    # DeepSeek-V3 example: three 15-minute waves of traffic with shared system prompts.
    "traces/sine_prefix.jsonl": lambda p: write_sine_trace(
        p, duration_s=2700, base_rps=2.0, amplitude_rps=1.5, period_s=900, isl=3000, osl=300,
        prefix_groups=16, prefix_blocks=4, seed=1),
    # Router example: 1,000 requests from 40 groups sharing a 2k-token prefix.
    "traces/shared_prefix.jsonl": lambda p: write_poisson_trace(
        p, num_requests=1000, rate_rps=6.0, isl=3000, osl=200, prefix_groups=40, prefix_blocks=4, seed=2),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="kind")
    for kind in ("sine", "poisson"):
        p = sub.add_parser(kind)
        p.add_argument("out", type=Path)
        p.add_argument("--isl", type=int, default=4000)
        p.add_argument("--osl", type=int, default=200)
        p.add_argument("--prefix-groups", type=int, default=0)
        p.add_argument("--prefix-blocks", type=int, default=4)
        p.add_argument("--seed", type=int, default=0)
        if kind == "sine":
            p.add_argument("--duration-s", type=float, default=5400.0)
            p.add_argument("--base-rps", type=float, default=6.0)
            p.add_argument("--amplitude-rps", type=float, default=4.0)
            p.add_argument("--period-s", type=float, default=900.0)
        else:
            p.add_argument("--num-requests", type=int, default=1000)
            p.add_argument("--rate-rps", type=float, default=4.0)
    args = parser.parse_args()
    if args.kind is None:
        for rel, make in BUNDLED.items():
            print("wrote", make(HERE / rel))
        return
    common = dict(isl=args.isl, osl=args.osl, prefix_groups=args.prefix_groups,
                  prefix_blocks=args.prefix_blocks, seed=args.seed)
    if args.kind == "sine":
        out = write_sine_trace(args.out, duration_s=args.duration_s, base_rps=args.base_rps,
                               amplitude_rps=args.amplitude_rps, period_s=args.period_s, **common)
    else:
        out = write_poisson_trace(args.out, num_requests=args.num_requests, rate_rps=args.rate_rps, **common)
    print("wrote", out)


if __name__ == "__main__":
    main()

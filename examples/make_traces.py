"""Generate mooncake JSONL traces for the examples and tests (no downloads needed).

    python examples/make_traces.py                 # regenerate the bundled example traces
    python examples/make_traces.py sine OUT.jsonl --duration-s 3600 --base-rps 4 --amplitude-rps 3
    python examples/make_traces.py poisson OUT.jsonl --num-requests 2000 --rate-rps 8 --prefix-groups 40

A sine trace's arrival rate is base + amplitude·sin(2πt/period) (what an autoscaling planner
should follow); ``--prefix-groups`` gives requests shared prompt prefixes through ``hash_ids``
(what a KV-aware router exploits). The same arguments and seed always give the same file.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from spica_core.evaluate.traces import write_poisson_trace, write_sine_trace

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

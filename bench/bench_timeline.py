"""Where a live sweep's time goes, ask by ask: each ask's wall and CPU seconds, the ARD loss evaluations
(scipy L-BFGS-B calls) it made, and the worker-seconds the pool stood idle, in 5 s bins.

    .venv/bin/python bench/bench_timeline.py            # the real-trace case of bench_search.py (~80 s)
    .venv/bin/python bench/bench_timeline.py dense      # or one of its generated-trace spaces (dense, moe)
    .venv/bin/python bench/bench_timeline.py dense --runs 2   # twice in one process: the second run is warm
    .venv/bin/python bench/bench_timeline.py dense --no-trace # without tracing GP-UCB-PE while getting ready

The share of bench_search.py counts idle time only as a total; this shows which asks (a branch's first, a
cache clear, a long ARD fit) leave the workers without work.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_search as bs  # noqa: E402

from spica_core.evaluate import EvalPool, EvalRequest, Outcome  # noqa: E402
from spica_core.search import study as study_module  # noqa: E402

BIN_S = 5.0


class Timeline(bs.Recorder):
    """Times every ask of the study and every replay of the pool, from one clock."""

    def __init__(self, pool: EvalPool):
        super().__init__(pool)
        self.start = time.perf_counter()
        self.asks: list[dict[str, Any]] = []
        self.replays: list[tuple[float, float]] = []
        self._submitted: dict[int, float] = {}
        self.loss_evals = 0

    def now(self) -> float:
        return time.perf_counter() - self.start

    def submit(self, request: EvalRequest) -> int:
        ticket = super().submit(request)
        self._submitted[ticket] = self.now()
        return ticket

    def poll(self, timeout: float) -> list[tuple[int, Outcome]]:
        done = super().poll(timeout)
        for ticket, _ in done:
            self.replays.append((self._submitted.pop(ticket), self.now()))
        return done

    def idle_by_bin(self, end: float, step: float = 0.05) -> dict[int, float]:
        """Worker-seconds with no replay running, per BIN_S bin."""
        bins: dict[int, float] = {}
        t = 0.0
        while t < end:
            running = sum(1 for a, b in self.replays if a <= t < b)
            bins[int(t // BIN_S)] = bins.get(int(t // BIN_S), 0.0) + max(0, self.workers - running) * step
            t += step
        return bins


def instrument(current: list[Timeline]) -> None:
    """Wrap Study.suggest (wall, CPU) and scipy's minimize (the ARD fits' loss evaluations), once; they record
    into ``current[0]``, the run's timeline."""
    import scipy.optimize

    suggest, minimize = study_module.Study.suggest, scipy.optimize.minimize

    def timed_suggest(self: Any, count: int, *args: Any, **kwargs: Any) -> list[int]:
        timeline = current[0]
        started, cpu, evals = timeline.now(), time.process_time(), timeline.loss_evals
        picks = suggest(self, count, *args, **kwargs)
        timeline.asks.append({"start_s": round(started, 2), "wall_s": round(timeline.now() - started, 2),
                              "cpu_s": round(time.process_time() - cpu, 2), "count": count,
                              "ard_loss_evals": timeline.loss_evals - evals})
        return picks

    def counted_minimize(*args: Any, **kwargs: Any) -> Any:
        result = minimize(*args, **kwargs)
        current[0].loss_evals += int(result.nfev)
        return result

    study_module.Study.suggest = timed_suggest  # type: ignore[method-assign]
    scipy.optimize.minimize = counted_minimize


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("case", nargs="?", default="real", choices=("real", *bs.SPACES))
    ap.add_argument("--runs", type=int, default=1, help="the case this many times in one process (later ones warm)")
    ap.add_argument("--no-trace", action="store_true",
                    help="get ready without tracing GP-UCB-PE ahead (as spica sweep did before it did)")
    args = ap.parse_args()
    with EvalPool(bs.WORKERS, max_eval_seconds=600) as pool:
        bs.ready_as_the_cli_is(pool, trace=not args.no_trace)
        current: list[Timeline] = []
        instrument(current)
        for run in range(args.runs):
            timeline = Timeline(pool)
            current[:] = [timeline]
            if args.case == "real":
                split = bs.bench_real(timeline)  # type: ignore[arg-type]
            else:
                trace = bs.make_trace("shared_prefix_3000", 3000)
                space = bs.SPACES[args.case]
                branches = bs.enumerate_branches(bs.make_config(space, trace)).branches
                config = bs.make_config(space, trace, max_rounds=bs.rounds_for(64, len(branches)))
                split = bs.wall_split(bs.sweep(config, branches, trace, timeline))  # type: ignore[arg-type]
            report(args.case, run, split, timeline)


def report(case: str, run: int, split: dict[str, Any], timeline: Timeline) -> None:
    end = timeline.now()
    bins = timeline.idle_by_bin(end)
    print(f"# {case} (run {run + 1} of the process): wall {split['wall_s']:.1f} s, "
          f"share {split['outside_replay_ratio']:.2f}, best {split['best']:.1f}, methods {split['methods']}, "
          f"idle worker-s {sum(bins.values()):.1f} of {timeline.workers * end:.0f}")
    print("# idle worker-s per 5 s bin:", {int(k * BIN_S): round(v, 1) for k, v in bins.items() if v >= 0.5})
    for ask in timeline.asks:
        print(ask)


if __name__ == "__main__":
    main()

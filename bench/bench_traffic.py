"""Real traffic: what headroom and robust ranking cost, on the public Mooncake trace.

    PYTHONPATH=. .venv/bin/python bench/bench_traffic.py [--rounds 3 --per-round 4]

1. A sweep of ``examples/mooncake_qwen3_32b.yaml`` (Qwen3-32B on 8 × H200, the 17-minute Mooncake
   trace, requests over the context dropped), timed end to end as the command a user runs, in a
   fresh run folder. Its emit stage measures the top 3 candidates' headroom; the same headroom is
   then measured again on the finished run's records, alone, so its share of the sweep's wall time
   is ``headroom ÷ (wall − headroom)`` (target ≤ 0.40).
2. Replays per headroom (target ≤ 8) and per robust-ranked candidate (``robust_scale`` 2: target one
   extra), counted at the replay entry point.

Writes ``bench/results/traffic.json`` and the Traffic section of ``docs/benchmarks.md``.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.results_doc import write_section  # noqa: E402

OUT = REPO / "bench" / "results" / "traffic.json"
EXAMPLE = REPO / "examples" / "mooncake_qwen3_32b.yaml"


class ReplayCounter:
    """Counts calls into Dynamo's replay (the measurement, not a stand-in: the replay still runs)."""

    def __init__(self) -> None:
        import spica_core.evaluate.evaluator as evaluator
        import spica_core.evaluate.replay as replay

        self.calls = 0
        self._real = replay.run_replay

        def counted(spec: Any) -> Any:
            self.calls += 1
            return self._real(spec)

        replay.run_replay = counted  # evaluate_one imports it from the module at call time
        self._evaluator = evaluator


def sweep(config: Path, run_dir: Path) -> float:
    env = {**os.environ, "PREFECT_HOME": tempfile.mkdtemp(prefix="spica-bench-prefect-")}
    env.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
    start = time.perf_counter()
    subprocess.run([str(REPO / ".venv" / "bin" / "spica"), "sweep", str(config), "--run-dir", str(run_dir)],
                   check=True, env=env, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--per-round", type=int, default=4)
    args = parser.parse_args()

    import yaml

    from spica_core.emit import FinishedRun
    from spica_core.emit.rechecks import with_headroom
    from spica_core.evaluate import EvalRequest, evaluate_one

    work = Path(tempfile.mkdtemp(prefix="spica-bench-traffic-"))
    data = yaml.safe_load(EXAMPLE.read_text())
    data["workload"]["trace_path"] = str((EXAMPLE.parent / data["workload"]["trace_path"]).resolve())
    data["sweep"].update({"max_rounds": args.rounds, "candidates_per_round": args.per_round})
    config = work / "mooncake.yaml"
    config.write_text(yaml.safe_dump(data))
    wall = sweep(config, work / "run")

    run = FinishedRun.open(work / "run")
    top = [r.rank for r in run.records[:3]]
    counter = ReplayCounter()
    start = time.perf_counter()
    measured = with_headroom(run.records, top, run.config, run.trace_file)
    headroom_s = time.perf_counter() - start
    per_candidate = [r.headroom.evaluations for r in measured if r.headroom is not None]

    counter.calls = 0
    winner = run.records[0]
    robust_goal = run.config.goal.model_copy(update={"robust_scale": 2.0})
    out = evaluate_one(EvalRequest(candidate=winner.candidate, workload=run.config.workload, goal=robust_goal,
                                   trace_file=str(run.trace_file)))
    robust_replays = counter.calls

    result = {
        "case": f"examples/mooncake_qwen3_32b.yaml, {args.rounds} rounds × {args.per_round}",
        "sweep_wall_s": wall, "headroom_top3_s": headroom_s,
        "headroom_share_of_sweep": headroom_s / max(wall - headroom_s, 1e-9),
        "headroom_replays": per_candidate,
        "headroom": {str(r.rank): r.headroom.to_dict() for r in measured if r.headroom is not None},
        "robust_scale_2_replays": robust_replays,
        "robust_winner": {"score": out.score, "plain_score": out.metrics.get("plain_score"),
                          "robust_scale_score": out.metrics.get("robust_scale_score")},
    }
    OUT.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    lines = [f"Measured by `PYTHONPATH=. .venv/bin/python bench/bench_traffic.py` ({result['case']}, "
             "the public 17-minute Mooncake trace, requests over the context dropped).", "",
             f"- sweep wall time: {wall:.0f} s, of which the top 3 candidates' headroom: {headroom_s:.0f} s, "
             f"**{result['headroom_share_of_sweep']:.0%}** of the rest (target ≤ 40 %).",
             f"- extra replays per headroom: {per_candidate} (target ≤ 8).",
             f"- replays of one candidate with `robust_scale: 2`: {robust_replays} (today's and 2×: one extra)."]
    lines += [f"- headroom of rank {rank}: {h['scale']:.3g}× (attainment {h['attainment']:.2f})"
              for rank, h in result["headroom"].items()]
    write_section("traffic", "Traffic (`bench/bench_traffic.py`)", lines)
    print(json.dumps(result, indent=1, sort_keys=True))


if __name__ == "__main__":
    main()

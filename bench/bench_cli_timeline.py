"""One ``spica sweep CONFIG`` with bench_startup's probe, and its search stage's timeline: each worker's idle gaps
over 0.15 s, the idle worker-seconds, and the CLI process's GP-UCB-PE tracing marks (seconds from the search
task's start).

    .venv/bin/python bench/bench_cli_timeline.py CONFIG [--events] [--cpu]

``bench_search.py --cli`` gives the share; this shows where a run's idle seconds fall. ``--events``: every
evaluation's and replay's marks; ``--cpu``: how busy the machine's cores were, every 0.5 s, in seconds from the
search task's start (from ``/proc/stat``, so anything else running counts too).
"""
from __future__ import annotations

import os
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_startup as st  # noqa: E402


def _busy_cores(samples: list[tuple[float, float]], stop: threading.Event) -> None:
    """(wall time, % of all cores busy over the last 0.5 s), until ``stop``."""
    def read() -> tuple[int, int]:
        with open("/proc/stat") as stat:
            ticks = [int(v) for v in stat.readline().split()[1:]]
        return sum(ticks), ticks[3] + ticks[4]  # idle + iowait

    before = read()
    while not stop.wait(0.5):
        now = read()
        total = max(1, now[0] - before[0])
        samples.append((time.time(), 100.0 * (1 - (now[1] - before[1]) / total)))
        before = now


def main() -> None:
    tmp = Path(tempfile.mkdtemp(prefix="spica-cli-timeline-"))
    base = {**os.environ, "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120"}
    base.pop("PREFECT_API_URL", None)
    samples: list[tuple[float, float]] = []
    stop = threading.Event()
    sampler = threading.Thread(target=_busy_cores, args=(samples, stop), daemon=True)
    if "--cpu" in sys.argv:
        sampler.start()
    result = st.run_once(sys.argv[1], st._probe_env(tmp, base, st.ROOT), tmp, "x", stop_at_replay=False)
    stop.set()
    marks = st._read_marks(tmp / "marks-x.jsonl")
    main_pid = next(m["pid"] for m in marks if m["name"] == "sweep_command:start")
    start, end = st._first(marks, "search_task:start"), st._first(marks, "search_task:end")
    assert start is not None and end is not None, "the sweep did not finish its search stage"
    print("search", result.get("search"))
    replays: dict[int, list[tuple[float, str]]] = {}
    for m in marks:
        if m["pid"] != main_pid and m["name"] in ("replay:start", "replay:end") and start <= m["t"] <= end:
            replays.setdefault(m["pid"], []).append((m["t"] - start, m["name"]))
    idle = 0.0
    for pid, events in sorted(replays.items()):
        last, gaps = 0.0, []
        for t, name in events:
            if name == "replay:start":
                if t - last > 0.15:
                    gaps.append((round(last, 2), round(t - last, 2)))
                idle += t - last
            else:
                last = t
        idle += (end - start) - last
        print(f"worker {pid}: gaps over 0.15 s (from, length) {gaps}, idle at the end {(end - start) - last:.2f} s")
    print(f"idle worker-s {idle:.2f} of {len(replays) * (end - start):.2f}")
    for m in marks:
        if m["name"].startswith("trace_gp") or m["pid"] == main_pid and m["name"].startswith("ask:"):
            print(m["name"], round(m["t"] - start, 2))
    if samples:
        print("cores busy, % (s from the search's start: %)",
              " ".join(f"{t - start:.1f}:{busy:.0f}" for t, busy in samples))
    if "--events" in sys.argv:  # every worker's evaluation and replay marks in the search stage
        for m in marks:
            if m["pid"] != main_pid and start <= m["t"] <= end and m["name"].split(":")[0] in ("evaluate_one", "replay"):
                print(m["pid"], m["name"], round(m["t"] - start, 3))


if __name__ == "__main__":
    main()

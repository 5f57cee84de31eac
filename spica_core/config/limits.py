"""Upper bounds on every number that sizes work or memory, each with the reason a user is told.

A config that passes validation must never hang enumeration, exhaust memory or abort the replay in
native code, so each bound sits where the facts stop making sense (beyond any real deployment, or
beyond what an engine could hold in flight) rather than where the machine happens to give out.
``docs/limits.md`` lists them; :func:`over` is the one message format.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from spica_core.config.knobs import SEARCH_CHOICES


@dataclass(frozen=True)
class Limit:
    maximum: int | float
    why: str


GPU_BUDGET = Limit(512, "larger than any single Dynamo deployment, and the disaggregated layouts grow with the "
                        "square of the budget (512 GPUs already give about 0.5 million)")
WORKER_GPUS = Limit(GPU_BUDGET.maximum, "each parallel rank and each replica uses at least one GPU, and gpu_budget "
                                        "is at most 512")
MAX_NUM_SEQS_PER_GPU = max(v for knob in ("agg_max_num_seqs", "decode_max_num_seqs", "prefill_max_num_seqs")
                           for v in SEARCH_CHOICES[knob])
IN_FLIGHT = Limit(GPU_BUDGET.maximum * MAX_NUM_SEQS_PER_GPU,
                  f"no engine runs more than {MAX_NUM_SEQS_PER_GPU} sequences per GPU (the largest max_num_seqs "
                  "Spica may search), so more requests in flight only wait in the queue")
SEQUENCE_TOKENS = Limit(10_000_000, "longer than any model's context window")
REQUESTS_PER_REPLAY = Limit(1_000_000, "a replay of more requests takes longer than any evaluation deadline; "
                                       "a few thousand requests already give stable percentiles")
REQUEST_RATE = Limit(100_000, "requests per second beyond what any deployment serves")
NUM_REQUEST_RATIO = Limit(10_000, "requests per unit of load; the request count is this times the load")
KV_LOAD_RATIO = Limit(10, "times the candidate's KV capacity; beyond that every extra request only waits in the "
                          "queue")
ARRIVAL_SPEEDUP = Limit(1_000, "times faster arrivals; an hour of trace then lasts under 4 s")
ARRIVAL_SLOWDOWN = 0.001  # the smallest arrival_speedup_ratio: an hour of trace then lasts 42 days
PREFIX_GROUPS = Limit(1_000_000, "prefix groups; more than a replay's requests")
TURNS_PER_SESSION = Limit(1_000, "turns per session")
MAX_ROUNDS = Limit(1_000, "rounds per branch")
CANDIDATES_PER_ROUND = Limit(1_024, "candidates per round")
EVALUATIONS = Limit(10_000, "evaluations per branch (max_rounds × candidates_per_round): a Gaussian-process fit "
                            "grows with the cube of the trials, so an ask beyond this takes minutes")
PARALLEL_EVALS = Limit(256, "worker processes on one machine")
EVAL_SECONDS = Limit(86_400, "seconds (a day) for one replay")
STARTUP_SECONDS = Limit(86_400, "seconds (a day) for a worker to start")
SCHEDULER_RECV_INTERVAL = Limit(10_000, "scheduler iterations between polls; beyond that a new request waits longer "
                                         "than any benchmark runs")
G2_BLOCKS = Limit(100_000_000, "host KV blocks, more than any host's memory holds")
SEED = Limit(2**63 - 1, "a seed is stored as a 64-bit integer")
TRAFFIC_SCALE = Limit(64, "times today's traffic (goal.headroom_max, goal.robust_scale): each scaled replay "
                          "replays that many times the requests per second or in flight")

DEFAULT_PER_ROUND = 16  # candidates per round when neither candidates_per_round nor parallel_evals is set


def over(limit: Limit, maximum: int | float | None = None, derived: str = "") -> str:
    """The message for a value above ``limit`` (``maximum`` and how it is ``derived`` when it scales, e.g. per GPU)."""
    bound = limit.maximum if maximum is None else maximum
    shown = f"{bound:,}" if isinstance(bound, int) or float(bound).is_integer() else f"{bound:g}"
    return f"must be at most {shown}{f' ({derived})' if derived else ''}: {limit.why}"


def machine_cores() -> int:
    """Cores this process may use: local workers beyond them only add memory, not speed."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)

"""The search benchmark: how good the optimizer's answer is and what it costs, as ratios from one run.

    .venv/bin/python bench/bench_search.py                    # ~10 min on 2 cores: section "full"
    .venv/bin/python bench/bench_search.py --live             # ~5 min: the timed sweeps on live replays, "live"
    .venv/bin/python bench/bench_search.py --cli [--runs 3] [--baseline REF]   # "cli": ~45 s per `spica sweep`
    .venv/bin/python bench/bench_search.py --default-quality  # DEFAULT alone at 32 and 64: "default_quality"
    .venv/bin/python bench/bench_search.py --quick            # a smoke run (1 seed, budgets 16/32): prints, writes nothing

Every mode but ``--quick`` overwrites its own section of ``bench/results/search.json`` (the other sections stay)
and then rewrites the ``bench_search`` block of ``docs/benchmarks.md`` from the whole file.

Two fixed spaces, both goodput_per_gpu under an SLA, with a generated shared-prefix trace:

- ``dense``: Qwen3-32B on 8 × h200_sxm, agg and disagg, vLLM, batching and router knobs (688 candidates);
- ``moe``: Qwen3-30B-A3B on 16 × h200_sxm, agg, vLLM, batching and router knobs (480 candidates).

``full``, per space:

1. ``thorough`` with real replays (2 worker processes): the exact optimum, and the score of every
   candidate. The quality runs (step 2) answer each candidate with its recorded thorough outcome
   instead of replaying it again: a candidate's score is a fixed function of the candidate, so the
   designers are compared on identical scores, and 90 searches fit in the time budget.
2. Budgets of 16, 32 and 64 evaluations, 5 seeds, for DEFAULT (GP-UCB-PE), RANDOM_SEARCH and
   QUASI_RANDOM_SEARCH: best ÷ thorough optimum, and unique evaluations ÷ suggestions.
3. One DEFAULT sweep of 64 evaluations with real replays: the wall-time split (replay, optimizer,
   orchestration) and 1 − (Σ replay s ÷ workers) ÷ wall.

Then: the 45- and 90-candidate spaces (default vs thorough wall, real replays), the real-trace case (the public
Mooncake trace), RSS of the optimizer process over 200 GP-UCB-PE suggestions, the quick-start CLI sweep with
empty caches, and AI Configurator's own pick (``aiconfigurator cli default`` on the dense space, its agg and
disagg picks replayed on the same trace; ``bench/peer_aic.py``). The upstream sweeper is its own benchmark
(``bench/peer_sweeper.py``).

``live``: only the timed parts of ``full`` (the two 64-evaluation DEFAULT sweeps, the small spaces, the real
trace, RSS), every ratio within one run. ``cli``: the dense and MoE timed sweeps as a user runs them, ``spica
sweep CONFIG`` in a new process after a warm-up sweep (``bench_startup.search_share``), optionally interleaved
with a baseline commit. ``default_quality``: what a change to the designer's settings must keep: DEFAULT's best
÷ optimum at 32 and 64 evaluations, 5 seeds, on recorded outcomes, and its live sweep, per space.
"""
from __future__ import annotations

import argparse
import json
import os
import pickle
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

os.environ.setdefault("DYN_LOG", "error")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import psutil  # noqa: E402
from results_doc import DOCS, headline, provenance, write_results, write_section  # noqa: E402

from spica_core.config.model import SmartSearchConfig  # noqa: E402
from spica_core.evaluate import EvalPool, EvalRequest, Outcome, SequentialEvaluator  # noqa: E402
from examples.make_traces import write_poisson_trace  # noqa: E402
from spica_core.search import (  # noqa: E402
    EvalCache, SearchContext, Tally, Trial, optimizer_for, optimizer_process, search_branches,
)
from spica_core.space.branches import Branch, enumerate_branches  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "search.json"
TRACES = ROOT / "bench" / "traces"
ALGORITHMS = ("DEFAULT", "RANDOM_SEARCH", "QUASI_RANDOM_SEARCH")
PER_ROUND = 8
WORKERS = 2
ROUTER_PINS = {"overlap_score_credit": [1.0], "prefill_load_scale": [1.0], "router_temperature": [0.0],
               "planner_scaling_policy": ["disabled"]}
SPACES: dict[str, dict[str, Any]] = {
    "dense": {"model_name": "Qwen/Qwen3-32B", "hardware_sku": "h200_sxm", "gpu_budget": 8,
              "deployment_mode": ["agg", "disagg"], "backend": ["vllm"],
              "agg_max_num_seqs": [256, 1024], "agg_max_num_batched_tokens": [8192, 32768],
              "prefill_max_num_seqs": [4, 16], "prefill_max_num_batched_tokens": [16384],
              "decode_max_num_seqs": [256, 1024], "router_mode": ["kv_router", "round_robin"], **ROUTER_PINS},
    "moe": {"model_name": "Qwen/Qwen3-30B-A3B", "hardware_sku": "h200_sxm", "gpu_budget": 16,
            "deployment_mode": ["agg"], "backend": ["vllm"],
            "agg_max_num_seqs": [256, 1024], "agg_max_num_batched_tokens": [8192, 32768],
            "router_mode": ["kv_router", "round_robin"], **ROUTER_PINS},
}
SMALL_SPACE = {"model_name": "Qwen/Qwen3-32B", "hardware_sku": "h200_sxm", "gpu_budget": 8,
               "deployment_mode": ["agg"], "backend": ["vllm"], "agg_max_num_seqs": [256, 512, 1024],
               "agg_max_num_batched_tokens": [16384], "router_mode": ["round_robin"], **ROUTER_PINS}
SLA = {"ttft_ms": 1500, "itl_ms": 30}
MOONCAKE = ROOT / "examples" / "traces" / "mooncake_synthetic_trace.jsonl"  # the public trace (FAST'25)
REAL_SPACE = {"model_name": "meta-llama/Meta-Llama-3.1-70B", "hardware_sku": "h200_sxm", "gpu_budget": 16,
              "deployment_mode": ["agg", "disagg"], "backend": ["vllm"], "router_mode": ["kv_router", "round_robin"],
              "planner_scaling_policy": ["disabled"]}
REAL_SLA = {"ttft_ms": 10000, "itl_ms": 50}
MEDIUM_SPACE = {**SMALL_SPACE, "agg_max_num_seqs": [256, 512, 1024], "agg_max_num_batched_tokens": [8192, 16384]}
ISL, OSL = 3000, 300


def make_trace(name: str, num_requests: int) -> Path:
    """A shared-prefix Poisson trace; the same arguments always give the same file."""
    return write_poisson_trace(TRACES / f"{name}.jsonl", num_requests=num_requests, rate_rps=16.0, isl=ISL,
                               osl=OSL, prefix_groups=24, prefix_blocks=8, seed=7)


def config_dict(space: dict[str, Any], trace: Path, **sweep: Any) -> dict[str, Any]:
    """A space's config, as a user would write it."""
    return {"search_space": space, "workload": {"trace_path": str(trace)},
            "goal": {"target": "goodput_per_gpu", "sla": SLA},
            "sweep": {"parallel_evals": WORKERS, "candidates_per_round": PER_ROUND, "max_eval_seconds": 300, **sweep}}


def make_config(space: dict[str, Any], trace: Path, **sweep: Any) -> SmartSearchConfig:
    return SmartSearchConfig.from_dict(config_dict(space, trace, **sweep))


def sample_key(request: EvalRequest) -> str:
    return json.dumps(request.candidate.to_sample(), sort_keys=True, default=str)


class Recorder:
    """The live pool as a search evaluator, keeping every outcome by candidate."""

    def __init__(self, pool: EvalPool):
        self.pool = pool
        self.workers = pool.workers
        self.outcomes: dict[str, Outcome] = {}
        self._requests: dict[int, EvalRequest] = {}

    def capacity(self) -> int:
        return self.pool.capacity()

    def in_flight(self) -> int:
        return self.pool.in_flight()

    def submit(self, request: EvalRequest) -> int:
        ticket = self.pool.submit(request)
        self._requests[ticket] = request
        return ticket

    def poll(self, timeout: float) -> list[tuple[int, Outcome]]:
        done = self.pool.poll(timeout)
        for ticket, outcome in done:
            self.outcomes[sample_key(self._requests.pop(ticket))] = outcome
        return done


class Recorded(SequentialEvaluator):
    """Answers each candidate with the outcome the thorough run recorded for it (see the docstring), as
    ``WORKERS`` workers would, so the asks have the live sweep's shape and costs (its eval_seconds)."""

    workers = WORKERS

    def __init__(self, outcomes: dict[str, Outcome]):
        super().__init__()
        self.outcomes = outcomes

    def evaluate(self, request: EvalRequest) -> Outcome:
        outcome = self.outcomes.get(sample_key(request))
        if outcome is None:
            raise KeyError(f"candidate not in the thorough record: {sample_key(request)[:200]}")
        return outcome


@dataclass
class SweepRun:
    trials: list[Trial]
    wall_s: float

    @property
    def best(self) -> float:
        return max((t.score for t in self.trials if t.score is not None and t.status.value == "feasible"),
                   default=float("nan"))

    @property
    def replay_s(self) -> float:
        return Tally.of(self.trials).replay_seconds

    @property
    def suggest_s(self) -> float:
        return Tally.of(self.trials).optimizer_seconds

    @property
    def methods(self) -> dict[str, int]:
        """How many trials each way of picking proposed (gp, space-filling, random, enumerated)."""
        out: dict[str, int] = {}
        for t in self.trials:
            out[t.suggested_by] = out.get(t.suggested_by, 0) + 1
        return out

    @property
    def unique_ratio(self) -> float:
        return sum(1 for t in self.trials if not t.cache_hit) / max(1, len(self.trials))


def sweep(config: SmartSearchConfig, branches: Sequence[Branch], trace: Path, evaluator: Any,
          on_result: Any = None) -> SweepRun:
    """The flow's search stage without Prefect: the branches side by side, each to its end, the studies in the
    optimizer process as the flow's are."""
    context = SearchContext(config, str(trace), None, optimizer=optimizer_for(config))
    started = time.perf_counter()
    results = search_branches(branches, context, evaluator, EvalCache(), (), on_result)
    return SweepRun([t for r in results for t in r.trials], time.perf_counter() - started)


def rounds_for(budget: int, branches: int) -> int:
    return max(1, budget // (PER_ROUND * branches))


def bench_space(name: str, space: dict[str, Any], trace: Path, seeds: Sequence[int], budgets: Sequence[int],
                pool: EvalPool, keep: Path | None = None,
                algorithms: Sequence[str] = ALGORITHMS) -> tuple[dict[str, Any], dict[str, Outcome]]:
    base = make_config(space, trace)
    branches = enumerate_branches(base).branches
    print(f"[{name}] {sum(len(b.pool) for b in branches)} configs in {len(branches)} branch(es)", flush=True)
    recorder = Recorder(pool)
    saved = None if keep is None else keep / f"thorough_{name}.pkl"
    if saved is not None and saved.exists():  # a development shortcut: reuse a recorded thorough run
        thorough, recorder.outcomes = pickle.loads(saved.read_bytes())
    else:
        thorough = sweep(make_config(space, trace, policy="thorough"), branches, trace, recorder)
        if saved is not None:
            saved.write_bytes(pickle.dumps((thorough, recorder.outcomes)))
    optimum = thorough.best
    print(f"[{name}] thorough: {len(thorough.trials)} candidates in {thorough.wall_s:.0f} s, optimum {optimum:.1f}",
          flush=True)
    recorded = Recorded(recorder.outcomes)
    quality: dict[str, dict[str, list[dict[str, float]]]] = {}
    for algorithm in algorithms:
        quality[algorithm] = {}
        for budget in budgets:
            rows = []
            for seed in seeds:
                config = make_config(space, trace, algorithm=algorithm, seed=seed,
                                     max_rounds=rounds_for(budget, len(branches)))
                run = sweep(config, branches, trace, recorded)
                rows.append({"seed": seed, "evaluations": len(run.trials), "best_ratio": run.best / optimum,
                             "unique_ratio": run.unique_ratio, "optimizer_s": run.suggest_s,
                             "methods": run.methods})
            quality[algorithm][str(budget)] = rows
            ratios = [r["best_ratio"] for r in rows]
            print(f"[{name}] {algorithm:>19} @{budget}: best/optimum median {statistics.median(ratios):.4f} "
                  f"range {min(ratios):.4f}–{max(ratios):.4f}", flush=True)
    budget = max(budgets)
    live = sweep(make_config(space, trace, max_rounds=rounds_for(budget, len(branches))), branches, trace, pool)
    split = wall_split(live)
    print(f"[{name}] live DEFAULT @{budget}: {split}", flush=True)
    return {"candidates": len(thorough.trials), "configs": sum(len(b.pool) for b in branches),
            "thorough": {"wall_s": thorough.wall_s, "replay_s": thorough.replay_s, "optimum": optimum,
                         "mean_replay_s": thorough.replay_s / len(thorough.trials),
                         "top": [{"mode": t.mode, "parallel": t.parallel.label(), "selection": t.selection,
                                  "score": t.score} for t in sorted(
                             (t for t in thorough.trials if t.score is not None), key=lambda t: -t.score)[:8]]},
            "quality": quality, "live_default": split}, recorder.outcomes


def wall_split(run: SweepRun) -> dict[str, float]:
    replay_wall = run.replay_s / WORKERS
    return {"evaluations": len(run.trials), "wall_s": run.wall_s, "replay_s": run.replay_s,
            "replay_wall_s": replay_wall, "optimizer_s": run.suggest_s,
            "orchestration_s": max(0.0, run.wall_s - replay_wall - run.suggest_s),
            "outside_replay_ratio": 1 - replay_wall / run.wall_s, "best": run.best,
            "unique_ratio": run.unique_ratio, "methods": run.methods}


def bench_small(name: str, space: dict[str, Any], trace: Path, pool: EvalPool, max_rounds: int,
                per_round: int, pairs: int = 3) -> dict[str, Any]:
    """A small space: a default sweep covering a third to a half of it vs thorough, real replays. ``pairs`` of
    the two, the order alternating (the second of a pair finds the workers warmer); the ratio is of the
    medians, since a sweep of the 45-candidate space takes about a second."""
    branches = enumerate_branches(make_config(space, trace)).branches
    runs: dict[str, list[Any]] = {"thorough": [], "default": []}
    configs = {"thorough": make_config(space, trace, policy="thorough"),
               "default": make_config(space, trace, max_rounds=max_rounds, candidates_per_round=per_round)}
    for pair in range(pairs):
        for policy in (("thorough", "default") if pair % 2 == 0 else ("default", "thorough")):
            runs[policy].append(sweep(configs[policy], branches, trace, pool))
    thorough, default = runs["thorough"][0], runs["default"][0]
    walls = {policy: [r.wall_s for r in done] for policy, done in runs.items()}
    out = {"candidates": len(thorough.trials), "budget": max_rounds * per_round,
           "thorough_wall_s": statistics.median(walls["thorough"]), "optimum": thorough.best,
           "default_wall_s": statistics.median(walls["default"]), "default_evaluations": len(default.trials),
           "wall_ratio": statistics.median(walls["default"]) / statistics.median(walls["thorough"]),
           "walls_s": walls, "best_ratio": default.best / thorough.best,
           "methods": default.methods, "default_split": wall_split(default)}
    print(f"[{name}] {out}", flush=True)
    return out


def real_config() -> SmartSearchConfig:
    return SmartSearchConfig.from_dict({
        "search_space": REAL_SPACE, "workload": {"trace_path": str(MOONCAKE)},
        "goal": {"target": "goodput_per_gpu", "sla": REAL_SLA},
        "sweep": {"parallel_evals": WORKERS, "candidates_per_round": PER_ROUND, "max_rounds": 6,
                  "max_eval_seconds": 600}})


def bench_real(pool: EvalPool) -> dict[str, Any]:
    """The one-hour case's shape on the public Mooncake trace: Llama-3.1-70B on 16 × H200, agg + disagg,
    6 rounds × 8 per branch (96 evaluations), default designer, real replays."""
    config = real_config()
    branches = enumerate_branches(config).branches
    run = sweep(config, branches, MOONCAKE, pool)
    split = wall_split(run)
    print(f"[real] {split}", flush=True)
    return {"configs": sum(len(b.pool) for b in branches), **split}


def bench_rss(space: dict[str, Any], trace: Path, evaluator: Any, suggestions: int) -> dict[str, Any]:
    """RSS of the optimizer process (where the studies live) over ``suggestions`` default-designer suggestions in
    the dense disagg branch (568 candidates; recorded outcomes or live replays), sampled every ``PER_ROUND``
    trials."""
    config = make_config(space, trace, max_rounds=suggestions // PER_ROUND)
    branches = [b for b in enumerate_branches(config).branches if b.mode == "disagg"]
    proc, rss = psutil.Process(optimizer_process().pid), []

    def sample(trial: Trial) -> None:
        if (trial.trial + 1) % PER_ROUND == 0:
            rss.append(proc.memory_info().rss / 2**20)

    run = sweep(config, branches, trace, evaluator, sample)
    growth = rss[-1] / rss[1] - 1
    print(f"[rss] {len(run.trials)} suggestions ({run.methods}): {rss[1]:.0f} → {rss[-1]:.0f} MB ({growth:+.1%})",
          flush=True)
    return {"suggestions": len(run.trials), "rss_mb": rss, "growth_after_second_ask": growth, "methods": run.methods}


def bench_quickstart() -> dict[str, Any]:
    """The README's sweep, as a user runs it after setup: empty compile and profile caches and run folder."""
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "SPICA_JAX_CACHE_DIR": f"{tmp}/jax", "SPICA_CACHE_DIR": f"{tmp}/profiles",
               "PREFECT_HOME": f"{tmp}/prefect",
               "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120"}
        started = time.perf_counter()
        proc = subprocess.run([str(ROOT / ".venv" / "bin" / "spica"), "sweep", "examples/quickstart.yaml",
                               "--runs-root", f"{tmp}/runs"], cwd=ROOT, env=env, capture_output=True, text=True)
        wall = time.perf_counter() - started
    print(f"[quickstart] exit {proc.returncode} in {wall:.1f} s", flush=True)
    return {"wall_s": wall, "exit_code": proc.returncode, "tail": proc.stdout.splitlines()[-3:]}


def bench_peer(trace: Path, spica_best: float, optimum: float) -> dict[str, Any]:
    sys.path.insert(0, str(ROOT / "bench"))
    import peer_aic

    space = SPACES["dense"]
    config_path = TRACES / "dense_peer.yaml"
    config_path.write_text(json.dumps({"search_space": space, "workload": {"trace_path": str(trace)},
                                       "goal": {"target": "goodput_per_gpu", "sla": SLA}}))
    result = peer_aic.run_aic_default(space["model_name"], space["hardware_sku"], space["gpu_budget"], ISL, OSL,
                                      SLA["ttft_ms"], SLA["itl_ms"], "vllm")
    rows = peer_aic.replay_peer(config_path, result)
    scores = [r["score"] for r in rows if r.get("score") is not None]
    best = max(scores, default=float("nan"))
    out = {"wall_s": result.wall_s, "command": result.command, "rows": [
        {k: r.get(k) for k in ("mode", "parallel", "status", "score", "reason")} for r in rows],
        "best": best, "ratio_to_spica": best / spica_best, "ratio_to_optimum": best / optimum}
    print(f"[peer] {out}", flush=True)
    return out


def median_range(values: Sequence[float]) -> str:
    return f"{statistics.median(values):.3f} ({min(values):.3f}–{max(values):.3f})"


def _share(split: dict[str, Any]) -> str:
    return f"{split['outside_replay_ratio']:.2f}"


def _methods(methods: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in methods.items())


def _timed_lines(s: dict[str, Any], rss: dict[str, Any] | None, small: dict[str, Any]) -> list[str]:
    """The timed sweeps' table, the small spaces and RSS, from a ``full`` or ``live`` section."""
    rows = [(f"{name}, DEFAULT", s[name]) for name in SPACES if name in s]
    if "real" in s:
        rows.append(("real trace (public Mooncake trace; Llama-3.1-70B, 16 × h200_sxm, agg + disagg)", s["real"]))
    lines = ["| sweep | evaluations | wall | outside replays ÷ wall | best goodput, tok/s/GPU | picks |",
             "|---|---|---|---|---|---|"]
    lines += [f"| {name} | {r['evaluations']} | {r['wall_s']:.1f} s | **{_share(r)}** | {r['best']:.1f} | "
              f"{_methods(r['methods'])} |" for name, r in rows]
    lines.append("")
    for size, r in small.items():
        pairs = len(r.get("walls_s", {}).get("default", []))
        lines.append(f"- {r['candidates']}-candidate space (Qwen3-32B agg, 8 × h200_sxm; optimum "
                     f"{r.get('optimum', float('nan')):.1f}), default at a budget of {r['budget']} "
                     f"({r['default_evaluations']} evaluated) ÷ thorough, wall: **{r['wall_ratio']:.2f}** "
                     f"({r['default_wall_s']:.2f} s vs {r['thorough_wall_s']:.2f} s"
                     + (f", medians of {pairs} pairs, the order alternating" if pairs > 1 else ", one sweep each")
                     + f"); the default's best ÷ optimum {r['best_ratio']:.3f}.")
    if rss:
        lines.append(f"- RSS of the optimizer process over {rss['suggestions']} GP-UCB-PE suggestions (dense disagg "
                     f"branch): {rss['rss_mb'][1]:.0f} → {rss['rss_mb'][-1]:.0f} MB "
                     f"(**{rss['growth_after_second_ask']:+.1%}**).")
    return [*lines, ""]


def write_docs(doc: dict[str, Any]) -> None:
    """The ``bench_search`` block of docs/benchmarks.md from every section of search.json."""
    lines: list[str] = []
    full, live, cli, dq = (doc.get(k) for k in ("full", "live", "cli", "default_quality"))
    if full:
        spaces = full["spaces"]
        lines += [f"**Quality on recorded outcomes**: {headline(full, full['bench_wall_s'] / 60)}. "
                  "Best ÷ thorough optimum, median (range) over 5 seeds:", "",
                  "| algorithm | budget | " + " | ".join(
                      f"{name}: {r['candidates']} candidates, optimum {r['thorough']['optimum']:.1f}"
                      for name, r in spaces.items()) + " |", "|---|---|" + "---|" * len(spaces)]
        first = next(iter(spaces.values()))
        for algorithm, by_budget in first["quality"].items():
            for budget in by_budget:
                lines.append(f"| {algorithm} | {budget} | " + " | ".join(
                    median_range([x["best_ratio"] for x in r["quality"][algorithm][budget]])
                    for r in spaces.values()) + " |")
        unique = min(x["unique_ratio"] for r in spaces.values() for b in r["quality"].values()
                     for rows in b.values() for x in rows)
        beats = []
        for name, r in spaces.items():
            top = str(max(map(int, r["quality"]["DEFAULT"])))
            d, q = ([x["best_ratio"] for x in r["quality"][a][top]] for a in ("DEFAULT", "RANDOM_SEARCH"))
            beats.append(f"{name} {sum(a > b for a, b in zip(d, q))} of {len(d)} (ties: "
                         f"{sum(a == b for a, b in zip(d, q))})")
        lines += ["", f"Unique evaluations ÷ suggestions: {unique:.2f} at least, in every row. DEFAULT beats random "
                  f"search at the largest budget in: {'; '.join(beats)}.", ""]
        if "peer" in full and "error" not in full["peer"]:
            p = full["peer"]
            picks = "; ".join(f"{r['mode']} {r['parallel']}: "
                              f"{'–' if r['score'] is None else round(r['score'], 1)}" for r in p["rows"])
            lines += [f"- AI Configurator's own pick (`aiconfigurator cli default`, {p['wall_s']:.0f} s, "
                      f"`bench/peer_aic.py`) on the dense space, replayed on the same trace: {picks}; best ÷ Spica's "
                      f"live best **{p['ratio_to_spica']:.3f}**."]
        if "quickstart" in full:
            lines.append(f"- Quick start (`spica sweep examples/quickstart.yaml`, empty compile and profile caches): "
                         f"**{full['quickstart']['wall_s']:.0f} s** wall.")
        if not live or live.get("date", "") < full.get("date", ""):  # the newest run's timed figures only
            timed = {name: r["live_default"] for name, r in spaces.items()}
            lines += ["", "Its timed sweeps (64 evaluations, real replays, 2 workers):", ""]
            lines += _timed_lines({**timed, **({"real": full["real"]} if "real" in full else {})},
                                  full.get("rss"), full.get("small", {}))
        else:
            lines.append("")
    if live:
        lines += [f"**Timed sweeps on live replays**: {headline(live, live['bench_wall_s'] / 60)}; 2 workers:", ""]
        lines += _timed_lines({**{name: live[f"live_{name}"] for name in SPACES if f"live_{name}" in live},
                               **({"real": live["real"]} if "real" in live else {})}, live.get("rss"),
                              live.get("small", {}))
    if cli:
        trees = {k: v for k, v in cli.items() if isinstance(v, dict) and set(v) <= set(SPACES) and v}
        lines += [f"**The same sweeps as `spica sweep`**: {headline(cli)}. Per run: the search stage's share "
                  "outside replays, the command's wall, its first replay:", "",
                  "| tree | " + " | ".join(f"{n} share | {n} command wall | {n} first replay" for n in SPACES) + " |",
                  "|---|" + "---|---|---|" * len(SPACES)]
        for tree, by_space in trees.items():
            cells = []
            for name in SPACES:
                r = by_space.get(name, {})
                cells += [", ".join(f"{x:.2f}" for x in r.get("outside_replay_ratio_runs", []) if x is not None),
                          ", ".join(f"{x:.0f}" for x in r.get("wall_runs_s", [])) + " s",
                          ", ".join(f"{x:.1f}" for x in r.get("first_replay_runs_s", [])) + " s"]
            lines.append(f"| {tree} | " + " | ".join(cells) + " |")
        lines.append("")
    if dq:
        lines += [f"**DEFAULT on recorded outcomes**: {headline(dq)}. Best ÷ optimum, median (range) over 5 seeds; "
                  "share outside replays of its live sweep:", ""]
        for name, r in dq["spaces"].items():
            by_budget = r["quality"]["DEFAULT"]
            lines.append(f"- {name}: " + "; ".join(f"at {b} {median_range([x['best_ratio'] for x in rows])}"
                                                   for b, rows in by_budget.items())
                         + f"; live share {_share(r['live_default'])}.")
        lines.append("")
    write_section("bench_search", "Search (`bench/bench_search.py`)", lines)


def save(section: str, data: dict[str, Any]) -> None:
    """Overwrite ``section`` of search.json, then the docs block from the whole file."""
    doc = write_results(RESULTS, data, section)
    write_docs(doc)
    print(f"wrote section {section!r} of {RESULTS} and the bench_search block of {DOCS}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n", 2)[2])
    modes = ap.add_mutually_exclusive_group()
    modes.add_argument("--quick", action="store_true",
                       help="smoke run: 1 seed, budgets 16/32, no real trace, peer or RSS; prints, writes nothing")
    modes.add_argument("--live", action="store_true",
                       help="only what runs on live replays (the timed sweeps, small spaces, real trace, RSS)")
    modes.add_argument("--default-quality", action="store_true",
                       help="only DEFAULT's best ÷ optimum at 32 and 64 evaluations (5 seeds) and its live sweep")
    modes.add_argument("--cli", action="store_true",
                       help="only the dense and MoE timed sweeps, each as `spica sweep` in a new process")
    ap.add_argument("--runs", type=int, default=2, help="with --cli: measured sweeps per space")
    ap.add_argument("--baseline", metavar="GIT_REF", help="with --cli: also measure this commit, interleaved")
    args = ap.parse_args()
    TRACES.mkdir(parents=True, exist_ok=True)
    if args.cli:
        command = f"python bench/bench_search.py --cli --runs {args.runs}" + (
            f" --baseline {args.baseline}" if args.baseline else "")
        save("cli", {**provenance(command), **cli_shares(args.runs, args.baseline)})
        return
    if args.live:
        save("live", live_only())
        return
    if args.default_quality:
        save("default_quality", default_quality())
        return
    started = time.perf_counter()
    seeds = [0] if args.quick else [0, 1, 2, 3, 4]
    budgets = [16, 32] if args.quick else [16, 32, 64]
    trace = make_trace("shared_prefix_3000", 3000)
    from importlib.metadata import version

    results: dict[str, Any] = {
        **provenance("python bench/bench_search.py" + (" --quick" if args.quick else "")),
        "memory_gb": round(psutil.virtual_memory().total / 2**30),
        "versions": ", ".join(f"{p} {version(p)}" for p in ("ai-dynamo-runtime", "aiconfigurator-core",
                                                             "google-vizier", "jax", "prefect")),
        "spaces": {}}
    recorded: dict[str, dict[str, Outcome]] = {}
    with EvalPool(WORKERS, max_eval_seconds=300) as pool:
        ready_as_the_cli_is(pool)
        for name, space in SPACES.items():
            results["spaces"][name], recorded[name] = bench_space(name, space, trace, seeds, budgets, pool)
        results["small"] = {
            "45": bench_small("small-45", SMALL_SPACE, make_trace("shared_prefix_400", 400), pool, 3, PER_ROUND),
            "90": bench_small("small-90", MEDIUM_SPACE, make_trace("shared_prefix_4000", 4000), pool, 8, 4)}
        if not args.quick:
            results["real"] = bench_real(pool)
    if not args.quick:
        dense = results["spaces"]["dense"]
        results["rss"] = bench_rss(SPACES["dense"], trace, Recorded(recorded["dense"]), 200)
        live_best = max(dense["live_default"]["best"], 0.0)
        try:
            results["peer"] = bench_peer(trace, live_best, dense["thorough"]["optimum"])
        except Exception as exc:  # noqa: BLE001 - the peer is reported, never fatal to the benchmark
            results["peer"] = {"error": f"{type(exc).__name__}: {exc}"}
            print(f"[peer] failed: {exc}", flush=True)
    results["quickstart"] = bench_quickstart()
    results["bench_wall_s"] = time.perf_counter() - started
    if args.quick:
        print(json.dumps(results, indent=1, default=str)[:5000])
        return
    save("full", results)


def default_quality() -> dict[str, Any]:
    """DEFAULT's quality on recorded outcomes and its live sweep, per space: what a change to the designer's
    settings must keep."""
    started = time.perf_counter()
    out: dict[str, Any] = {**provenance("python bench/bench_search.py --default-quality"), "spaces": {}}
    trace = make_trace("shared_prefix_3000", 3000)
    with EvalPool(WORKERS, max_eval_seconds=300) as pool:
        ready_as_the_cli_is(pool)
        for name, space in SPACES.items():
            result, _ = bench_space(name, space, trace, [0, 1, 2, 3, 4], [32, 64], pool, algorithms=("DEFAULT",))
            out["spaces"][name] = {k: result[k] for k in ("candidates", "quality", "live_default")}
            out["spaces"][name]["optimum"] = result["thorough"]["optimum"]
    out["bench_wall_s"] = time.perf_counter() - started
    return out


def ready_as_the_cli_is(pool: EvalPool, trace: bool = True) -> None:
    """Get ready as `spica sweep` does before its search stage, in its order: start the optimizer process, which
    imports jax and Vizier and traces GP-UCB-PE (``trace``; the CLI does for a DEFAULT sweep, which every timed
    sweep here is), then start the workers. Their cost is in the command-to-first-replay figure
    (bench_startup.py), not in a sweep's share. The first timed sweep starts as soon as the workers are ready, so
    the tracing has less of a head start than in the CLI, where Prefect's server, the flow and the stages before
    the search come between."""
    optimizer_process(trace=trace)
    pool.start()


def cli_shares(runs: int = 2, baseline: str | None = None) -> dict[str, Any]:
    """The timed sweeps of ``--live`` (dense and MoE, DEFAULT at 64 evaluations), each run as a user runs it:
    ``spica sweep CONFIG`` in a new process, after one warm-up sweep of the same config (profile and compile
    caches filled). Per run: the search stage's wall, Σ replay and share outside replays
    (bench_startup.search_share); ``baseline``: a git ref measured interleaved with this checkout."""
    import yaml

    sys.path.insert(0, str(ROOT / "bench"))
    from bench_startup import _export, measure_startup

    trace = make_trace("shared_prefix_3000", 3000)
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="spica-cli-share-") as tmp:
        trees = {"current": ROOT}
        if baseline:
            trees = {f"baseline {baseline}": _export(baseline, Path(tmp) / "baseline"), **trees}
        for name, space in SPACES.items():
            branches = enumerate_branches(make_config(space, trace)).branches
            path = Path(tmp) / f"{name}.yaml"
            path.write_text(yaml.safe_dump(config_dict(space, trace, max_rounds=rounds_for(64, len(branches)))))
            measured = measure_startup(str(path), runs=runs, full=True, trees=trees)
            for tree, result in measured.get("trees", {"current": measured}).items():
                splits = [r.get("search") for r in result["runs"]]
                out.setdefault(tree, {})[name] = {
                    "runs": splits, "first_replay_runs_s": result["first_replay_runs_s"],
                    "wall_runs_s": [r["wall_s"] for r in result["runs"]],
                    "outside_replay_ratio_runs": [s and s["outside_replay_ratio"] for s in splits]}
                print(f"[cli {name}] {tree}: shares {out[tree][name]['outside_replay_ratio_runs']}, "
                      f"command walls {out[tree][name]['wall_runs_s']}", flush=True)
    return out


def live_only() -> dict[str, Any]:
    """The timed part of the benchmark, in one run: every ratio below is measured within it. (Start-up is
    ``bench/bench_startup.py``'s.)"""
    started = time.perf_counter()
    trace = make_trace("shared_prefix_3000", 3000)
    out: dict[str, Any] = provenance("python bench/bench_search.py --live")
    with EvalPool(WORKERS, max_eval_seconds=300) as pool:
        ready_as_the_cli_is(pool)
        for name, space in SPACES.items():
            branches = enumerate_branches(make_config(space, trace)).branches
            run = sweep(make_config(space, trace, max_rounds=rounds_for(64, len(branches))), branches, trace, pool)
            out[f"live_{name}"] = wall_split(run)
            print(f"[{name}] live DEFAULT @64: {out[f'live_{name}']}", flush=True)
        out["small"] = {
            "45": bench_small("small-45", SMALL_SPACE, make_trace("shared_prefix_400", 400), pool, 3, PER_ROUND),
            "90": bench_small("small-90", MEDIUM_SPACE, make_trace("shared_prefix_4000", 4000), pool, 8, 4)}
        out["real"] = bench_real(pool)
        out["rss"] = bench_rss(SPACES["dense"], trace, pool, 200)
    out["bench_wall_s"] = time.perf_counter() - started
    return out


if __name__ == "__main__":
    main()

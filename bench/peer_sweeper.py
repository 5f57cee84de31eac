"""The upstream peer: AISimulate's own sweeper (``aisimulate recommend``) on a Spica space.

    PYTHONPATH=. .venv/bin/python bench/peer_sweeper.py --install     # the AISimulate venv (bench/.aisim-venv)
    PYTHONPATH=. .venv/bin/python bench/peer_sweeper.py --small       # ~6 min: the benchmark (below)
    PYTHONPATH=. .venv/bin/python bench/peer_sweeper.py --space SPACE.json --trace T.jsonl [--budget N]   # prints

The benchmark (``--small``): the search benchmark's 45-candidate agg space (``SMALL_SPACE``, as
``bench_search.SMALL_SPACE``) on a generated 400-request shared-prefix trace, the upstream sweeper exhaustive and
Bayesian at ``--budget`` trials (24, the default sweep's budget on that space), each run's best re-scored by Spica
(``spica evaluate --json`` on the config :func:`spica_config_for` writes). It overwrites
``bench/results/peer_sweeper.json`` and the ``peer_sweeper`` block of ``docs/benchmarks.md``.

``run_upstream(space, trace_path, sla, budget, algorithm, workdir)`` runs the upstream sweeper on the same
search a Spica ``search_space`` describes and returns ``{"wall_s", "trials", "unique", "best", "command",
"error", ...}``; ``spica_config_for(best, base_config)`` pins that best candidate in a Spica config so the
benchmark can re-score it with Spica's evaluator (``spica evaluate``).

Protocol (facts from ``aisimulate/recommend.py``, ``config/common.py``, ``sweeper/search.py``,
``sweeper/sampler.py`` and ``sweeper/result.py`` of ``aisimulate==peer_aisim.AISIM_VERSION``)
-----------------------------------------------------------------------------------------------
1. The space is first normalised by Spica's own ``SearchSpace`` model, so a knob the space leaves out
   takes Spica's default list, and the upstream config is written from those values (``upstream_config``):

   - ``engine``: ``mode`` = the deployment modes (``agg`` -> ``aggregated``, ``disagg`` ->
     ``disaggregated``), ``model``, ``hardware``, ``backend`` (choices), ``context_length`` (Spica's, or
     ``max`` = the model maximum, which is also Spica's default); one ``workers`` entry per role with
     ``scheduler.max_batched_tokens`` / ``max_sequences`` = the ``{agg,prefill,decode}_max_num_batched_tokens``
     / ``_max_num_seqs`` lists, and ``kv_cache`` = ``block_size``, ``prefix_caching`` and
     ``capacity.memory_fraction`` from the role's ``*_block_size``, ``*_enable_prefix_caching`` and
     ``*_gpu_memory_utilization``. Parallel shapes: ``preset: default`` (upstream derives the pool from model,
     SKU and ``max_candidate_gpus``; it matches ``spica space``) unless the space pins ``parallel_configs``,
     which become a concrete preset list (disagg: the upstream crosses its prefill and decode lists).
   - ``traffic``: the Mooncake trace, ``block_size`` 512 (Spica's trace granularity), load
     ``trace_timestamps`` (open loop, ``speedup`` = ``arrival_speedup_ratio``) or ``concurrency`` (closed loop,
     ``replay_concurrency``).
   - ``evaluation.sla`` = the SLA; ``optimization``: ``target`` (``goodput_per_gpu`` by default),
     ``hardware``, ``constraints.max_candidate_gpus`` = ``gpu_budget`` (``min_candidate_gpus`` =
     ``min_gpu_budget``).
   - ``optimizer``: budget None -> ``algorithm: random`` with ``max_trials`` = ``EXHAUSTIVE_TRIALS``: the
     random sampler draws every (backend, parallel shape) arm's finite knob grid without replacement and the
     branch stops when the grid is exhausted, so this enumerates the space once (the large budget is never
     reached). Otherwise ``algorithm`` (``bayesian`` by default) with ``max_trials`` = budget; the upstream
     counts every suggestion against it, duplicates (cache hits) included. ``parallelism`` = candidates per
     round (8, as Spica's search benchmark); ``execution.resources.cpu_limit`` = worker processes (2, as
     Spica's search benchmark; the upstream's own default is cores - 1).

   What the upstream cannot express is not silently dropped: it is listed in ``notes`` (no KV router and no
   planner: the upstream replays round-robin placement with static pools; Spica's ``quantization`` /
   ``kv_cache_dtype`` other than the defaults, host offload).
2. ``aisimulate recommend -c CFG --output-dir DIR --overwrite --format json`` runs in the AISimulate venv
   (``bench/.aisim-venv``, made by ``peer_aisim.ensure_aisim``; never installed from here) under a wall-clock
   timeout; ``wall_s`` is the subprocess wall time, start-up included, ``cpu_s`` the user + system CPU of the
   run and its worker processes (robust to other load), ``load_avg_1m`` the host's load before and after (a
   load above the core count means ``wall_s`` was contended). stdout/stderr are kept in ``workdir``.
3. ``DIR/recommendation.json`` (the upstream ``SweepResult``: every candidate record, ``counts``,
   ``views.top_n``) is parsed by ``parse_result``:

   - ``trials`` = suggestions = candidate records + ``counts.cache_hits`` (a duplicate suggestion is answered
     from the run-local cache and leaves no record), i.e. what the upstream's progress line calls
     "suggestions (cache hits included)" (that line is only printed with ``--format table``).
   - ``unique`` = distinct candidate configurations the upstream evaluated: records with status feasible,
     infeasible, failed or timed out (the upstream's own ``counts.evaluated``), deduplicated by their
     configuration (a timed-out candidate that is retried counts once). ``replayed`` = those that reached a
     replay (they carry a prediction config).
   - ``best`` = the first ``views.top_n`` record: deployment mode, backend, shape (``tp``, ``replicas``, ... or
     ``prefill_*`` / ``decode_*``), the batching knobs, ``used_gpus``, ``score`` and the upstream's metrics;
     ``best_ties`` = how many feasible candidates share that score (the first is the upstream's tie-break).
4. ``spica_config_for`` pins that candidate in a Spica config (mode, backend, ``parallel_configs``, batching
   knobs, round-robin routing, planner off), ready for ``spica evaluate``.

``error`` is None on success, else a short reason (no venv, a failed or timed-out run, no result file, no
feasible candidate); ``run_upstream`` never raises, so the benchmark can show the peer as unavailable.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
for _p in (str(BENCH), str(REPO)):
    if _p not in sys.path:
        sys.path.insert(0, _p)

import peer_aisim  # noqa: E402

EXHAUSTIVE_TRIALS = 100_000       # an upper bound, never reached: the random sampler stops when the grid is done
DEFAULT_PARALLELISM = 8           # candidates per round (Spica's search benchmark uses 8)
DEFAULT_CPU_LIMIT = min(2, os.cpu_count() or 1)   # upstream worker processes (Spica's search benchmark uses 2)
DEFAULT_TIMEOUT_S = 3600.0
CANDIDATE_TIMEOUT_S = 300         # per-candidate replay deadline, as Spica's search benchmark
TRACE_BLOCK = 512                 # tokens per Mooncake hash id (spica_core.config.trace.TRACE_BLOCK_SIZE)
ROLES = {"agg": "aggregated", "prefill": "prefill", "decode": "decode"}
MODES = {"agg": "aggregated", "disagg": "disaggregated"}
SHAPE_KEYS = {"replicas": "replicas", "tp": "tensor", "pp": "pipeline", "attention_dp": "attention_data",
              "moe_tp": "moe_tensor", "moe_ep": "moe_expert"}   # Spica / upstream-legacy name -> public name
KNOBS = ("max_num_batched_tokens", "max_num_seqs")
EVALUATED = ("feasible", "infeasible", "failed", "timed_out")
BEST_METRICS = ("goodput_output_throughput_tok_s", "goodput_request_throughput_rps", "goodput_completed_requests",
                "output_throughput_tok_s", "request_throughput_rps", "completed_requests", "num_requests",
                "mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms", "mean_itl_ms", "median_itl_ms", "p99_itl_ms",
                "mean_tpot_ms", "gpu_hours", "prefix_cache_reused_ratio")
SAMPLE_CONFIG_KEYS = ("deployment_mode", "backend", "backend_version", "used_gpus",
                      *SHAPE_KEYS, *(f"{r}_{n}" for r in ("prefill", "decode") for n in SHAPE_KEYS),
                      *(f"{r}_{k}" for r in ROLES for k in KNOBS))
SMALL_SPACE = {"model_name": "Qwen/Qwen3-32B", "hardware_sku": "h200_sxm", "gpu_budget": 8,
               "deployment_mode": ["agg"], "backend": ["vllm"], "agg_max_num_seqs": [256, 512, 1024],
               "agg_max_num_batched_tokens": [16384], "router_mode": ["round_robin"],
               "overlap_score_credit": [1.0], "prefill_load_scale": [1.0], "router_temperature": [0.0],
               "planner_scaling_policy": ["disabled"]}
SLA = {"ttft_ms": 1500, "itl_ms": 30}


# ---------------------------------------------------------------- config writing

def normalised_space(space: dict[str, Any]) -> dict[str, Any]:
    """The space with Spica's defaults filled in (Spica's own ``SearchSpace`` model)."""
    from spica_core.config.search_space import SearchSpace

    return SearchSpace.model_validate(space).model_dump(mode="json")


def _public_shape(shape: dict[str, Any]) -> dict[str, int]:
    return {public: int(shape.get(name) or 1) for name, public in SHAPE_KEYS.items()}


def _parallelism(ss: dict[str, Any], role: str, notes: list[str]) -> dict[str, Any]:
    pins = ss.get("parallel_configs") or []
    if not pins:
        return {"preset": "default"}
    if role == "agg":
        return {"preset": [_public_shape(p) for p in pins]}
    shapes = list({json.dumps(_public_shape(p[role]), sort_keys=True): _public_shape(p[role]) for p in pins}.values())
    if role == "prefill":
        pairs = {(json.dumps(p["prefill"], sort_keys=True), json.dumps(p["decode"], sort_keys=True)) for p in pins}
        n_p = len({a for a, _ in pairs})
        n_d = len({b for _, b in pairs})
        if len(pairs) != n_p * n_d:
            notes.append(f"parallel_configs: the upstream crosses {n_p} prefill x {n_d} decode shapes "
                         f"({n_p * n_d} pairs) where Spica pins {len(pairs)} pairs")
    return {"preset": shapes}


def _worker(ss: dict[str, Any], role: str, notes: list[str]) -> dict[str, Any]:
    return {"parallelism": _parallelism(ss, role, notes),
            "scheduler": {"max_batched_tokens": {"choices": list(ss[f"{role}_max_num_batched_tokens"])},
                          "max_sequences": {"choices": list(ss[f"{role}_max_num_seqs"])}},
            "kv_cache": {"block_size": ss[f"{role}_block_size"],
                         "prefix_caching": bool(ss[f"{role}_enable_prefix_caching"]),
                         "capacity": {"memory_fraction": ss[f"{role}_gpu_memory_utilization"]}}}


def _unmapped(ss: dict[str, Any]) -> list[str]:
    """What of Spica's space the upstream sweeper has no knob for (it is then not searched upstream)."""
    notes = []
    if "kv_router" in ss["router_mode"]:
        notes.append("router_mode: the upstream has no KV router (round-robin placement only); "
                     "Spica also searches kv_router")
    if ss["planner_scaling_policy"] != ["disabled"]:
        notes.append("planner_scaling_policy: the upstream has no planner (static pools); "
                     f"Spica searches {ss['planner_scaling_policy']}")
    if ss.get("quantization") is not None:
        notes.append(f"quantization {ss['quantization']}: not passed; the upstream uses the checkpoint's precision")
    if ss.get("kv_cache_dtype") not in (None, ["bf16"]):
        notes.append(f"kv_cache_dtype {ss['kv_cache_dtype']}: not passed; the upstream uses its default KV dtype")
    if ss.get("num_g2_blocks"):
        notes.append("num_g2_blocks: host offload is not passed")
    for name in ("min_endpoint", "startup_time", "aic_nextn", "prefill_hardware_sku", "decode_hardware_sku",
                 "gpu_inventory"):
        if ss.get(name) is not None:
            notes.append(f"{name}: not passed")
    if len(ss["hardware_sku"]) > 1:
        notes.append(f"hardware_sku {ss['hardware_sku']}: only the first is passed")
    return notes


def upstream_config(space: dict[str, Any], trace_path: str | Path, sla: dict[str, Any], budget: int | None,
                    algorithm: str = "bayesian", *, target: str = "goodput_per_gpu",
                    workload: dict[str, Any] | None = None, parallelism: int = DEFAULT_PARALLELISM,
                    cpu_limit: int = DEFAULT_CPU_LIMIT, seed: int = 1,
                    candidate_timeout_s: float = CANDIDATE_TIMEOUT_S) -> tuple[dict[str, Any], list[str]]:
    """The ``aisimulate recommend`` config for the search ``space`` describes, and the notes on what it drops.

    ``budget`` None is exhaustive (random sampling without replacement until the grid is done); otherwise
    ``algorithm`` (``bayesian`` or ``random``) with ``budget`` trials. ``workload`` may carry Spica's
    ``arrival_speedup_ratio`` or ``replay_concurrency`` for the trace.
    """
    if budget is not None and (isinstance(budget, bool) or not isinstance(budget, int) or budget < 1):
        raise ValueError(f"budget must be None (exhaustive) or a positive integer, got {budget!r}")
    if algorithm not in ("bayesian", "random"):
        raise ValueError(f"algorithm must be 'bayesian' or 'random' (the upstream's), got {algorithm!r}")
    ss = normalised_space(space)
    notes = _unmapped(ss)
    modes = list(ss["deployment_mode"])
    roles = (["agg"] if "agg" in modes else []) + (["prefill", "decode"] if "disagg" in modes else [])
    engine: dict[str, Any] = {
        "mode": {"choices": [MODES[m] for m in modes]},
        "model": ss["model_name"], "hardware": ss["hardware_sku"][0],
        "backend": {"choices": list(ss["backend"])},
        "context_length": ss.get("context_length") or "max",
        "workers": {ROLES[r]: _worker(ss, r, notes) for r in roles},
    }
    workload = workload or {}
    if workload.get("replay_concurrency") is not None:
        load: dict[str, Any] = {"type": "concurrency", "concurrency": int(workload["replay_concurrency"])}
    else:
        load = {"type": "trace_timestamps"}
        if workload.get("arrival_speedup_ratio", 1.0) != 1.0:
            load["speedup"] = float(workload["arrival_speedup_ratio"])
    constraints: dict[str, Any] = {"max_candidate_gpus": int(ss["gpu_budget"])}
    if ss.get("min_gpu_budget") is not None:
        constraints["min_candidate_gpus"] = int(ss["min_gpu_budget"])
    exhaustive = budget is None
    cfg = {
        "traffic": {"source": {"type": "trace", "paths": [str(Path(trace_path).resolve())], "format": "mooncake",
                               "block_size": TRACE_BLOCK},
                    "load": load},
        "engine": engine,
        "evaluation": {"sla": {k: v for k, v in sla.items() if v is not None}},
        "execution": {"resources": {"cpu_limit": int(cpu_limit)}},
        "optimization": {"target": target, "hardware": ss["hardware_sku"][0], "constraints": constraints},
        "optimizer": {"algorithm": "random" if exhaustive else algorithm,
                      "max_trials": EXHAUSTIVE_TRIALS if exhaustive else int(budget),
                      "parallelism": int(parallelism), "candidate_timeout_seconds": candidate_timeout_s,
                      "seed": int(seed)},
    }
    return cfg, notes


# ---------------------------------------------------------------- output parsing

def _key(config: dict[str, Any]) -> str:
    return json.dumps(config, sort_keys=True, default=str)


def best_candidate(record: dict[str, Any]) -> dict[str, Any]:
    """The deployment a candidate record describes (mode, backend, shape, batching knobs) and its scores."""
    c = record.get("config") or {}
    mode = c.get("deployment_mode")
    best: dict[str, Any] = {"candidate_id": record.get("candidate_id"), "deployment_mode": mode,
                            "backend": c.get("backend"), "backend_version": c.get("backend_version"),
                            "used_gpus": record.get("used_gpus"), "score": record.get("score")}
    roles = ("agg",) if mode == "agg" else ("prefill", "decode")
    for role in roles:
        prefix = "" if role == "agg" else f"{role}_"
        for name in SHAPE_KEYS:
            if c.get(f"{prefix}{name}") is not None:
                best[f"{prefix}{name}"] = c[f"{prefix}{name}"]
        for knob in KNOBS:
            if c.get(f"{role}_{knob}") is not None:
                best[f"{role}_{knob}"] = c[f"{role}_{knob}"]
    metrics = record.get("metrics") or {}
    best["metrics"] = {k: metrics[k] for k in BEST_METRICS if k in metrics}
    return best


def parse_result(doc: dict[str, Any]) -> dict[str, Any]:
    """Trials, unique evaluations and the best candidate of an upstream ``recommendation.json`` document."""
    records = doc.get("candidates") or []
    counts = doc.get("counts") or {}
    if doc.get("candidate_retention", "all") != "all":
        raise ValueError(f"recommendation.json keeps only {doc.get('candidate_retention')!r} candidates; "
                         "trials and unique evaluations need all of them")
    evaluated = [r for r in records if r.get("status") in EVALUATED]
    out: dict[str, Any] = {
        "trials": len(records) + int(counts.get("cache_hits", 0)),
        "unique": len({_key(r.get("config") or {}) for r in evaluated}),
        "replayed": len({_key(r.get("config") or {}) for r in evaluated if r.get("prediction_config")}),
        "feasible": sum(r.get("status") == "feasible" for r in records),
        "counts": counts,
        "strategy": (doc.get("provenance") or {}).get("search_strategy"),
        "statuses": {},
        "best": None,
    }
    for r in records:
        out["statuses"][r.get("status")] = out["statuses"].get(r.get("status"), 0) + 1
    top = ((doc.get("views") or {}).get("top_n") or [])
    if top:
        by_id = {r.get("candidate_id"): r for r in records}
        out["best"] = best_candidate(by_id[top[0]])
        score = out["best"]["score"]
        # Candidates that tie the best score (the upstream's ranking among them is its own tie-break).
        out["best_ties"] = sum(r.get("status") == "feasible" and r.get("score") is not None
                               and math.isclose(r["score"], score, rel_tol=1e-9) for r in records)
    return out


def trim_result(doc: dict[str, Any]) -> dict[str, Any]:
    """A small copy of a ``recommendation.json`` with what :func:`parse_result` reads (test fixtures)."""
    def record(r: dict[str, Any]) -> dict[str, Any]:
        pc = r.get("prediction_config")
        return {"candidate_id": r.get("candidate_id"), "status": r.get("status"), "used_gpus": r.get("used_gpus"),
                "score": r.get("score"), "reason_category": r.get("reason_category"), "reason": r.get("reason"),
                "config": {k: v for k, v in (r.get("config") or {}).items() if k in SAMPLE_CONFIG_KEYS},
                "prediction_config": None if not pc else {"engine": {"mode": pc["engine"]["mode"]}},
                "metrics": {k: v for k, v in (r.get("metrics") or {}).items() if k in BEST_METRICS}}

    return {"schema_version": doc.get("schema_version"), "candidate_retention": doc.get("candidate_retention"),
            "counts": doc.get("counts"), "views": doc.get("views"),
            "provenance": {"search_strategy": (doc.get("provenance") or {}).get("search_strategy"),
                           "implementation_version": (doc.get("provenance") or {}).get("implementation_version")},
            "candidates": [record(r) for r in doc.get("candidates") or []]}


# ---------------------------------------------------------------- running

def aisim_bin(venv: Path = peer_aisim.AISIM_VENV) -> tuple[Path | None, str | None]:
    """The venv's ``aisimulate`` executable, or None and what is missing."""
    exe = venv / "bin" / "aisimulate"
    if not (venv / "bin" / "python").exists():
        return None, (f"AISimulate venv missing: {venv} (create it with peer_aisim.ensure_aisim(), or run "
                      f"bench/peer_sweeper.py --install)")
    if peer_aisim.installed_aisim(venv) is None:
        return None, f"{venv} has no aisimulate=={peer_aisim.AISIM_VERSION} (peer_aisim.ensure_aisim() installs it)"
    if not exe.exists():
        return None, f"{exe} missing although aisimulate is installed in {venv}"
    return exe, None


def _tail(text: str, n: int = 600) -> str:
    return " ".join((text or "").split())[-n:]


def run_upstream(space: dict, trace_path: Path, sla: dict, budget: int | None, algorithm: str, workdir: Path,
                 *, timeout_s: float = DEFAULT_TIMEOUT_S, venv: Path = peer_aisim.AISIM_VENV,
                 **config_kw: Any) -> dict:
    """Run the upstream sweeper on ``space`` (see the module docstring); never raises.

    Returns ``{"wall_s", "trials", "unique", "best", "command", "error", ...}`` plus ``replayed``,
    ``feasible``, ``counts``, ``notes`` (what the upstream config could not express), ``config_path`` and
    ``output_dir``. ``config_kw`` goes to :func:`upstream_config` (``target``, ``workload``, ``parallelism``,
    ``cpu_limit``, ``seed``, ``candidate_timeout_s``).
    """
    workdir = Path(workdir).resolve()   # the command runs with cwd=workdir
    out: dict[str, Any] = {"wall_s": None, "trials": None, "unique": None, "best": None, "command": [],
                           "error": None, "notes": [], "aisimulate": peer_aisim.AISIM_VERSION}
    try:
        cfg, notes = upstream_config(space, trace_path, sla, budget, algorithm, **config_kw)
    except Exception as exc:  # noqa: BLE001 - a space the upstream config cannot be written for is the answer
        out["error"] = f"cannot write the upstream config: {type(exc).__name__}: {_tail(str(exc), 400)}"
        return out
    out["notes"] = notes
    workdir.mkdir(parents=True, exist_ok=True)
    cfg_path = workdir / "aisimulate-recommend.yaml"
    cfg_path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    result_dir = workdir / "aisimulate-out"
    out.update(config_path=str(cfg_path), output_dir=str(result_dir))
    exe, missing = aisim_bin(venv)
    cmd = [str(exe or venv / "bin" / "aisimulate"), "recommend", "-c", str(cfg_path), "--output-dir",
           str(result_dir), "--overwrite", "--format", "json"]
    out["command"] = cmd
    if missing:
        out["error"] = missing
        return out
    result_file = result_dir / "recommendation.json"
    if result_file.exists():
        result_file.unlink()
    out["load_avg_1m"] = [round(os.getloadavg()[0], 2)]
    cpu0 = _children_cpu_s()
    started = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, cwd=workdir)
    except subprocess.TimeoutExpired as exc:
        out["wall_s"] = time.perf_counter() - started
        (workdir / "aisimulate.stderr").write_text(_text(exc.stderr))
        out["error"] = f"timeout after {timeout_s:.0f} s"
        return out
    out["wall_s"] = time.perf_counter() - started
    out["load_avg_1m"].append(round(os.getloadavg()[0], 2))   # host load before/after: wall_s is contended if > cores
    out["cpu_s"] = round(_children_cpu_s() - cpu0, 2)           # user+sys of the run and its worker processes
    (workdir / "aisimulate.stdout").write_text(proc.stdout)
    (workdir / "aisimulate.stderr").write_text(proc.stderr)
    if proc.returncode != 0:
        out["error"] = f"aisimulate recommend exited {proc.returncode}: {_tail(proc.stderr or proc.stdout)}"
        return out
    if not result_file.is_file():
        out["error"] = f"aisimulate recommend wrote no {result_file}"
        return out
    try:
        out.update(parse_result(json.loads(result_file.read_text())))
    except (ValueError, KeyError, TypeError) as exc:
        out["error"] = f"cannot read {result_file}: {type(exc).__name__}: {_tail(str(exc), 400)}"
        return out
    if out["best"] is None:
        out["error"] = "the upstream sweeper found no feasible candidate"
    return out


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else (value or "")


# ---------------------------------------------------------------- re-scoring in Spica

def spica_config_for(best: dict, base_config: dict) -> dict:
    """``base_config`` (a Spica config dict) with its search space pinned to the upstream's ``best``.

    Pins the deployment mode, backend, the parallel shape (``parallel_configs``: ``[{"tp", "replicas", ...}]``
    for agg, ``[{"prefill": {...}, "decode": {...}}]`` for disagg) and the batching knobs the candidate
    carries, plus what the upstream replayed it with: ``router_mode: [round_robin]``,
    ``planner_scaling_policy: [disabled]``, and, where ``base_config`` searches them, the checkpoint's
    precision (``quantization`` unset) and a ``bf16`` KV cache. Workload, goal and sweep stay as
    ``base_config`` has them. The upstream's ``backend_version`` has no Spica knob and is not pinned.
    """
    mode = best.get("deployment_mode")
    if mode not in MODES:
        raise ValueError(f"upstream best has no agg/disagg deployment_mode: {mode!r}")
    cfg = json.loads(json.dumps(base_config))
    ss = cfg.setdefault("search_space", {})
    ss["deployment_mode"] = [mode]
    if best.get("backend"):
        ss["backend"] = [best["backend"]]

    def shape(prefix: str) -> dict[str, int]:
        if best.get(f"{prefix}tp") is None:
            raise ValueError(f"upstream best has no {prefix}tp")
        return {name: int(best[f"{prefix}{name}"]) for name in SHAPE_KEYS if best.get(f"{prefix}{name}") is not None}

    if mode == "agg":
        ss["parallel_configs"] = [shape("")]
        roles = ("agg",)
    else:
        ss["parallel_configs"] = [{"prefill": shape("prefill_"), "decode": shape("decode_")}]
        roles = ("prefill", "decode")
    for role in roles:
        for knob in KNOBS:
            value = best.get(f"{role}_{knob}")
            if value is not None:
                ss[f"{role}_{knob}"] = [int(value)]
    ss["router_mode"] = ["round_robin"]          # the upstream has no KV router
    ss["planner_scaling_policy"] = ["disabled"]  # and no planner
    if isinstance(ss.get("quantization"), list) and len(ss["quantization"]) > 1:
        ss.pop("quantization")
    if isinstance(ss.get("kv_cache_dtype"), list) and len(ss["kv_cache_dtype"]) > 1:
        ss["kv_cache_dtype"] = ["bf16"]
    return cfg


# ---------------------------------------------------------------- CLI

def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = ap.add_mutually_exclusive_group(required=True)
    group.add_argument("--small", action="store_true", help="the benchmark: the search benchmark's 45-candidate "
                       "agg space on a generated 400-request shared-prefix trace, exhaustive and Bayesian at --budget "
                       "(default 24), each best re-scored by Spica; writes bench/results/peer_sweeper.json")
    group.add_argument("--space", type=Path, help="a JSON file with a Spica search_space")
    group.add_argument("--install", action="store_true", help="create the AISimulate venv and exit")
    ap.add_argument("--trace", type=Path, help="the Mooncake trace (with --space)")
    ap.add_argument("--budget", type=int, default=None, help="trials (default: exhaustive)")
    ap.add_argument("--algorithm", default="bayesian", choices=("bayesian", "random"))
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S)
    args = ap.parse_args(argv)
    if args.install:
        try:
            print(peer_aisim.ensure_aisim())
        except peer_aisim.PeerError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        return 0
    workdir = args.workdir or (REPO / "bench" / "traces" / "peer_sweeper"
                               / ("exhaustive" if args.budget is None else f"{args.algorithm}{args.budget}"))
    if args.small:
        return small_benchmark(args.budget or 24, args.workdir, args.timeout)
    if args.trace is None:
        ap.error("--space needs --trace")
    space, trace = json.loads(args.space.read_text()), args.trace
    result = run_upstream(space, trace, SLA, args.budget, args.algorithm, workdir, timeout_s=args.timeout)
    print(json.dumps(result, indent=1, default=str))
    return 0 if result["error"] is None else 1


# ---------------------------------------------------------------- the benchmark

RESULTS = REPO / "bench" / "results" / "peer_sweeper.json"


def rescore(best: dict, base_config: dict, workdir: Path) -> dict:
    """``spica evaluate --json`` on ``base_config`` pinned to the upstream's ``best``: Spica's own outcome."""
    path = workdir / "rescore.yaml"
    path.write_text(yaml.safe_dump(spica_config_for(best, base_config), sort_keys=False))
    proc = subprocess.run([str(REPO / ".venv" / "bin" / "spica"), "evaluate", "--json", str(path)], cwd=REPO,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        return {"error": f"spica evaluate exited {proc.returncode}: {_tail(proc.stderr or proc.stdout)}"}
    return json.loads(proc.stdout)


def _same_candidate(a: dict | None, b: dict | None) -> bool:
    return bool(a and b) and all(a.get(k) == b.get(k) for k in SAMPLE_CONFIG_KEYS)


def small_benchmark(budget: int, workdir: Path | None, timeout_s: float) -> int:
    """Exhaustive and Bayesian at ``budget`` on SMALL_SPACE, each best re-scored by Spica; writes RESULTS."""
    from examples.make_traces import write_poisson_trace
    from results_doc import provenance, write_results

    trace = write_poisson_trace(REPO / "bench" / "traces" / "peer_sweeper_small.jsonl", num_requests=400,
                                rate_rps=16.0, isl=3000, osl=300, prefix_groups=24, prefix_blocks=8, seed=7)
    base = {"search_space": SMALL_SPACE, "workload": {"trace_path": str(trace)},
            "goal": {"target": "goodput_per_gpu", "sla": SLA}, "sweep": {"max_eval_seconds": CANDIDATE_TIMEOUT_S}}
    root = workdir or (REPO / "bench" / "traces" / "peer_sweeper")
    out: dict[str, Any] = {
        **provenance("PYTHONPATH=. .venv/bin/python bench/peer_sweeper.py --small"
                     + ("" if budget == 24 else f" --budget {budget}")),
        "space": f"Qwen3-32B agg, 8 x h200_sxm, vLLM, 45 candidates (bench_search.SMALL_SPACE), 400-request "
                 f"shared-prefix trace, SLA {SLA['ttft_ms']}/{SLA['itl_ms']} ms; upstream with {DEFAULT_CPU_LIMIT} "
                 f"workers, {DEFAULT_PARALLELISM} per round"}
    for name, trials in (("exhaustive", None), (f"bayesian_{budget}", budget)):
        out[name] = run_upstream(SMALL_SPACE, trace, SLA, trials, "bayesian", root / name, timeout_s=timeout_s)
        print(f"[{name}] {json.dumps({k: out[name].get(k) for k in ('wall_s', 'trials', 'unique', 'error')})}",
              flush=True)
    if all(out[k].get("error") for k in ("exhaustive", f"bayesian_{budget}")):  # keep the last results
        print(f"every upstream run failed; {RESULTS} left as it was", file=sys.stderr)
        return 1
    exhaustive, bayesian = out["exhaustive"].get("best"), out[f"bayesian_{budget}"].get("best")
    if exhaustive:
        out["rescored_best_by_spica"] = rescore(exhaustive, base, root / "exhaustive")
    if bayesian and not _same_candidate(exhaustive, bayesian):
        out["rescored_bayesian_best_by_spica"] = rescore(bayesian, base, root / f"bayesian_{budget}")
    doc = write_results(RESULTS, out)
    write_docs(doc)
    print(f"wrote {RESULTS} and the peer_sweeper block of docs/benchmarks.md")
    return 0 if all(out[k].get("error") is None for k in ("exhaustive", f"bayesian_{budget}")) else 1


def write_docs(doc: dict) -> None:
    """The ``peer_sweeper`` block of docs/benchmarks.md from peer_sweeper.json."""
    from results_doc import headline, write_section

    def best(r: dict) -> str:
        b = r.get("best") or {}
        shape = f"{b.get('replicas', '?')} × TP{b.get('tp', '?')}" if b.get("deployment_mode") == "agg" else "disagg"
        return (f"{shape}, max_num_seqs {b.get('agg_max_num_seqs', '–')} (the upstream's score "
                f"{b.get('score', float('nan')):.1f})")

    lines = [f"{headline(doc)}. {doc['space']}.", ""]
    for name in (k for k in doc if k == "exhaustive" or k.startswith("bayesian_")):
        r = doc[name]
        if r.get("error"):
            lines.append(f"- {name}: unavailable ({r['error']}).")
            continue
        lines.append(f"- {name.replace('_', ' at ')}: **{r['wall_s']:.0f} s** wall ({r.get('cpu_s', float('nan')):.0f} "
                     f"s CPU) for {r['unique']} unique of {r['trials']} trials; best {best(r)}.")
    runs = [doc[k] for k in doc if k.startswith("bayesian_")]
    same = bool(runs) and _same_candidate(doc.get("exhaustive", {}).get("best"), runs[0].get("best"))
    for key, what in (("rescored_best_by_spica", "the exhaustive run's best" + (", also Bayesian's," if same else "")),
                      ("rescored_bayesian_best_by_spica", "Bayesian's best")):
        if isinstance(doc.get(key), dict) and doc[key].get("score") is not None:
            lines.append(f"- {what[0].upper() + what[1:]} re-scored by Spica's evaluator: **{doc[key]['score']:.1f}** "
                         f"tok/s/GPU goodput ({doc[key].get('status')}).")
    write_section("peer_sweeper", "Peer: the upstream sweeper (`bench/peer_sweeper.py`)", lines)


if __name__ == "__main__":
    sys.exit(main())

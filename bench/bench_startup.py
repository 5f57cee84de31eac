"""Start-up benchmark: seconds from ``spica sweep`` to the first replay, and where they go (issue 21, item 4).

    .venv/bin/python bench/bench_startup.py                       # ~1.5 min: 1 warm-up sweep, then 3 measured ones
    .venv/bin/python bench/bench_startup.py --runs 5 --full       # measured sweeps run to the end too
    .venv/bin/python bench/bench_startup.py --baseline REF        # also a commit, its runs interleaved with these

Overwrites ``bench/results/startup.json`` and the ``startup`` block of ``docs/benchmarks.md`` (``--config``
other than the quick start, or ``--tree``: prints only, writes nothing). The JSON: ``first_replay_s`` (per
measured run, and their median) and ``breakdown`` (the median of each stage over the measured runs), plus
``cli`` (``spica --help`` wall time and the ``python -X importtime -c "import spica_cli.main"`` total).
Progress lines go to stderr. A run that finishes
(``--full``) also gives ``search``: its search stage's wall, Σ replay and share outside replays
(:func:`search_share`; ``bench_search.py --cli`` runs the dense and MoE sweeps this way).

What is measured. Each run is ``.venv/bin/spica sweep CONFIG --run-dir <fresh temp dir>`` in a subprocess.
"Command start" is the moment just before this script starts that subprocess; "first replay" is the
moment a worker process *enters* ``dynamo._core.run_mocker_synthetic_trace_replay`` (or
``run_mocker_trace_replay``) for the first time: the replay itself has started, everything before it
(imports, Prefect, the stages, the optimizer's first ask, the worker's start-up and the candidate's
engine arguments) is start-up. Wall-clock times (``time.time()``), so the marks of different
processes line up.

How it is observed without touching Spica's code: ``PYTHONPATH`` gets a temporary folder holding a
``sitecustomize.py`` that calls :func:`install_probe` in every Python process the sweep starts (the
CLI, its spawned evaluation workers, Prefect's temporary server). The probe appends one JSON line per
event to ``$SPICA_STARTUP_MARKS``: when chosen modules start and finish importing, and when chosen
functions are entered and left (wrapped after their module is imported). Nothing is patched when the
variable is unset.

"Warm" means the caches an earlier run fills: the run first does one full sweep (into its own temp
run folder) with the same ``PREFECT_HOME`` (a fresh temp folder, so the temporary server's database
already exists), AIC profile cache (``SPICA_CACHE_DIR``, default ``~/.cache/spica/profiles``) and jax
compile cache. Measured runs are stopped (SIGINT to their process group, as a terminal's Ctrl-C) once the
first replay has started, unless ``--full``; ``stop_s`` is the time from that signal until the command exited.

Usable from ``bench/bench_search.py``: ``from bench_startup import measure_startup``.
"""
from __future__ import annotations

import argparse
import collections
import functools
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
SPICA = ROOT / ".venv" / "bin" / "spica"
PYTHON = ROOT / ".venv" / "bin" / "python"
MARKS_ENV = "SPICA_STARTUP_MARKS"

# ------------------------------------------------------------------ the probe (runs inside the sweep's processes)

# Modules whose import is timed (start = first asked for, end = executed), and wrappers installed once a module
# has been imported: module -> [(attribute path, mark name)]. Wrapped functions mark "<name>:start"/"<name>:end".
_TIMED_IMPORTS = ("spica_cli.main", "spica_cli.sweep", "flows.sweep", "prefect", "pyarrow", "pandas",
                  "aiconfigurator_core", "jax", "vizier", "dynamo._core", "spica_core.evaluate.replay",
                  "spica_core.planner", "spica_core.evaluate.pool", "prefect.server.api.server")
_WRAP: dict[str, list[tuple[str, str]]] = {
    "spica_cli.main": [("cmd_sweep", "cmd_sweep")],
    "spica_cli.sweep": [("sweep_command", "sweep_command"), ("_warm_up", "warm_up")],
    "spica_core.run.identity": [("locate", "locate")],
    # (a missing one is skipped: older trees ran the flow in the CLI process itself)
    "spica_cli.supervisor": [("configured_api", "configured_api"), ("wait_for_api", "wait_for_api")],
    "flows.sweep": [("validate_config", "validate"), ("make_evaluator", "make_evaluator"),
                    ("enumerate_branches_task", "enumerate_branches"), ("kv_filter_task", "kv_filter"),
                    ("load_predictor_task", "load_predictor"), ("stored_trials", "stored_trials"),
                    ("round_task", "round_task"), ("branch_task", "branch_task"), ("search_task", "search_task"),
                    ("rank_task", "rank")],
    "prefect.flows": [("Flow.__call__", "flow_call")],
    "spica_core.search.study": [("_runtime", "vizier_runtime"), ("trace_gp", "trace_gp")],
    "spica_core.search.jax_setup": [("_runtime", "vizier_runtime")],
    "spica_core.search.gp_warm_up": [("trace_gp", "trace_gp")],
    "spica_core.search.rounds": [("_RunningAsk.run", "ask")],
    "spica_core.evaluate.pool": [("_worker_main", "worker_main"), ("evaluate_in_worker", "evaluate_in_worker"),
                                 ("EvalPool.start", "pool_start"),
                                 ("EvalPool.evaluate_batch", "first_request_to_evaluator"),
                                 ("EvalPool.submit", "first_request_to_evaluator"),
                                 ("SequentialEvaluator.evaluate_batch", "first_request_to_evaluator"),
                                 ("SequentialEvaluator.submit", "first_request_to_evaluator")],
    "spica_core.evaluate.evaluation": [("evaluate_one", "evaluate_one")],
    "dynamo._core": [("run_mocker_synthetic_trace_replay", "replay"), ("run_mocker_trace_replay", "replay")],
}


def _mark(name: str, **extra: Any) -> None:
    path = os.environ.get(MARKS_ENV)
    if not path:
        return
    line = json.dumps({"t": time.time(), "pid": os.getpid(), "name": name, **extra}) + "\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())  # one small O_APPEND write: lines of concurrent processes never interleave
    finally:
        os.close(fd)


def _wrapped(fn: Callable[..., Any], name: str) -> Callable[..., Any]:
    @functools.wraps(fn)  # same __module__ / __qualname__: pickling by reference (spawn's target) still works
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if name == "flow_call" and getattr(args[0], "name", None) != "spica-sweep":
            return fn(*args, **kwargs)
        _mark(f"{name}:start")
        try:
            return fn(*args, **kwargs)
        finally:
            _mark(f"{name}:end")

    if name == "worker_main":  # also mark the "ready" message the worker sends once its imports are done
        @functools.wraps(fn)
        def worker_wrapper(conn: Any, *args: Any, **kwargs: Any) -> Any:
            _mark("worker_main:start")
            send = conn.send

            def send_marked(obj: Any) -> None:
                if isinstance(obj, tuple) and obj and obj[0] == "ready":
                    _mark("worker_ready")
                send(obj)

            conn.send = send_marked
            return fn(conn, *args, **kwargs)
        return worker_wrapper
    return wrapper


def _patch(module: Any) -> None:
    for attr_path, name in _WRAP.get(module.__name__, ()):
        owner, *rest = attr_path.split(".")
        holder = getattr(module, owner, None) if rest else module
        attr = rest[0] if rest else owner
        if holder is None or not hasattr(holder, attr):
            continue  # not in this version of the module
        setattr(holder, attr, _wrapped(getattr(holder, attr), name))


class _Loader:
    def __init__(self, loader: Any, name: str):
        self._loader, self._name = loader, name

    def __getattr__(self, item: str) -> Any:
        return getattr(self._loader, item)

    def create_module(self, spec: Any) -> Any:
        return self._loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        self._loader.exec_module(module)
        if self._name in _TIMED_IMPORTS:
            _mark(f"import {self._name}:end")
        _patch(module)


class _Finder:
    """A meta-path finder in front of the others: marks watched imports and wraps watched modules' functions."""

    _busy: set[str] = set()

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if (name not in _TIMED_IMPORTS and name not in _WRAP) or name in self._busy:
            return None
        self._busy.add(name)
        try:
            for finder in sys.meta_path:
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(name, path, target)
                if spec is not None:
                    break
            else:
                return None
        finally:
            self._busy.discard(name)
        if spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        if name in _TIMED_IMPORTS:
            _mark(f"import {name}:start")
        spec.loader = _Loader(spec.loader, name)
        return spec


def install_probe() -> None:
    """Called by the temporary sitecustomize.py in every process of the measured sweep."""
    if not os.environ.get(MARKS_ENV):
        return
    _mark("python_started", argv=sys.argv[:3])
    sys.meta_path.insert(0, _Finder())


_SITECUSTOMIZE = """\
import sys
sys.path.insert(0, {bench!r})
try:
    from bench_startup import install_probe
    install_probe()
finally:
    sys.path.remove({bench!r})
"""

# ------------------------------------------------------------------ the measurement (this process)


def _read_marks(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:  # a line being written
            pass
    return out


def _first(marks: list[dict[str, Any]], name: str) -> float | None:
    for m in marks:
        if m["name"] == name:
            return float(m["t"])
    return None


def breakdown(marks: list[dict[str, Any]], t0: float, main_pid: int) -> dict[str, Any]:
    """Seconds per start-up stage, from the marks of one run (``t0``: the command's start, wall clock).

    Stages are intervals between marks of the CLI process (``main_pid``, the supervisor), of the process that
    calls the flow (its child; the CLI process itself in older trees), of the worker that ran the first replay,
    or (jax and Vizier) of the process the studies live in; a stage
    whose marks are missing (not reached, or not in this version of the code) is ``None``. ``at`` gives every
    mark's offset from t0 (CLI process and that worker), so the gaps between stages (Prefect's own work) show.
    """
    cli = [m for m in marks if m["pid"] == main_pid]
    flow_pid = next((m["pid"] for m in marks if m["name"] == "flow_call:start"), main_pid)
    main = [m for m in marks if m["pid"] == flow_pid]
    worker_pids = {m["pid"] for m in marks if m["name"] == "worker_main:start"}
    replay_pid = next((m["pid"] for m in marks if m["name"] == "replay:start" and m["pid"] != main_pid), None)
    if replay_pid is None:  # parallel_evals: 1 replays in the CLI process
        replay_pid = next((m["pid"] for m in marks if m["name"] == "replay:start"), None)
    worker = [m for m in marks if m["pid"] == replay_pid]
    # jax, Vizier and the tracing: in the optimizer process (the CLI process's before it existed; no worker's)
    optimizer = [m for m in marks if m["name"].startswith(("vizier_runtime", "trace_gp"))]

    def at(ms: list[dict[str, Any]], name: str) -> float | None:
        t = _first(ms, name)
        return None if t is None else round(t - t0, 3)

    def span(ms: list[dict[str, Any]], start: str, end: str) -> float | None:
        a, b = _first(ms, start), _first(ms, end)
        return None if a is None or b is None else round(b - a, 3)

    stages = {
        "interpreter_start": at(cli, "python_started"),
        "cli_import": span(cli, "python_started", "import spica_cli.main:end"),
        "cli_reads_prefect_settings": span(cli, "configured_api:start", "configured_api:end"),
        "flow_process_started": None if flow_pid == main_pid else at(main, "python_started"),
        "import_spica_cli_sweep": span(main, "import spica_cli.sweep:start", "import spica_cli.sweep:end"),
        "locate_config_trace_identity": span(main, "locate:start", "locate:end"),
        "import_flows_sweep": span(main, "import flows.sweep:start", "import flows.sweep:end"),
        "import_prefect": span(main, "import prefect:start", "import prefect:end"),
        "warm_up_imports": span(main, "warm_up:start", "warm_up:end"),
        "wait_for_api_server": span(main, "wait_for_api:start", "wait_for_api:end"),
        "flow_call_to_validate": span(main, "flow_call:start", "validate:start"),
        "validate_stage": span(main, "validate:start", "validate:end"),
        "enumerate_branches_stage": span(main, "enumerate_branches:start", "enumerate_branches:end"),
        "kv_filter_stage": span(main, "kv_filter:start", "kv_filter:end"),
        "load_predictor_stage": span(main, "load_predictor:start", "load_predictor:end"),
        "first_round_to_first_request": (span(main, "round_task:start", "first_request_to_evaluator:start")
                                         or span(main, "branch_task:start", "first_request_to_evaluator:start")
                                         or span(main, "search_task:start", "first_request_to_evaluator:start")),
        "vizier_runtime_import": span(optimizer, "vizier_runtime:start", "vizier_runtime:end"),
        "pool_start_spawn_to_ready": span(main, "pool_start:start", "pool_start:end"),
        "worker_python_to_ready": (None if replay_pid == main_pid else
                                   span(worker, "python_started", "worker_ready")),
        "worker_import_dynamo_core": span(worker, "import dynamo._core:start", "import dynamo._core:end"),
        "first_request_to_replay": span(worker, "evaluate_one:start", "replay:start"),
        "trace_gp": span(optimizer, "trace_gp:start", "trace_gp:end"),  # a rapid DEFAULT sweep's
    }
    milestones = {
        "flow_called": at(main, "flow_call:start"),
        "first_request_to_evaluator": at(main, "first_request_to_evaluator:start"),
        "worker_ready": at(worker, "worker_ready"),
        "first_replay": at(worker, "replay:start"),
        "trace_gp_done": at(optimizer, "trace_gp:end"),
    }
    offsets: dict[str, float] = {}
    for m in cli + main + worker:
        key = f"{'cli' if m['pid'] == main_pid else 'flow' if m['pid'] == flow_pid else 'worker'} {m['name']}"
        offsets.setdefault(key, round(m["t"] - t0, 3))
    return {"first_replay_s": milestones["first_replay"], "stages": stages, "milestones": milestones,
            "workers_started": len(worker_pids), "at": dict(sorted(offsets.items(), key=lambda kv: kv[1]))}


def search_share(marks: list[dict[str, Any]], main_pid: int, run_dir: Path) -> dict[str, Any] | None:
    """The search stage of a finished ``spica sweep``, split as bench_search.py splits its in-process sweeps:
    wall from the search task's start to its end (CLI process marks), summed replay seconds and evaluations from
    the run's ``trials.parquet``, and the share of that wall outside replays, 1 − (Σ replay ÷ workers) ÷ wall,
    with ``workers`` the distinct worker processes that replayed."""
    cli = [m for m in marks if m["pid"] == main_pid]
    flow_pid = next((m["pid"] for m in marks if m["name"] == "flow_call:start"), main_pid)
    main = [m for m in marks if m["pid"] == flow_pid]
    start, end = _first(main, "search_task:start"), _first(main, "search_task:end")
    trials = run_dir / "trials.parquet"
    if start is None or end is None or not trials.exists():
        return None
    import pyarrow.parquet as pq

    table = pq.read_table(trials, columns=["replay_seconds", "cache_hit", "suggested_by"]).to_pylist()
    workers = len({m["pid"] for m in marks if m["name"] == "replay:start" and m["pid"] != main_pid}) or 1
    replay = sum(r["replay_seconds"] or 0.0 for r in table)
    wall = end - start
    traced = _first(marks, "trace_gp:end")  # in the optimizer process (before: the CLI's)
    return {"evaluations": len(table), "cache_hits": sum(bool(r["cache_hit"]) for r in table), "workers": workers,
            "wall_s": round(wall, 3), "replay_s": round(replay, 3),
            "outside_replay_ratio": round(1 - replay / workers / wall, 4),
            "methods": dict(collections.Counter(r["suggested_by"] for r in table)),
            "trace_gp_done_after_search_start_s": None if traced is None else round(traced - start, 3)}


def _tree_env(base: dict[str, str], tree: Path) -> dict[str, str]:
    """``base`` with ``tree``'s code first on the path (when it is not this checkout, which the venv installs)."""
    paths = ([str(tree)] if tree.resolve() != ROOT else []) + [base.get("PYTHONPATH", "")]
    return {**base, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}


def _probe_env(tmp: Path, base: dict[str, str], tree: Path) -> dict[str, str]:
    """:func:`_tree_env` plus the probe's sitecustomize, first on the path."""
    site = tmp / "site"
    site.mkdir(parents=True, exist_ok=True)
    (site / "sitecustomize.py").write_text(_SITECUSTOMIZE.format(bench=str(Path(__file__).resolve().parent)))
    env = _tree_env(base, tree)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(site), env["PYTHONPATH"]) if p)
    return env


def run_once(config: str, env: dict[str, str], tmp: Path, label: str, stop_at_replay: bool = True,
             timeout: float = 600.0, tree: Path = ROOT) -> dict[str, Any]:
    """One ``spica sweep CONFIG --run-dir <fresh dir>`` (the ``spica`` script, on ``tree``'s code); its
    first-replay time and breakdown. Stopped by SIGINT to its process group once the first replay started."""
    marks = tmp / f"marks-{label}.jsonl"
    run_dir = tmp / f"run-{label}"
    env = {**env, MARKS_ENV: str(marks)}
    t0 = time.time()
    proc = subprocess.Popen([str(SPICA), "sweep", config, "--run-dir", str(run_dir)], cwd=tree, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + timeout
    stopped_at: float | None = None
    while proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
        if stop_at_replay and stopped_at is None and _first(_read_marks(marks), "replay:start") is not None:
            os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C sends
            stopped_at = time.monotonic()
    ended_at = time.monotonic()
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
    _out, err = proc.communicate()
    wall = time.time() - t0
    stopped = stopped_at is not None
    read = _read_marks(marks)
    result = breakdown(read, t0, proc.pid)
    result.update(exit_code=proc.returncode, wall_s=round(wall, 3), stopped_at_first_replay=stopped,
                  stop_s=round(ended_at - stopped_at, 3) if stopped_at is not None else None)
    if not stopped:
        result["search"] = search_share(read, proc.pid, run_dir)
    if proc.returncode not in (0, 1) and not stopped:
        result["stderr_tail"] = err.splitlines()[-5:]
    print(f"[startup] {tree.name} {label}: first replay at {result['first_replay_s']} s, exit {proc.returncode}, "
          f"wall {wall:.1f} s", file=sys.stderr, flush=True)
    return result


def cli_times(env: dict[str, str], tree: Path = ROOT, config: str = "examples/quickstart.yaml") -> dict[str, float]:
    """Wall seconds of ``spica --help`` and ``spica validate CONFIG``, and the importtime total of
    ``import spica_cli.main``."""
    def wall(*args: str) -> float:
        t = time.perf_counter()
        subprocess.run([str(SPICA), *args], cwd=tree, env=env, capture_output=True, check=True)
        return round(time.perf_counter() - t, 3)

    proc = subprocess.run([str(PYTHON), "-X", "importtime", "-c", "import spica_cli.main"], cwd=tree, env=env,
                          capture_output=True, text=True, check=True)
    total_us = 0
    for line in proc.stderr.splitlines():
        parts = line.split("|")
        if len(parts) == 3 and parts[2].strip() == "spica_cli.main":
            total_us = int(parts[1])
    return {"spica_help_s": min(wall("--help") for _ in range(3)),
            "spica_validate_s": min(wall("validate", config) for _ in range(3)),
            "import_spica_cli_main_s": round(total_us / 1e6, 3)}


def _median(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return round(statistics.median(present), 3) if present else None


def _summary(measured: list[dict[str, Any]]) -> dict[str, Any]:
    names = measured[0]["stages"] if measured else {}
    return {"first_replay_s": _median([r["first_replay_s"] for r in measured]),
            "first_replay_runs_s": [r["first_replay_s"] for r in measured],
            "stop_s": _median([r["stop_s"] for r in measured]),
            "stop_runs_s": [r["stop_s"] for r in measured],
            "breakdown": {k: _median([r["stages"][k] for r in measured]) for k in names},
            "milestones": {k: _median([r["milestones"][k] for r in measured]) for k in
                           (measured[0]["milestones"] if measured else {})}}


def measure_startup(config: str = "examples/quickstart.yaml", runs: int = 3, warmup: bool = True,
                    full: bool = False, env: dict[str, str] | None = None,
                    trees: dict[str, Path] | None = None) -> dict[str, Any]:
    """Per source tree (default: this checkout as "current"): one warm-up sweep unless ``warmup`` is False,
    then ``runs`` measured sweeps on fresh run folders, the trees' runs interleaved (so that a machine whose
    load drifts treats them alike). One PREFECT_HOME (a fresh temp folder) for all of them."""
    trees = trees or {"current": ROOT}
    base = dict(os.environ if env is None else env)
    base.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
    for key in ("PREFECT_API_URL", MARKS_ENV):
        base.pop(key, None)
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="spica-startup-") as tmp_name:
        tmp = Path(tmp_name)
        base.setdefault("PREFECT_HOME", str(tmp / "prefect"))
        dirs = {name: tmp / f"tree{i}" for i, name in enumerate(trees)}
        envs = {name: _probe_env(dirs[name], base, tree) for name, tree in trees.items()}
        measured: dict[str, list[dict[str, Any]]] = {name: [] for name in trees}
        warm: dict[str, Any] = {}
        for name, tree in trees.items():
            if warmup:
                warm[name] = run_once(config, envs[name], dirs[name], "warmup", stop_at_replay=False, tree=tree)
        for i in range(runs):
            for name, tree in trees.items():
                measured[name].append(run_once(config, envs[name], dirs[name], f"run{i + 1}",
                                               stop_at_replay=not full, tree=tree))
        for name, tree in trees.items():
            results[name] = {"tree": str(tree), **_summary(measured[name]),
                             "cli": cli_times(_tree_env(base, tree), tree, config),
                             "warmup_wall_s": warm[name]["wall_s"] if name in warm else None,
                             "runs": measured[name]}
    return {"config": config, "cpus": os.cpu_count(), "load_avg_1m": round(os.getloadavg()[0], 2), **(
        results["current"] if list(results) == ["current"] else {"trees": results})}


def _export(ref: str, into: Path) -> Path:
    """``git archive REF`` of this repository, unpacked into ``into``."""
    into.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(["git", "archive", ref], cwd=ROOT, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


RESULTS = ROOT / "bench" / "results" / "startup.json"
QUICKSTART = "examples/quickstart.yaml"


def write_docs(doc: dict[str, Any]) -> None:
    """The ``startup`` block of docs/benchmarks.md from startup.json."""
    sys.path.insert(0, str(ROOT / "bench"))
    from results_doc import headline, write_section

    trees = doc.get("trees", {"current": doc})
    lines = [f"{headline(doc)}: `spica sweep {doc['config']}` with warm caches (one warm-up sweep first), to the "
             "moment a worker enters the replay; median of the measured runs (target ≤ 10 s):", ""]
    for name, t in trees.items():
        runs = ", ".join(f"{x:.2f}" for x in t["first_replay_runs_s"])
        b, cli = t["breakdown"], t.get("cli", {})
        big = sorted(((k, v) for k, v in b.items() if v is not None and v >= 0.5), key=lambda kv: -kv[1])
        label = name if name != "current" else "this checkout" if len(trees) > 1 else ""
        lines += [f"- {label + ': ' if label else ''}command → first replay **{t['first_replay_s']:.1f} s** "
                  f"({runs} s). Stages over 0.5 s (medians; the optimizer process imports beside the flow): "
                  + ", ".join(f"{k} {v:.1f} s" for k, v in big) + "."]
        if t.get("stop_s") is not None:
            lines.append(f"- Ctrl-C at the first replay → the command has exited: **{t['stop_s']:.1f} s** "
                         f"({', '.join(f'{x:.2f}' for x in t['stop_runs_s'])} s).")
        if cli:
            lines.append(f"- `spica --help` {cli.get('spica_help_s', float('nan')):.2f} s; the warm-up sweep (the whole "
                         f"quick start, caches filling) {t.get('warmup_wall_s') or float('nan'):.1f} s.")
    write_section("startup", "Start-up (`bench/bench_startup.py`)", lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=(__doc__ or "").split("\n", 2)[2])
    ap.add_argument("--config", default=QUICKSTART)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--no-warmup", action="store_true", help="skip the warm-up sweep (caches already warm)")
    ap.add_argument("--full", action="store_true", help="let measured sweeps finish instead of stopping them")
    ap.add_argument("--baseline", metavar="GIT_REF", default=None,
                    help="also measure this commit (git archive into a temp folder), interleaved with this checkout")
    ap.add_argument("--tree", action="append", default=[], metavar="NAME=PATH",
                    help="also measure the code in PATH (a copy of this repository), under NAME; prints only")
    ap.add_argument("--verbose", action="store_true", help="include every run's marks in the JSON")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="spica-baseline-") as tmp:
        trees: dict[str, Path] = {}
        if args.baseline:
            trees[f"baseline {args.baseline}"] = _export(args.baseline, Path(tmp))
        for item in args.tree:
            name, _, path = item.partition("=")
            trees[name] = Path(path).resolve()
        trees["current"] = ROOT
        result = measure_startup(args.config, args.runs, not args.no_warmup, args.full, trees=trees)
    if not args.verbose:
        for tree in result.get("trees", {"current": result}).values():
            for r in tree["runs"]:
                r.pop("at", None)
    if args.config != QUICKSTART or args.tree:
        print(json.dumps(result, indent=2))
        return 0
    sys.path.insert(0, str(ROOT / "bench"))
    from results_doc import provenance, write_results

    command = "python bench/bench_startup.py" + "".join(
        f" {flag}" for flag, on in ((f"--runs {args.runs}", args.runs != 3), ("--no-warmup", args.no_warmup),
                                    ("--full", args.full), (f"--baseline {args.baseline}", bool(args.baseline)),
                                    ("--verbose", args.verbose)) if on)
    doc = write_results(RESULTS, {**provenance(command), **result})
    write_docs(doc)
    print(json.dumps(result, indent=2))
    print(f"wrote {RESULTS} and the startup block of docs/benchmarks.md", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A corpus of bad inputs, as a new user writes them: each exits 2 naming the field, or the file and line.

The cases cover traces, YAML, numbers and the run folder. Most run in-process through ``main`` (fast);
the ones that once hung, aborted in native code or grew past a gigabyte run as their own process, so
the exit code, wall time and peak memory are those of the command a user runs.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import signal
import sys
import time
from pathlib import Path
from typing import Callable

import pyarrow.parquet as pq
import pytest
import yaml

from conftest import EXAMPLES, REPO
from spica_cli.main import main

QUICKSTART = yaml.safe_load((EXAMPLES / "quickstart.yaml").read_text())
ROUTER = yaml.safe_load((EXAMPLES / "router_only.yaml").read_text())
GOOD_ROW = {"timestamp": 0, "input_length": 1000, "output_length": 100, "hash_ids": [0, 1]}


def _row(n: int, **change: object) -> str:
    row = {**GOOD_ROW, "timestamp": 10 * n, **change}
    return json.dumps({k: v for k, v in row.items() if v is not None})


def _config(tmp: Path, base: dict, **sections: dict) -> Path:
    data = json.loads(json.dumps(base))
    for section, values in sections.items():
        data[section] = {**data.get(section, {}), **values}
    path = tmp / "config.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _trace_config(tmp: Path, lines: list[str] | bytes) -> Path:
    trace = tmp / "trace.jsonl"
    if isinstance(lines, bytes):
        trace.write_bytes(lines)
    else:
        trace.write_text("".join(line + "\n" for line in lines))
    return _config(tmp, ROUTER, workload={"trace_path": str(trace)})


def _good_rows(n: int) -> list[str]:
    return [_row(i) for i in range(n)]


# (what a user wrote) -> (the config path, the words the error must contain)
Case = Callable[[Path], tuple[Path, list[str]]]

TRACES: dict[str, Case] = {
    "empty trace": lambda t: (_trace_config(t, []), ["trace.jsonl", "no requests"]),
    "malformed line": lambda t: (_trace_config(t, [*_good_rows(2), '{"timestamp": 3,']),
                                 ["trace.jsonl:3", "not valid JSON"]),
    "missing input_length": lambda t: (_trace_config(t, [_row(0), _row(1, input_length=None)]),
                                       ["trace.jsonl:2", "input_length", "input_tokens"]),
    "zero input_length": lambda t: (_trace_config(t, [_row(0, input_length=0)]), ["trace.jsonl:1", "input_length"]),
    "negative input_length at line 301": lambda t: (
        _trace_config(t, [*_good_rows(300), _row(300, input_length=-5)]), ["trace.jsonl:301", "input_length", "-5"]),
    "hash_ids with strings": lambda t: (_trace_config(t, [_row(0, hash_ids=["a", "b"])]),
                                        ["trace.jsonl:1", "hash_ids"]),
    "too few hash_ids": lambda t: (_trace_config(t, [_row(0, input_length=5000)]), ["trace.jsonl:1", "hash_ids"]),
    "negative timestamp": lambda t: (_trace_config(t, [_row(0), _row(1, timestamp=-40)]),
                                     ["trace.jsonl:2", "timestamp"]),
    "10-million-token request": lambda t: (
        _trace_config(t, [_row(0), _row(1, input_length=10_000_000, hash_ids=list(range(19532)))]),
        ["trace.jsonl:2", "input_length", "context length"]),
    "infinite timestamp": lambda t: (_trace_config(t, ['{"timestamp": Infinity, "input_length": 1000, '
                                                       '"output_length": 100, "hash_ids": [0, 1]}']),
                                     ["trace.jsonl:1", "timestamp"]),
    "Latin-1 byte": lambda t: (_trace_config(t, (_row(0) + "\n" + _row(1).replace("}", ', "session_id": "caf\xe9"}')
                                                 + "\n").encode("latin-1")), ["trace.jsonl:2", "UTF-8", "offset"]),
}

YAML: dict[str, Case] = {
    "Latin-1 byte in the config": lambda t: (_raw(t, "search_space:\n  model_name: caf\xe9\n".encode("latin-1")),
                                             ["config.yaml", "UTF-8", "offset 31", "line 2"]),
    "binary file as the config": lambda t: (_raw(t, bytes(range(256)) * 4), ["config.yaml", "binary"]),
    "duplicate key": lambda t: _duplicate_budget(t),
    "python tag": lambda t: (_raw(t, b"search_space: !!python/object/apply:os.system [echo hi]\n"),
                             ["config.yaml", "line 1"]),
    "deep nesting": lambda t: (_raw(t, b"a: " + b"[" * 200 + b"]" * 200 + b"\n"), ["nested deeper than 64"]),
}


def _raw(tmp: Path, data: bytes) -> Path:
    path = tmp / "config.yaml"
    path.write_bytes(data)
    return path


def _duplicate_budget(tmp: Path) -> tuple[Path, list[str]]:
    text = (EXAMPLES / "quickstart.yaml").read_text()
    line = text.splitlines().index("  gpu_budget: 8") + 1
    path = _raw(tmp, text.replace("  gpu_budget: 8\n", "  gpu_budget: 8\n  gpu_budget: 1000\n").encode())
    return path, ["search_space.gpu_budget", "duplicate key", f"line {line}", f"line {line + 1}"]


NUMBERS: dict[str, Case] = {
    "gpu_budget 1e12": lambda t: (_config(t, QUICKSTART, search_space={"gpu_budget": 10**12}),
                                  ["search_space.gpu_budget", "at most 512"]),
    "concurrency 1e9": lambda t: (_config(t, QUICKSTART, workload={"concurrency": 10**9}),
                                  ["workload.concurrency", "at most"]),
    "replicas 1e9": lambda t: (_config(t, ROUTER, search_space={"parallel_configs": [{"tp": 2, "replicas": 10**9}]},
                                       workload={"trace_path": str(EXAMPLES / "traces/shared_prefix.jsonl")}),
                               ["parallel_configs[0].replicas", "at most 512"]),
    "request_rate .inf": lambda t: (_config(t, QUICKSTART, workload={"concurrency": None, "request_rate": float("inf")}),
                                    ["workload.request_rate", "finite"]),
    "num_request_ratio .inf": lambda t: (_config(t, QUICKSTART, workload={"num_request_ratio": float("inf")}),
                                         ["workload.num_request_ratio", "finite"]),
    "SLA .inf": lambda t: (_config(t, QUICKSTART, goal={"sla": {"ttft_ms": float("inf"), "itl_ms": 40}}),
                           ["goal.sla.ttft_ms", "finite"]),
    "SLA .nan": lambda t: (_config(t, QUICKSTART, goal={"sla": {"ttft_ms": 2000, "itl_ms": float("nan")}}),
                           ["goal.sla.itl_ms", "finite"]),
    "arrival_speedup_ratio .inf": lambda t: (
        _config(t, ROUTER, workload={"trace_path": str(EXAMPLES / "traces/shared_prefix.jsonl"),
                                     "arrival_speedup_ratio": float("inf")}),
        ["workload.arrival_speedup_ratio", "finite"]),
    "parallel_evals 100000": lambda t: (_config(t, QUICKSTART, sweep={"parallel_evals": 100000}),
                                        ["sweep.parallel_evals", "at most 256"]),
    "max_rounds 1e6": lambda t: (_config(t, QUICKSTART, sweep={"max_rounds": 10**6}),
                                 ["sweep.max_rounds", "at most 1,000"]),
    "too many evaluations": lambda t: (_config(t, QUICKSTART, sweep={"max_rounds": 1000, "candidates_per_round": 100}),
                                       ["sweep.max_rounds", "100,000", "at most 10,000"]),
    "a million requests per replay": lambda t: (
        _config(t, QUICKSTART, workload={"concurrency": 8000, "num_request_ratio": 1000}),
        ["workload.num_request_ratio", "8,000,000 requests", "at most 1,000,000"]),
    "isl beyond the context": lambda t: (_config(t, QUICKSTART, workload={"isl": 100_000}),
                                         ["workload.isl", "context length 40,960"]),
    "max_eval_seconds 1e30": lambda t: (_config(t, QUICKSTART, sweep={"max_eval_seconds": 1e30}),
                                        ["sweep.max_eval_seconds", "at most 86,400"]),
}

CORPUS = {**TRACES, **YAML, **NUMBERS}


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_validate_refuses_naming_the_field_or_line(name: str, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    path, words = CORPUS[name](tmp_path)
    assert main(["validate", str(path)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "Traceback" not in err and len(err) < 4000, err
    for word in words:
        assert word in err, f"{word!r} not in {err!r}"


def test_many_bad_lines_are_summarised_not_listed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _trace_config(tmp_path, [_row(i, input_length=-i - 1) for i in range(5000)])
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert "and 4980 more lines like this: input_length" in err and len(err.splitlines()) < 30


def test_out_of_order_timestamps_are_a_warning_not_an_error(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    path = _trace_config(tmp_path, [_row(0), _row(5), _row(2), _row(9)])
    assert main(["validate", str(path)]) == 0
    out = capsys.readouterr().out
    assert "trace           : 4 requests" in out and "warning" in out and "backwards" in out


def test_parallel_evals_beyond_the_cores_is_capped_and_said(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _config(tmp_path, QUICKSTART, sweep={"parallel_evals": 64, "candidates_per_round": 64, "max_rounds": 1})
    assert main(["validate", str(path)]) == 0
    cores = len(os.sched_getaffinity(0))
    out = capsys.readouterr().out
    assert f"{min(cores, 64)} parallel" in out
    assert ("parallel_evals 64 runs as" in out) == (cores < 64)


# ---------------------------------------------------------------- as a user's own process

# Runs the command as its own child and reports that child's peak RSS: a child forked straight from pytest
# would inherit pytest's high-water mark (Linux keeps it across exec).
_MEASURED = ("import resource, subprocess, sys; code = subprocess.call([sys.executable, '-m', 'spica_cli.main', "
             "*sys.argv[1:]]); print(f'\\nPEAK_RSS_KB={resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}', "
             "file=sys.stderr); sys.exit(code)")


def _run(args: list[str], timeout: float = 120) -> tuple[int, str, float, float]:
    """(exit code, stderr + stdout, wall seconds, peak RSS in MB) of one ``spica`` process."""
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", _MEASURED, *args], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        output, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        raise
    wall = time.perf_counter() - start
    output, _, peak = output.rpartition("\nPEAK_RSS_KB=")
    return proc.returncode, output, wall, int(peak) / 1024


def _bomb(tmp: Path, levels: int = 9) -> Path:
    lines = ["a: &a [" + ", ".join(["1"] * 9) + "]"]
    for i in range(1, levels):
        prev, cur = chr(ord("a") + i - 1), chr(ord("a") + i)
        lines.append(f"{cur}: &{cur} [" + ", ".join([f"*{prev}"] * 9) + "]")
    text = (EXAMPLES / "quickstart.yaml").read_text().replace("  gpu_budget: 8\n", f"  gpu_budget: *{cur}\n")
    return _raw(tmp, ("\n".join(lines) + "\n" + text).encode())


PROCESS_CASES: dict[str, Callable[[Path], tuple[list[str], list[str]]]] = {
    "alias bomb": lambda t: (["validate", str(_bomb(t))], ["alias bomb", "line 2"]),
    "45 MB list": lambda t: (["validate", str(_raw(t, b"gpu_budget: [" + b"1, " * 15_000_000 + b"1]\n"))],
                             ["config.yaml", "at most 1 MiB"]),
    "space with gpu_budget 1e12": lambda t: (
        ["space", str(_config(t, QUICKSTART, search_space={"gpu_budget": 10**12}))], ["search_space.gpu_budget"]),
    "evaluate with concurrency 1e9": lambda t: (
        ["evaluate", str(_config(t, ROUTER, workload={"trace_path": None, "replay_concurrency": None, "isl": 1000,
                                                      "osl": 100, "concurrency": 10**9, "num_request_ratio": 1},
                                 search_space={"router_mode": ["round_robin"], "overlap_score_credit": [1.0],
                                               "prefill_load_scale": [1.0], "router_temperature": [0.0]}))],
        ["workload.concurrency"]),
}


@pytest.mark.parametrize("name", sorted(PROCESS_CASES))
def test_the_command_exits_2_at_once_in_bounded_memory(name: str, tmp_path: Path) -> None:
    args, words = PROCESS_CASES[name](tmp_path)
    code, output, wall, rss_mb = _run(args)
    assert code == 2 and "Traceback" not in output and len(output) < 4000, output
    for word in words:
        assert word in output, f"{word!r} not in {output!r}"
    assert wall < 60 and rss_mb < 512, (wall, rss_mb)  # a hang or a blow-up, not a speed target


def test_a_sweep_never_starts_on_a_bad_trace(tmp_path: Path) -> None:
    """The throughput planner policy reads the trace in the load-predictor stage: that path once gave a traceback."""
    trace = tmp_path / "trace.jsonl"
    trace.write_text("\n".join([*_good_rows(50), '{"timestamp": 500, "input_length": "many"}']) + "\n")
    config = _config(tmp_path, yaml.safe_load((EXAMPLES / "deepseek_v3_trace.yaml").read_text()),
                     workload={"trace_path": str(trace)})
    runs = tmp_path / "runs"
    code, output, _, _ = _run(["sweep", str(config), "--runs-root", str(runs)])
    assert code == 2 and "Traceback" not in output, output
    assert "trace.jsonl:51" in output and "input_length" in output
    assert not runs.exists()  # nothing started: no run folder, no Prefect server


@pytest.mark.slow
def test_a_second_sweep_on_a_run_dir_in_use_is_refused_and_the_first_is_intact(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    first = subprocess.Popen([sys.executable, "-m", "spica_cli.main", "sweep", str(EXAMPLES / "quickstart.yaml"),
                              "--run-dir", str(run_dir)], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
    try:
        deadline = time.monotonic() + 300
        while not (run_dir / "config.parquet").exists():
            assert first.poll() is None and time.monotonic() < deadline, first.communicate()
            time.sleep(0.2)
        code, output, wall, _ = _run(["sweep", str(EXAMPLES / "quickstart.yaml"), "--run-dir", str(run_dir)])
        assert code == 2 and f"in use by process {first.pid}" in output and "Traceback" not in output, output
        assert wall < 30
        out, err = first.communicate(timeout=600)
    finally:
        first.kill()
    assert first.returncode == 0, err
    trials = pq.read_table(run_dir / "trials.parquet").to_pylist()
    keys = [(t["mode"], t["round"], t["trial"]) for t in trials]
    assert len(keys) == len(set(keys)) and len(trials) >= 6  # one writer: no trial twice
    ranking = pq.read_table(run_dir / "ranking.parquet").to_pylist()
    assert f"{ranking[0]['score']:,.4g}" in out


# Each bound of spica_core/config/limits.py -> the words that name its knob in the first cell of its row of the
# docs/limits.md table ("field | at most | why"); the bound must be a number of that row's "at most" cell.
DOCUMENTED_KNOBS = {
    "GPU_BUDGET": "`search_space.gpu_budget`",
    "WORKER_GPUS": "`parallel_configs[*]`",
    "IN_FLIGHT": "`workload.concurrency`",
    "SEQUENCE_TOKENS": "`search_space.context_length`",
    "REQUESTS_PER_REPLAY": "requests per replay",
    "REQUEST_RATE": "`workload.request_rate`",
    "NUM_REQUEST_RATIO": "`workload.num_request_ratio`",
    "KV_LOAD_RATIO": "`workload.kv_load_ratio`",
    "ARRIVAL_SPEEDUP": "`workload.arrival_speedup_ratio`",
    "PREFIX_GROUPS": "`workload.num_prefix_groups`",
    "TURNS_PER_SESSION": "`workload.turns_per_session`",
    "MAX_ROUNDS": "`sweep.max_rounds`",
    "CANDIDATES_PER_ROUND": "`sweep.candidates_per_round`",
    "EVALUATIONS": "`sweep.max_rounds` × candidates per round",
    "PARALLEL_EVALS": "`sweep.parallel_evals`",
    "EVAL_SECONDS": "`sweep.max_eval_seconds`",
    "STARTUP_SECONDS": "`search_space.startup_time`",
    "G2_BLOCKS": "`search_space.num_g2_blocks`",
    "SCHEDULER_RECV_INTERVAL": "`search_space.scheduler_recv_interval`",
    "SEED": "`sweep.seed`",
    "TRAFFIC_SCALE": "`goal.headroom_max`",
}
# A whole number: digits with optional thousands groups ("10,000" is one number, never "10" and "000") and decimals.
_NUMBER = re.compile(r"(?<![0-9.,])[0-9]+(?:,[0-9]{3}(?![0-9]))*(?:\.[0-9]+)?(?![0-9])")
_SEED_SHOWN = "2⁶³ − 1"


def _numbers(text: str) -> list[float]:
    return [float(token.replace(",", "")) for token in _NUMBER.findall(text)]


def _table_rows(doc: str) -> list[tuple[str, str]]:
    """(first cell, second cell) of every Markdown table row."""
    rows = []
    for line in doc.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.lstrip().startswith("|") else []
        if len(cells) >= 2:
            rows.append((cells[0], cells[1]))
    return rows


def _undocumented_bounds(doc: str, facts: dict[str, tuple[str, int | float, str]]) -> list[str]:
    """Each (name -> knob words, bound, as shown) whose bound is not a number of a table row naming the knob."""
    rows = _table_rows(doc)
    problems = []
    for name, (knob, value, shown) in facts.items():
        cells = [bound for field, bound in rows if knob in field]
        if not cells:
            problems.append(f"{name}: no row of docs/limits.md names {knob}")
        elif not any((shown in cell) if shown == _SEED_SHOWN else (float(value) in _numbers(cell)) for cell in cells):
            problems.append(f"{name}: the row of {knob} does not give its bound {shown} (it says {cells})")
    return problems


def _documented_facts() -> dict[str, tuple[str, int | float, str]]:
    from spica_core.config import limits

    bounds = {name: value for name, value in vars(limits).items() if isinstance(value, limits.Limit)}
    assert set(bounds) == set(DOCUMENTED_KNOBS), "a bound added to limits.py needs its row in docs/limits.md"
    facts = {name: (DOCUMENTED_KNOBS[name], bound.maximum,
                    _SEED_SHOWN if bound.maximum == 2**63 - 1 else f"{bound.maximum:,}")
             for name, bound in bounds.items()}
    # the numbers the bounds are derived from, in the same rows
    facts["MAX_NUM_SEQS_PER_GPU"] = ("`workload.concurrency`", limits.MAX_NUM_SEQS_PER_GPU,
                                     f"{limits.MAX_NUM_SEQS_PER_GPU:,}")
    facts["ARRIVAL_SLOWDOWN"] = ("`workload.arrival_speedup_ratio`", limits.ARRIVAL_SLOWDOWN,
                                 f"{limits.ARRIVAL_SLOWDOWN:g}")
    return facts


def test_whole_numbers_are_read_with_their_thousands_separators() -> None:
    assert _numbers("| 10,000 per branch | 0.001 to 1,000 | 2⁶³ − 1 | 100,000,000 |") == [
        10_000, 0.001, 1_000, 2, 1, 100_000_000]
    assert 10 not in _numbers("10,000 and 100 and 510") and 1_000 not in _numbers("10,000")


def test_docs_give_every_bound_in_its_knobs_row() -> None:
    doc = (REPO / "docs" / "limits.md").read_text()
    assert _undocumented_bounds(doc, _documented_facts()) == []

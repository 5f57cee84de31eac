"""check_trace: mooncake JSONL validation with file/line/field messages, grouping, warnings and caching."""
from __future__ import annotations

import json
import math
import random
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import EXAMPLES
from spica_core.config.trace import MAX_LINE_BYTES, TraceSummary, check_trace
from spica_core.errors import EXCERPT_CHARS, TraceError

SEQ = 131072
_DROP = object()


def _row(**fields: Any) -> str:
    """A valid row (600 tokens → 2 blocks of 512) with fields overridden, or removed with _DROP."""
    row: dict[str, Any] = {"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}
    row.update(fields)
    return json.dumps({k: v for k, v in row.items() if v is not _DROP})


def _write(tmp_path: Path, lines: list[str | bytes], name: str = "t.jsonl") -> Path:
    path = tmp_path / name
    path.write_bytes(b"".join((x if isinstance(x, bytes) else x.encode()) + b"\n" for x in lines))
    return path


def _error(path: Path, **kwargs: Any) -> str:
    with pytest.raises(TraceError) as info:
        check_trace(path, max_seq_len=kwargs.pop("max_seq_len", SEQ), **kwargs)
    return str(info.value)


@pytest.mark.parametrize("name", ["shared_prefix.jsonl", "sine_prefix.jsonl"])
def test_example_traces_pass_with_their_counts(name: str) -> None:
    path = EXAMPLES / "traces" / name
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    summary = check_trace(path, max_seq_len=SEQ)
    assert summary == TraceSummary(path, len(rows), 0, min(r["timestamp"] for r in rows),
                                   max(r["timestamp"] for r in rows), max(r["input_length"] for r in rows),
                                   max(r["output_length"] for r in rows), (),
                                   total_tokens=sum(r["input_length"] + r["output_length"] for r in rows))


def test_aliases_sessions_and_blank_lines(tmp_path: Path) -> None:
    path = _write(tmp_path, [
        json.dumps({"created_time": 5.5, "input_tokens": 1024, "output_tokens": 7, "hash_ids": [0, 1]}),
        "",
        _row(timestamp=10, session_id="a"),
        _row(timestamp=11, session_id="a", delay_ms=250.0, request_id="r", priority=1),
        _row(timestamp=12, session_id="b", unknown_field={"x": 1}),
        "   ",
    ])
    s = check_trace(path, max_seq_len=SEQ)
    assert (s.requests, s.sessions, s.first_ms, s.last_ms, s.max_input_length, s.max_output_length) == (
        4, 2, 5.5, 12.0, 1024, 7)
    assert s.warnings == ()


@pytest.mark.parametrize(("line", "expected"), [
    ("{bad json", "not valid JSON: Expecting property name enclosed in double quotes (at column 2)"),
    ("[1, 2]", "must be a JSON object, got a list"),
    (_row(input_length=_DROP), "input_length: missing (accepted names: input_length, input_tokens)"),
    (_row(timestamp=_DROP), "timestamp: missing (accepted names: timestamp, created_time)"),
    (_row(input_length=0), "input_length: must be a positive integer (got 0)"),
    (_row(input_length=-5), "input_length: must be a positive integer (got -5)"),
    (_row(input_length=600.0), "input_length: must be a positive integer (got 600.0)"),
    (_row(input_length=True), "input_length: must be a positive integer (got True)"),
    (_row(input_length="600"), "input_length: must be a positive integer (got '600')"),
    (_row(output_tokens=3, output_length=_DROP, input_tokens=600, input_length=_DROP, hash_ids=[1]),
     "hash_ids: too few ids"),
    (_row(hash_ids=[1, "a"]), "hash_ids: must hold integers 0 <= id < 2**64 ('a' at index 1)"),
    (_row(hash_ids=[-1, 2]), "hash_ids: must hold integers 0 <= id < 2**64 (-1 at index 0)"),
    (_row(hash_ids=[1, 2**64]), f"hash_ids: must hold integers 0 <= id < 2**64 ({2**64} at index 1)"),
    (_row(hash_ids="1,2"), "hash_ids: must be a list of integers (got '1,2')"),
    (_row(hash_ids=_DROP), "hash_ids: missing; the replay needs one id per 512-token block"),
    (_row(hash_ids=[1]), "hash_ids: too few ids: 512-token blocks need ceil(input_length / 512) ids; the replay "
                         "refuses it (exceeds hash_ids capacity) (1 for input_length 600, expected 2)"),
    (_row(hash_ids=[1, 2, 3]), "hash_ids: too many ids: 512-token blocks need ceil(input_length / 512) ids; "
                               "extra ids do not match the prompt (3 for input_length 600, expected 2)"),
    (_row(timestamp=-1.5), "timestamp: timestamps must be >= 0 ms (the replay re-bases arrivals; a negative "
                           "one shifts every request) (got -1.5)"),
    ('{"timestamp": Infinity, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}',
     "timestamp: must be a finite number of milliseconds (got inf)"),
    ('{"timestamp": NaN, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}',
     "timestamp: must be a finite number of milliseconds (got nan)"),
    ('{"timestamp": 1, "input_length": 600, "output_length": 5, "hash_ids": [1, 2], "x": -Infinity}',
     "NaN/Infinity is not valid JSON; the replay refuses the line (-Infinity)"),
    (_row(input_length=10_000_000, hash_ids=list(range(math.ceil(10_000_000 / 512)))),
     f"input_length: exceeds the context length {SEQ} (context_length or the model's max context); "
     "a server with this context rejects the request (got 10000000)"),
    (_row(input_length=131_000, output_length=100, hash_ids=list(range(math.ceil(131_000 / 512)))),
     f"output_length: input_length + output_length exceeds the context length {SEQ}"),
    (_row(session_id=7), "session_id: must be a string (got 7)"),
    (_row(session_id="s", delay=5.0), "delay: set on a first turn"),
    (_row(delay_ms=5.0), "delay_ms: set on a first turn"),
    (_row(created_time=1), "timestamp: given twice (as timestamp and created_time); the replay refuses the line"),
    ('{"timestamp": 1, "input_length": 600, "input_length": 700, "output_length": 5, "hash_ids": [1, 2]}',
     "input_length: given twice; the replay refuses the line"),
])
def test_bad_line_names_path_line_and_field(tmp_path: Path, line: str, expected: str) -> None:
    path = _write(tmp_path, [_row(), "", line, _row(timestamp=9)])
    message = _error(path)
    assert message.startswith(f"{path}: 1 problem line(s) in the trace\n")
    assert f"  - {path}:3: {expected}" in message


def test_later_turn_delay_checked_and_accepted(tmp_path: Path) -> None:
    ok = _write(tmp_path, [_row(session_id="s"), _row(session_id="s", delay=12.5)], "ok.jsonl")
    assert check_trace(ok, max_seq_len=SEQ).sessions == 1
    bad = _write(tmp_path, [_row(session_id="s"), _row(session_id="s", delay=-3)], "bad.jsonl")
    assert f"{bad}:2: delay: must be >= 0 ms (got -3)" in _error(bad)


def test_context_length_bounds_are_inclusive(tmp_path: Path) -> None:
    path = _write(tmp_path, [_row(input_length=1000, output_length=24, hash_ids=[1, 2])])
    assert check_trace(path, max_seq_len=1024).max_input_length == 1000
    assert f"{path}:1: output_length: input_length + output_length" in _error(path, max_seq_len=1023)
    assert "(1000 + 24 = 1024)" in _error(path, max_seq_len=1023)


def test_block_size_sets_the_hash_id_count(tmp_path: Path) -> None:
    path = _write(tmp_path, [_row(input_length=100, hash_ids=[1, 2, 3, 4])])
    assert check_trace(path, max_seq_len=SEQ, block_size=32).requests == 1
    assert "(4 for input_length 100, expected 1)" in _error(path)


@pytest.mark.parametrize("content", [b"", b"\n  \n\r\n"])
def test_empty_trace_holds_no_requests(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_bytes(content)
    assert _error(path).startswith(f"{path}: holds no requests")


def test_missing_file_and_directory(tmp_path: Path) -> None:
    assert _error(tmp_path / "nope.jsonl") == f"{tmp_path / 'nope.jsonl'}: trace file not found"
    assert _error(tmp_path) == f"{tmp_path}: is a directory, not a trace file"


def test_latin1_byte_names_line_and_file_offset(tmp_path: Path) -> None:
    first = _row().encode()
    second = b'{"timestamp": 1, "input_length": 600, "output_length": 5, "hash_ids": [1, 2], "n": "caf\xe9"}'
    path = _write(tmp_path, [first, second])
    offset = len(first) + 1 + second.index(b"\xe9")
    assert f"{path}:2: not valid UTF-8 (byte 0xe9 at byte offset {offset} of the file)" in _error(path)


def test_binary_file_stops_at_first_line(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    path.write_bytes(b"PK\x03\x04" + bytes(range(256)) * 4000)
    message = _error(path)
    assert message.splitlines() == [
        f"{path}: 1 problem line(s) in the trace; stopped reading at line 1",
        f"  - {path}:1: not a text JSONL file (a trace is UTF-8 JSON, one object per line) "
        "(NUL byte at byte offset 4)"]


def test_over_long_line_is_skipped_and_reading_resumes(tmp_path: Path) -> None:
    long_line = '{"pad": "' + "x" * MAX_LINE_BYTES + '"}'
    path = _write(tmp_path, [_row(), long_line, _row(timestamp=3), _row(input_length=-1)])
    message = _error(path)
    assert message.splitlines() == [
        f"{path}: 2 problem line(s) in the trace",
        f"  - {path}:2: line longer than 1 MiB; skipped",
        f"  - {path}:4: input_length: must be a positive integer (got -1)"]


def test_line_of_exactly_the_limit_is_read(tmp_path: Path) -> None:
    base = _row()[:-1] + ', "pad": "'
    line = base + "x" * (MAX_LINE_BYTES - len(base) - 2) + '"}'
    assert len(line) == MAX_LINE_BYTES
    assert check_trace(_write(tmp_path, [line]), max_seq_len=SEQ).requests == 1


def test_long_values_are_cut_in_messages(tmp_path: Path) -> None:
    path = _write(tmp_path, [_row(input_length="y" * 5000)])
    problem = _error(path).splitlines()[1]
    got = problem.split("(got ", 1)[1][:-1]
    assert got.startswith("'yyy") and got.endswith("yyy'") and "..." in got and len(got) <= EXCERPT_CHARS


def test_out_of_order_timestamps_warn_and_later_turns_are_exempt(tmp_path: Path) -> None:
    path = _write(tmp_path, [
        _row(timestamp=100, session_id="s"),
        _row(timestamp=5, session_id="s"),          # a later turn: not an arrival, not compared
        _row(timestamp=200),
        _row(timestamp=150.5),                      # backwards (1)
        _row(timestamp=300),
        _row(timestamp=20),                         # backwards (2)
    ])
    summary = check_trace(path, max_seq_len=SEQ)
    assert summary.warnings == (f"{path}: timestamps go backwards at 2 line(s), first at line 4 (150.5 ms after "
                                "200 ms); the replay re-orders arrivals by time",)
    assert (summary.requests, summary.first_ms, summary.last_ms) == (6, 5.0, 300.0)


def test_many_bad_lines_are_capped_and_counted(tmp_path: Path) -> None:
    path = _write(tmp_path, [_row(timestamp=i, input_length=-5) for i in range(5000)])
    lines = _error(path, shown=20).splitlines()
    assert lines[0] == f"{path}: 5000 problem line(s) in the trace"
    assert lines[1:21] == [f"  - {path}:{i}: input_length: must be a positive integer (got -5)"
                           for i in range(1, 21)]
    assert lines[21:] == ["  - ... and 4980 more lines like this: input_length: must be a positive integer"]


def test_each_kind_gets_examples_and_its_own_count(tmp_path: Path) -> None:
    rows = [_row(input_length=-5) if i % 2 else _row(hash_ids=["z", 1]) for i in range(5000)]
    lines = _error(_write(tmp_path, rows), shown=20).splitlines()
    assert len(lines) == 1 + 20 + 2
    assert sum("input_length: must be a positive integer (got -5)" in x for x in lines[1:21]) == 10
    assert sum("hash_ids: must hold integers" in x for x in lines[1:21]) == 10
    assert lines[21:] == [
        "  - ... and 2490 more lines like this: hash_ids: must hold integers 0 <= id < 2**64",
        "  - ... and 2490 more lines like this: input_length: must be a positive integer"]


def test_unchanged_file_is_served_from_cache(tmp_path: Path) -> None:
    path = _write(tmp_path, [_row(), _row(timestamp=1)])
    first = check_trace(path, max_seq_len=SEQ)
    assert check_trace(path, max_seq_len=SEQ) is first
    assert check_trace(path, max_seq_len=SEQ - 1) is not first
    path.write_text(path.read_text() + _row(timestamp=2, input_length=-1) + "\n")
    assert f"{path}:3: input_length" in _error(path)


def test_100k_line_trace(tmp_path: Path) -> None:
    rng = random.Random(7)
    t, next_id, max_in, max_out = 0.0, 0, 0, 0
    with open(tmp_path / "big.jsonl", "w") as f:
        for _ in range(100_000):
            t += rng.expovariate(10.0) * 1000
            isl, osl = rng.randint(1, 8000), rng.randint(1, 500)
            blocks = -(-isl // 512)
            f.write(json.dumps({"timestamp": round(t, 3), "input_length": isl, "output_length": osl,
                                "hash_ids": list(range(next_id, next_id + blocks))}) + "\n")
            next_id += blocks
            max_in, max_out = max(max_in, isl), max(max_out, osl)
    start = time.perf_counter()
    summary = check_trace(tmp_path / "big.jsonl", max_seq_len=16384)
    print(f"check_trace: 100k lines in {time.perf_counter() - start:.2f} s")
    assert (summary.requests, summary.sessions, summary.last_ms) == (100_000, 0, round(t, 3))
    assert (summary.max_input_length, summary.max_output_length, summary.warnings) == (max_in, max_out, ())

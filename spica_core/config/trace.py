"""Streaming validation of a mooncake JSONL trace before it reaches Dynamo's replay.

The replay is a Rust engine that stops at the first bad line with a terse message ("failed to parse line N"),
or quietly re-bases, re-orders or truncates requests. ``check_trace`` reads the whole file once, in bounded memory,
and reports every problem with its file, line and field, grouped by kind so a trace with a million bad lines still
gives a short message. Successful results are cached per unchanged file.
"""
from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from spica_core.errors import TraceError, excerpt

TRACE_BLOCK_SIZE = 512            # tokens per mooncake hash id (the public traces' granularity, the replay's default)
MAX_LINE_BYTES = 1 << 20          # longest accepted line; longer ones are skipped unread
HASH_ID_LIMIT = 1 << 64           # hash ids are u64 in the replay
DEFAULT_SHOWN = 20                # problem lines listed in a TraceError
FIELD_ALIASES: dict[str, tuple[str, ...]] = {   # the replay's accepted names for each field
    "timestamp": ("timestamp", "created_time"),
    "input_length": ("input_length", "input_tokens"),
    "output_length": ("output_length", "output_tokens"),
    "hash_ids": ("hash_ids",),
    "session_id": ("session_id",),
    "delay": ("delay", "delay_ms"),
}
_KNOWN_FIELDS = frozenset(name for names in FIELD_ALIASES.values() for name in names) | {
    "request_id", "priority", "strict_priority", "output_token_ids"}

_MISSING: Any = object()
_FLOAT_MAX = sys.float_info.max
_INT_ONLY = {int}
_JSON_TYPE = {dict: "an object", list: "a list", str: "a string", int: "a number", float: "a number",
              bool: "true/false", type(None): "null"}


@dataclass(frozen=True)
class TraceSummary:
    """What a valid trace holds, for logs and docs; ``warnings`` are facts the replay handles on its own."""

    path: Path
    requests: int              # non-blank lines
    sessions: int              # distinct session_id values (0 if none)
    first_ms: float            # min timestamp
    last_ms: float             # max timestamp
    max_input_length: int
    max_output_length: int
    warnings: tuple[str, ...]
    over_context: str = "refuse"   # workload.over_context: what the replay does with requests over the context
    over_context_requests: int = 0  # requests whose input, or input + output, exceeds the context
    over_context_tokens: int = 0    # their input + output tokens
    total_tokens: int = 0           # every request's input + output tokens

    @property
    def over_context_token_share(self) -> float:
        return self.over_context_tokens / self.total_tokens if self.total_tokens else 0.0

    def over_context_text(self) -> str:
        """``574 requests (4.8 % of requests, 26 % of tokens)``."""
        n = self.over_context_requests
        return (f"{n:,} request{'s' if n != 1 else ''} ({n / max(self.requests, 1):.1%} of requests, "
                f"{self.over_context_token_share:.1%} of tokens)")


def _ms(value: float) -> str:
    return format(value, ".15g")


class _Problems:
    """Counts problems per kind (field + message) and keeps only the first ``shown`` examples of each."""

    def __init__(self, display: str, shown: int):
        self.display = display
        self.shown = shown
        self.counts: dict[tuple[str, str], int] = {}
        self.examples: dict[tuple[str, str], list[tuple[int, str]]] = {}
        self.lines = 0
        self._last_line = 0

    def add(self, lineno: int, field: str, message: str, value: Any = _MISSING, detail: str = "") -> None:
        """One problem; ``field`` is "" for a line-level one. ``value`` is echoed only if the example is kept."""
        if lineno != self._last_line:
            self._last_line = lineno
            self.lines += 1
        kind = (field, message)
        count = self.counts.get(kind, 0)
        self.counts[kind] = count + 1
        if count < self.shown:
            where = f"{field}: " if field else ""
            got = f" (got {excerpt(value)})" if value is not _MISSING else f" ({detail})" if detail else ""
            self.examples.setdefault(kind, []).append((lineno, f"{self.display}:{lineno}: {where}{message}{got}"))

    def render(self, stopped_at: int | None) -> str:
        """Round-robin over kinds so each kind shows an example, then one "and N more" line per kind."""
        picked: list[tuple[int, str]] = []
        taken = dict.fromkeys(self.examples, 0)
        depth = 0
        while len(picked) < self.shown and any(depth < len(ex) for ex in self.examples.values()):
            for kind, ex in self.examples.items():
                if depth < len(ex) and len(picked) < self.shown:
                    picked.append(ex[depth])
                    taken[kind] += 1
            depth += 1
        lines = [f"  - {text}" for _, text in sorted(picked)]
        for (field, message), count in self.counts.items():
            more = count - taken.get((field, message), 0)
            if more > 0:
                where = f"{field}: " if field else ""
                lines.append(f"  - ... and {more} more line{'s' if more != 1 else ''} like this: {where}{message}")
        stop = f"; stopped reading at line {stopped_at}" if stopped_at is not None else ""
        return f"{self.display}: {self.lines} problem line(s) in the trace{stop}\n" + "\n".join(lines)


def _pick(row: dict[str, Any], field: str) -> tuple[str, Any]:
    """(name used, value) of a field under any accepted name; a duplicate under two names is reported by the caller."""
    names = FIELD_ALIASES[field]
    for name in names:
        value = row.get(name, _MISSING)
        if value is not _MISSING:
            return name, value
    return names[0], _MISSING


def _both_aliases(row: dict[str, Any], field: str) -> bool:
    names = FIELD_ALIASES[field]
    return len(names) > 1 and names[0] in row and names[1] in row


class _Scan:
    """One pass over the file; the hot path checks types with ``type() is`` and leaves wording to slow helpers."""

    def __init__(self, display: str, max_seq_len: int, block_size: int, shown: int, over_context: str = "refuse"):
        self.display = display
        self.max_seq_len = max_seq_len
        self.over_context = over_context
        self.over_requests = 0
        self.over_tokens = 0
        self.total_tokens = 0
        self.block_size = block_size
        self.problems = _Problems(display, shown)
        self.requests = 0
        self.sessions: set[str] = set()
        self.first_ms = float("inf")
        self.last_ms = float("-inf")
        self.max_input = 0
        self.max_output = 0
        self.backwards = 0
        self.first_backwards = ""
        self.prev_arrival: float | None = None
        self.stopped_at: int | None = None
        self.constants: list[str] = []   # NaN/Infinity literals met on the current line
        self.duplicates: list[tuple[dict[str, Any], str]] = []   # (object, repeated known key) on the current line

    def _constant(self, name: str) -> float:
        self.constants.append(name)
        return float(name)

    def _object(self, pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        obj = dict(pairs)
        if len(obj) != len(pairs):
            seen: set[str] = set()
            for key, _ in pairs:
                if key in seen and key in _KNOWN_FIELDS:
                    self.duplicates.append((obj, key))
                seen.add(key)
        return obj

    def run(self, f: Any) -> None:
        add = self.problems.add
        readline = f.readline
        loads = json.JSONDecoder(parse_constant=self._constant, object_pairs_hook=self._object).decode
        limit = MAX_LINE_BYTES + 1
        offset = 0
        lineno = 0
        while True:
            raw = readline(limit)
            if not raw:
                return
            lineno += 1
            start = offset
            offset += len(raw)
            nul = raw.find(b"\0")
            if nul >= 0:
                self.requests += 1
                add(lineno, "", "not a text JSONL file (a trace is UTF-8 JSON, one object per line)",
                    detail=f"NUL byte at byte offset {start + nul}")
                self.stopped_at = lineno
                return
            if len(raw) == limit and not raw.endswith(b"\n"):
                while raw and not raw.endswith(b"\n"):
                    raw = readline(limit)
                    offset += len(raw)
                self.requests += 1
                add(lineno, "", f"line longer than {MAX_LINE_BYTES // (1 << 20)} MiB; skipped")
                continue
            if raw.isspace():
                continue
            self.requests += 1
            try:
                text = raw.decode()
            except UnicodeDecodeError as exc:
                add(lineno, "", "not valid UTF-8",
                    detail=f"byte 0x{raw[exc.start]:02x} at byte offset {start + exc.start} of the file")
                continue
            try:
                row = loads(text)
            except json.JSONDecodeError as exc:
                add(lineno, "", f"not valid JSON: {exc.msg}", detail=f"at column {exc.colno}")
                self._clear()
                continue
            except RecursionError:
                add(lineno, "", "not valid JSON: nested too deeply")
                self._clear()
                continue
            if type(row) is not dict:
                add(lineno, "", f"must be a JSON object, got {_JSON_TYPE.get(type(row), 'a value')}")
                self._clear()
                continue
            self._row(row, lineno)

    def _row(self, row: dict[str, Any], lineno: int) -> None:
        add = self.problems.add
        lines_before = self.problems.lines
        for field in ("timestamp", "input_length", "output_length", "delay"):
            if _both_aliases(row, field):
                a, b = FIELD_ALIASES[field]
                add(lineno, a, f"given twice (as {a} and {b}); the replay refuses the line")
        if self.duplicates:
            for key in dict.fromkeys(key for obj, key in self.duplicates if obj is row):
                add(lineno, key, "given twice; the replay refuses the line")

        ts_name, ts = _pick(row, "timestamp")
        ts_ok = (type(ts) is float or type(ts) is int) and 0 <= ts <= _FLOAT_MAX
        if not ts_ok:
            self._bad_number(lineno, "timestamp", ts_name, ts)
        isl_name, isl = _pick(row, "input_length")
        isl_ok = type(isl) is int and isl > 0
        if not isl_ok:
            self._bad_length(lineno, "input_length", isl_name, isl)
        osl_name, osl = _pick(row, "output_length")
        osl_ok = type(osl) is int and osl > 0
        if not osl_ok:
            self._bad_length(lineno, "output_length", osl_name, osl)
        if isl_ok and (isl > self.max_seq_len or (osl_ok and isl + osl > self.max_seq_len)):
            self.over_requests += 1
            self.over_tokens += isl + (osl if osl_ok else 0)
            if self.over_context == "refuse" and isl > self.max_seq_len:
                add(lineno, isl_name, f"exceeds the context length {self.max_seq_len} (context_length or the "
                    "model's max context); a server with this context rejects the request", isl)
            elif self.over_context == "refuse":
                add(lineno, osl_name, f"input_length + output_length exceeds the context length "
                    f"{self.max_seq_len} (context_length or the model's max context); a server with this "
                    "context cannot generate every output token", detail=f"{isl} + {osl} = {isl + osl}")
        self._hash_ids(row, lineno, isl if isl_ok else None)

        session = row.get("session_id")
        first_turn = True
        if session is not None:
            if type(session) is str:
                first_turn = session not in self.sessions
                self.sessions.add(session)
            else:
                add(lineno, "session_id", "must be a string", session)
        delay_name, delay = _pick(row, "delay")
        if delay is not _MISSING and delay is not None:
            if not ((type(delay) is float or type(delay) is int) and 0 <= delay <= _FLOAT_MAX):
                self._bad_number(lineno, "delay", delay_name, delay)
            elif first_turn:
                add(lineno, delay_name, "set on a first turn; the replay accepts a delay only on a later turn "
                    "of a session_id (it is the wait after the previous turn)")

        if self.constants:
            if self.problems.lines == lines_before:
                add(lineno, "", "NaN/Infinity is not valid JSON; the replay refuses the line",
                    detail=", ".join(self.constants[:3]))
        self._clear()
        if self.problems.lines != lines_before:
            return
        if ts < self.first_ms:
            self.first_ms = ts
        if ts > self.last_ms:
            self.last_ms = ts
        self.total_tokens += isl + osl
        if isl > self.max_input:
            self.max_input = isl
        if osl > self.max_output:
            self.max_output = osl
        if first_turn:   # later turns' timestamps are not arrivals (they follow the previous turn)
            prev = self.prev_arrival
            if prev is not None and ts < prev:
                self.backwards += 1
                if self.backwards == 1:
                    self.first_backwards = f"line {lineno} ({_ms(ts)} ms after {_ms(prev)} ms)"
            self.prev_arrival = ts

    def _clear(self) -> None:
        """Forget the current line's parse notes (kept in lists so the hot path only tests them for emptiness)."""
        if self.constants:
            self.constants.clear()
        if self.duplicates:
            self.duplicates.clear()

    def _hash_ids(self, row: dict[str, Any], lineno: int, isl: int | None) -> None:
        ids = row.get("hash_ids", _MISSING)
        add = self.problems.add
        if ids is _MISSING:
            add(lineno, "hash_ids", f"missing; the replay needs one id per {self.block_size}-token block "
                "of the prompt")
            return
        if type(ids) is not list:
            add(lineno, "hash_ids", "must be a list of integers", ids)
            return
        if ids and (set(map(type, ids)) != _INT_ONLY or min(ids) < 0 or max(ids) >= HASH_ID_LIMIT):
            index, bad = next((i, h) for i, h in enumerate(ids)
                              if type(h) is not int or not 0 <= h < HASH_ID_LIMIT)
            add(lineno, "hash_ids", "must hold integers 0 <= id < 2**64", detail=f"{excerpt(bad)} at index {index}")
            return
        if isl is None:
            return
        expected = -(-isl // self.block_size)
        if len(ids) < expected:
            add(lineno, "hash_ids", f"too few ids: {self.block_size}-token blocks need ceil(input_length / "
                f"{self.block_size}) ids; the replay refuses it (exceeds hash_ids capacity)",
                detail=f"{len(ids)} for input_length {isl}, expected {expected}")
        elif len(ids) > expected:
            add(lineno, "hash_ids", f"too many ids: {self.block_size}-token blocks need ceil(input_length / "
                f"{self.block_size}) ids; extra ids do not match the prompt",
                detail=f"{len(ids)} for input_length {isl}, expected {expected}")

    def _bad_number(self, lineno: int, field: str, name: str, value: Any) -> None:
        """Why a millisecond value (timestamp, delay) is refused."""
        add = self.problems.add
        if value is _MISSING:
            add(lineno, name, f"missing (accepted names: {', '.join(FIELD_ALIASES[field])})")
        elif type(value) is not float and type(value) is not int:
            add(lineno, name, "must be a number of milliseconds", value)
        elif value < 0:
            if field == "timestamp":
                add(lineno, name, "timestamps must be >= 0 ms (the replay re-bases arrivals; a negative one "
                    "shifts every request)", value)
            else:
                add(lineno, name, "must be >= 0 ms", value)
        else:
            add(lineno, name, "must be a finite number of milliseconds", value)

    def _bad_length(self, lineno: int, field: str, name: str, value: Any) -> None:
        if value is _MISSING:
            self.problems.add(lineno, name, f"missing (accepted names: {', '.join(FIELD_ALIASES[field])})")
        else:
            self.problems.add(lineno, name, "must be a positive integer", value)

    def summary(self, path: Path) -> TraceSummary:
        warnings: list[str] = []
        if self.backwards:
            warnings.append(f"{self.display}: timestamps go backwards at {self.backwards} line(s), first at "
                            f"{self.first_backwards}; the replay re-orders arrivals by time")
        return TraceSummary(path, self.requests, len(self.sessions), float(self.first_ms), float(self.last_ms),
                            self.max_input, self.max_output, tuple(warnings), self.over_context,
                            self.over_requests, self.over_tokens, self.total_tokens)


_CACHE: dict[tuple[str, str, int, int, int, int, str], TraceSummary] = {}
OVER_CONTEXT_HINT = ("set workload.over_context: drop (leave them out of the replay) or fail (keep them as requests "
                     "the server rejects at once), or raise context_length")


@dataclass(frozen=True)
class TraceRow:
    """What Spica reads of one request (the replay reads the file itself)."""

    timestamp_ms: float
    input_length: int
    output_length: int


def _field(row: dict[str, Any], field: str) -> Any:
    for name in FIELD_ALIASES[field]:
        if name in row:
            return row[name]
    raise KeyError(field)


def trace_lines(path: str | Path) -> Iterator[tuple[str, TraceRow]]:
    """Each non-blank line of a trace with its fields: the one place trace rows are parsed.

    Meant for a trace ``check_trace`` accepted; a line that changed since raises TraceError naming it."""
    with open(path) as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                parsed = TraceRow(float(_field(row, "timestamp")), int(_field(row, "input_length")),
                                  int(_field(row, "output_length")))
            except (ValueError, KeyError, TypeError) as exc:
                raise TraceError(f"{path}:{lineno}: not a mooncake row ({type(exc).__name__}); need timestamp, "
                                 "input_length, output_length") from None
            yield line, parsed


def read_trace(path: str | Path) -> Iterator[TraceRow]:
    """The rows of a trace ``check_trace`` accepted, in file order."""
    return (row for _, row in trace_lines(path))


def check_trace(path: str | Path, *, max_seq_len: int, block_size: int = TRACE_BLOCK_SIZE,
                shown: int = DEFAULT_SHOWN, over_context: str = "refuse") -> TraceSummary:
    """Validate a mooncake trace against the replay's format and the context length; raises TraceError listing problems.

    ``max_seq_len`` is the longest sequence the deployment serves (``context_length`` or the model's max context).
    Requests over it are problems under ``over_context`` ``refuse``; under ``drop`` and ``fail`` they are counted
    in the summary instead (the replay leaves them out, see ``spica_core.evaluate.replay_traces.fitted_trace``).
    A second call on an unchanged file (same path spelling, size and mtime) returns the cached summary.
    """
    display = str(path)
    path = Path(path)
    try:
        resolved = path.resolve()
        before = os.stat(resolved)
    except FileNotFoundError:
        raise TraceError(f"{display}: trace file not found") from None
    except OSError as exc:
        raise TraceError(f"{display}: cannot read the trace ({exc.strerror or exc})") from None
    key = (display, str(resolved), before.st_size, before.st_mtime_ns, max_seq_len, block_size, over_context)
    cached = _CACHE.get(key)
    if cached is not None:
        return cached
    scan = _Scan(display, max_seq_len, block_size, shown, over_context)
    try:
        with open(resolved, "rb") as f:
            scan.run(f)
        after = os.stat(resolved)
    except IsADirectoryError:
        raise TraceError(f"{display}: is a directory, not a trace file") from None
    except OSError as exc:
        raise TraceError(f"{display}: cannot read the trace ({exc.strerror or exc})") from None
    if scan.problems.lines:
        message = scan.problems.render(scan.stopped_at)
        if scan.over_requests and over_context == "refuse":
            n = scan.over_requests
            message += (f"\n  {n:,} request{'s' if n != 1 else ''} exceed{'s' if n == 1 else ''} the context length "
                        f"{max_seq_len:,} (workload.over_context: refuse); {OVER_CONTEXT_HINT}")
        raise TraceError(message)
    if scan.requests == 0:
        raise TraceError(f"{display}: holds no requests (every line is blank); a mooncake trace has one JSON "
                         "object per request")
    result = scan.summary(path)
    if (after.st_size, after.st_mtime_ns) == (before.st_size, before.st_mtime_ns):
        _CACHE[key] = result
    return result


__all__ = ["DEFAULT_SHOWN", "FIELD_ALIASES", "HASH_ID_LIMIT", "MAX_LINE_BYTES",
           "TRACE_BLOCK_SIZE", "TraceRow", "TraceSummary", "check_trace", "read_trace", "trace_lines"]

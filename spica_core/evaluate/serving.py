"""What the replay leaves out of a served request: the serving path before the first token.

The replay's TTFT is queueing plus the prefill passes of the engine. A request served by a real
deployment also crosses the frontend (HTTP, chat handling, tokenization), the engine's request
intake and scheduling step, and the first streamed chunk back to the client. On the measured rows
of ``bench/bench_accuracy.py`` that path is worth a roughly constant time per request on SGLang
and TRT-LLM and none beyond the replay on vLLM, once its prefill passes pay their per-layer
dispatch time (``spica_core.space.profiles.PREFILL_DISPATCH_MS_PER_LAYER``).

``data/serving.json`` ships that constant per backend, ``request_overhead_ms``, and the window a closed loop
of identical requests starts over (``start_window_ms``, read by ``spica_core.evaluate.workload``). The accuracy
benchmark fits it so that the median of measured ÷ predicted TTFT over the backend's rows is 1
(never below 0 ms), and judges it out of fold, each model's rows predicted by a constant fitted
without them (docs/accuracy.md). The time is spent outside the engine, so it delays the request's
first token and completion as its client sees them but occupies no GPU: the replay runs unchanged,
its TTFT and end-to-end latencies are shifted by the constant, and an SLA on them is replayed
with the constant taken off.

One engine setting adds a wait of the same kind that the replay's scheduler does not have: SGLang's
``--scheduler-recv-interval`` N (``search_space.scheduler_recv_interval``, default 1). The scheduler looks
for new requests only every N decode iterations (at once after a prefill batch), so on an aggregated worker
a request arriving at a random moment waits (N − 1)/2 decode steps on average before it is scheduled. The
evaluation adds that many of the replay's mean inter-token gaps (``polling_delay_ms``) to TTFT and E2E like
the constant, and counts the SLA again request by request with it. A prefill worker looks after every
prefill batch and its first token comes from there, so a disaggregated deployment pays none of it in TTFT.
"""
from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from spica_core.errors import BandFileError
from spica_core.evaluate.data_files import read_data_file

SERVING_FILE = Path(__file__).parent / "data" / "serving.json"
SERVING_SCHEMA = 1
SHIFTED_SUFFIXES = ("_ttft_ms", "_e2e_latency_ms")   # client-visible latencies that include the serving path
UNSHIFTED_PREFIXES = ("std_",)                       # a constant moves no spread
SHIFTED_PER_REQUEST = ("ttft_ms", "e2e_latency_ms")
SLA_SHIFTED = ("sla_ttft_ms", "sla_e2e_ms")
SLA_FLOOR_MS = 1e-3   # an SLA the serving path alone misses: nothing meets it


@dataclass(frozen=True)
class ServingTable:
    """The shipped serving-path constants, read once per process."""

    path: str
    request_overhead_ms: Mapping[str, float]   # backend -> ms added to every request's TTFT and E2E
    start_window_ms: float                     # a closed loop of identical requests starts over this window

    def overhead_ms(self, backend: str) -> float:
        return float(self.request_overhead_ms.get(backend, 0.0))


def polling_delay_ms(backend: str, mode: str, recv_interval: int, mean_itl_ms: float | None) -> float:
    """The mean wait before an SGLang scheduler polling every ``recv_interval`` decode iterations sees a new
    request: (N − 1)/2 decode steps of ``mean_itl_ms``, on an aggregated worker; 0 otherwise."""
    if backend != "sglang" or mode != "agg" or recv_interval <= 1 or not mean_itl_ms or mean_itl_ms <= 0:
        return 0.0
    return (recv_interval - 1) / 2 * float(mean_itl_ms)


def served_report(report: Mapping[str, Any], overhead_ms: float, polling_ms: float = 0.0) -> dict[str, Any]:
    """The replay's summary as the client sees it: TTFT and E2E statistics later by the serving path
    (``overhead_ms``) and the scheduler's polling wait (``polling_ms``)."""
    out = dict(report)
    shift = overhead_ms + polling_ms
    if shift:
        for key, value in report.items():
            if (key.endswith(SHIFTED_SUFFIXES) and not key.startswith(UNSHIFTED_PREFIXES)
                    and isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)):
                out[key] = float(value) + shift
    out["serving_overhead_ms"] = float(overhead_ms)
    if polling_ms:
        out["polling_delay_ms"] = float(polling_ms)
    return out


def served_requests(per_request: list[dict[str, Any]] | None, shift_ms: float) -> list[dict[str, Any]] | None:
    """Per-request records with their TTFT and E2E later by ``shift_ms`` (timestamps stay the engine's)."""
    if per_request is None or not shift_ms:
        return per_request
    return [{**r, **{k: float(r[k]) + shift_ms for k in SHIFTED_PER_REQUEST if isinstance(r.get(k), (int, float))}}
            for r in per_request]


def served_sla(sla: Mapping[str, float], overhead_ms: float) -> dict[str, float]:
    """The replay's SLA kwargs with the serving path taken off TTFT and E2E: a request meets the SLA when its
    replayed latency plus the serving path does."""
    return {k: (max(SLA_FLOOR_MS, float(v) - overhead_ms) if k in SLA_SHIFTED else float(v)) for k, v in sla.items()}


def serving_file() -> Path:
    """``SPICA_SERVING_FILE`` when set (a re-run benchmark's own), else the shipped file."""
    return Path(os.environ.get("SPICA_SERVING_FILE") or SERVING_FILE)


def load_serving(path: str | Path | None = None) -> ServingTable:
    """Read and check the serving file; BandFileError names the file and what is wrong with it."""
    return _load(str(Path(path) if path is not None else serving_file()))


@lru_cache(maxsize=4)
def _load(path: str) -> ServingTable:
    fix = "regenerate it with `python bench/bench_accuracy.py --docs-only`, or unset SPICA_SERVING_FILE"
    body = read_data_file(path, "serving", SERVING_SCHEMA, "request_overhead_ms", fix)
    table = body["request_overhead_ms"]
    out: dict[str, float] = {}
    for backend, entry in table.items():
        value = entry.get("ms") if isinstance(entry, dict) else None
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value) or value < 0:
            raise BandFileError(f"serving file {path}: request_overhead_ms[{backend!r}] needs 'ms', a finite "
                                f"number >= 0; {fix}")
        out[str(backend)] = float(value)
    window = body["start_window_ms"].get("ms") if isinstance(body.get("start_window_ms"), dict) else None
    if not isinstance(window, (int, float)) or isinstance(window, bool) or not math.isfinite(window) or window < 0:
        raise BandFileError(f"serving file {path}: start_window_ms needs 'ms', a finite number >= 0; {fix}")
    return ServingTable(path, out, float(window))


__all__ = ["ServingTable", "SERVING_FILE", "load_serving", "polling_delay_ms", "serving_file", "served_report",
           "served_requests", "served_sla"]

"""The ``workload`` section: a mooncake trace to replay, or a synthetic load (lengths, rate or concurrency).

A trace and the synthetic fields exclude each other; a synthetic workload needs exactly one way to load
the deployment.
"""
from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, field_validator, model_validator

from spica_core.config import limits
from spica_core.config.fields import _Model, _at_most, _float_upto, _int_upto, _no_bool
from spica_core.errors import FieldError


def _kv_load(value: Any, path: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise FieldError(path, "must be a number", value, True)
    if not math.isfinite(value) or value < 0:
        raise FieldError(path, "must be finite and >= 0", value, True)
    if value > limits.KV_LOAD_RATIO.maximum:
        raise FieldError(path, limits.over(limits.KV_LOAD_RATIO), value, True)
    return float(value)


_SYNTHETIC_FIELDS = ("isl", "osl", "request_rate", "concurrency", "kv_load_ratio", "num_request_ratio",
                     "start_window_ms")


class Workload(_Model):
    isl: _int_upto(limits.SEQUENCE_TOKENS) | None = None
    osl: _int_upto(limits.SEQUENCE_TOKENS) | None = None
    concurrency: _int_upto(limits.IN_FLIGHT) | None = None
    kv_load_ratio: Any = Field(default=None, description="number >= 0, or [min, max] (pareto only)",
                               json_schema_extra={"anyOf": [{"type": "number", "minimum": 0},
                                                            {"type": "array", "items": {"type": "number"},
                                                             "minItems": 2, "maxItems": 2},
                                                            {"type": "null"}]})
    request_rate: _float_upto(limits.REQUEST_RATE) | None = None
    num_request_ratio: _float_upto(limits.NUM_REQUEST_RATIO) | None = None
    length_spread: Annotated[float, Field(ge=0, lt=1), BeforeValidator(_no_bool)] = Field(
        default=0.0, description="synthetic only: each request's isl and osl drawn uniformly from "
                                 "[(1 - spread) × L, L], as serving benchmarks do (InferenceX: 0.2); 0 gives "
                                 "identical requests (see start_window_ms)")
    start_window_ms: Annotated[float, Field(ge=0, allow_inf_nan=False), BeforeValidator(_no_bool)] | None = Field(
        default=None, description="a closed loop of identical requests (concurrency or kv_load_ratio, length_spread "
                                  "0, single turn, no shared prefix): its first requests arrive evenly over this "
                                  "window instead of at once, as timing noise spreads them on real engines; 0 "
                                  "starts them together, which the replay then runs in lock-step waves; unset: "
                                  "the window fitted on measured rows (docs/accuracy.md)")
    shared_prefix_ratio: Annotated[float, Field(ge=0, le=1)] = 0.0
    num_prefix_groups: _int_upto(limits.PREFIX_GROUPS, minimum=0) = 0
    turns_per_session: _int_upto(limits.TURNS_PER_SESSION) = 1
    inter_turn_delay_ms: Annotated[float, Field(ge=0)] = 0.0
    trace_path: str | None = None
    trace_format: str = "mooncake"
    arrival_speedup_ratio: Annotated[float, Field(ge=limits.ARRIVAL_SLOWDOWN), _at_most(limits.ARRIVAL_SPEEDUP)] = 1.0
    replay_concurrency: _int_upto(limits.IN_FLIGHT) | None = None
    over_context: Literal["refuse", "drop", "fail"] = Field(
        default="refuse", description="requests whose input, or input + output, exceeds the context: refuse the "
                                      "trace, drop them from the replay, or fail them (rejected at once: counted "
                                      "in num_requests and as SLA misses, no GPU time)")

    @field_validator("kv_load_ratio", mode="before")
    @classmethod
    def _kv_load_ratio(cls, value: Any) -> float | list[float] | None:
        if value is None:
            return None
        if isinstance(value, (list, tuple)):
            if len(value) != 2:
                raise FieldError("", "a range must have exactly 2 values [min, max]", value, True)
            lo, hi = (_kv_load(v, f"[{i}]") for i, v in enumerate(value))
            if not lo < hi:
                raise FieldError("", "a range needs min < max", value, True)
            return [lo, hi]
        return _kv_load(value, "")

    @property
    def is_trace(self) -> bool:
        return self.trace_path is not None

    @property
    def staggers(self) -> bool:
        """A closed loop of identical single-turn requests, whose first wave ``start_window_ms`` spreads."""
        return (not self.is_trace and self.request_rate is None and self.length_spread == 0
                and self.turns_per_session == 1 and self.shared_prefix_ratio == 0)

    @property
    def kv_load_range(self) -> tuple[float, float] | None:
        return tuple(self.kv_load_ratio) if isinstance(self.kv_load_ratio, list) else None  # type: ignore[return-value]

    @model_validator(mode="after")
    def _shape(self) -> Workload:
        if self.length_spread > 0 and (self.is_trace or self.shared_prefix_ratio > 0 or self.turns_per_session > 1):
            raise FieldError("length_spread", "applies to a single-turn synthetic workload without shared prefixes "
                             "(trace_path, shared_prefix_ratio and turns_per_session > 1 set lengths their own way)",
                             self.length_spread, True)
        if self.is_trace:
            for name in _SYNTHETIC_FIELDS:
                if getattr(self, name) is not None:
                    raise FieldError(name, "is a synthetic-workload field and cannot be combined with trace_path",
                                     getattr(self, name), True)
            return self
        if self.replay_concurrency is not None:
            raise FieldError("replay_concurrency", "only applies to trace workloads; use concurrency for synthetic",
                             self.replay_concurrency, True)
        loads = [n for n in ("request_rate", "concurrency", "kv_load_ratio") if getattr(self, n) is not None]
        if len(loads) != 1:
            raise FieldError("", "a synthetic workload needs exactly one of request_rate, concurrency, "
                             f"kv_load_ratio (got {loads or 'none'}); or set trace_path")
        for name in ("isl", "osl", "num_request_ratio"):
            if getattr(self, name) is None:
                raise FieldError(name, "is required for a synthetic workload (isl, osl, num_request_ratio)")
        if self.start_window_ms is not None and not self.staggers:
            raise FieldError("start_window_ms", "applies to a closed loop of identical requests (concurrency or "
                             "kv_load_ratio, length_spread 0, turns_per_session 1, shared_prefix_ratio 0)",
                             self.start_window_ms, True)
        load = self.concurrency or self.request_rate
        if load is not None:
            requests = round(float(self.num_request_ratio or 0) * load) * self.turns_per_session
            if requests > limits.REQUESTS_PER_REPLAY.maximum:
                raise FieldError("num_request_ratio", f"gives {requests:,} requests per replay "
                                 f"(num_request_ratio × {'concurrency' if self.concurrency else 'request_rate'} × "
                                 f"turns_per_session); {limits.over(limits.REQUESTS_PER_REPLAY)}",
                                 self.num_request_ratio, True)
        return self


__all__ = ["Workload"]

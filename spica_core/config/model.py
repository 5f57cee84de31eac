"""SmartSearchConfig: the user's YAML as typed, validated, normalised objects (reference §1–§5).

Every model forbids unknown keys. Loading turns pydantic's errors into :class:`Issue` records
that name the YAML path, the offending value and what is allowed (``issues.py``).
"""
from __future__ import annotations

import math
import re
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, Callable, Literal, Union

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    StrictBool,
    StrictInt,
    Tag,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from spica_core.config.issues import issues_from
from spica_core.config.knobs import (
    COMPOSITE_DICT_KEYS,
    COMPOSITE_FIELD_TYPES,
    COMPOSITE_PRESETS,
    COMPOSITE_REQUIRED_KEYS,
    KNOB_DEFAULTS,
    PREDICTOR_FAMILIES,
    SEARCH_CHOICES,
)
from spica_core.config import limits
from spica_core.config.limits import Limit
from spica_core.config.yaml_loading import load_yaml
from spica_core.errors import ConfigError, FieldError, Issue


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_default=True, allow_inf_nan=False)


# ---------------------------------------------------------------- knob item types


def _member_of(knob: str) -> Callable[[Any], Any]:
    allowed = SEARCH_CHOICES[knob]

    def check(value: Any) -> Any:
        if value not in allowed or isinstance(value, bool):
            raise ValueError(f"not an allowed value; allowed: {list(allowed)}")
        return value

    return check


def _no_bool(value: Any) -> Any:
    if isinstance(value, bool):
        raise ValueError("a number is required, not a boolean")
    return value


def _choices(knob: str, item: type) -> Any:
    """A non-empty list, every entry in SEARCH_CHOICES[knob]; duplicates dropped, order kept."""
    element = Annotated[item, BeforeValidator(_no_bool), AfterValidator(_member_of(knob))]
    return Annotated[list[element], Field(min_length=1), AfterValidator(_dedupe)]  # type: ignore[valid-type]


def _atomic(knob: str, item: type) -> Any:
    """A list knob defaulting to KNOB_DEFAULTS[knob]."""
    return Annotated[_choices(knob, item), Field(default_factory=lambda: list(KNOB_DEFAULTS[knob]),
                                                 description=f"allowed: {list(SEARCH_CHOICES[knob])}")]


def _one_or_list(value: Any) -> Any:
    """A knob that takes one value to pin or a list to search."""
    return [value] if isinstance(value, str) else value


def _dedupe(values: list[Any]) -> list[Any]:
    seen: list[Any] = []
    for v in values:
        if v not in seen:
            seen.append(v)
    return seen


def _is_integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


_HAS_TYPE: dict[str, Callable[[Any], bool]] = {
    "a boolean": lambda v: isinstance(v, bool),
    "an integer": _is_integer,
    "an integer or null": lambda v: v is None or _is_integer(v),
    "a number": lambda v: _is_integer(v) or (isinstance(v, float) and math.isfinite(v)),
}


def _check_dict_values(entry: dict[str, Any]) -> None:
    """The predictor family and each value's type, so a bad entry fails here, not in a worker."""
    for key, value in entry.items():
        if key == "load_predictor":
            if value not in PREDICTOR_FAMILIES:
                raise FieldError(key, f"unknown load predictor family; allowed: {list(PREDICTOR_FAMILIES)}",
                                 value, True)
        elif not _HAS_TYPE[COMPOSITE_FIELD_TYPES[key]](value):
            raise FieldError(key, f"must be {COMPOSITE_FIELD_TYPES[key]}", value, True)


def _composite_entry(knob: str) -> Callable[[Any], Any]:
    presets = COMPOSITE_PRESETS[knob]
    allowed_keys = COMPOSITE_DICT_KEYS[knob]
    required = COMPOSITE_REQUIRED_KEYS[knob]

    def check(entry: Any) -> Any:
        if isinstance(entry, str):
            if entry not in presets:
                raise ValueError(f"unknown preset; allowed presets: {list(presets)} (or a dict entry)")
            return entry
        if isinstance(entry, dict):
            if not entry:
                raise ValueError(f"an empty dict is not allowed; give the keys {list(required)}")
            unknown = [k for k in entry if k not in allowed_keys]
            if unknown:
                raise ValueError(f"unknown key(s) {unknown}; allowed keys: {list(allowed_keys)}")
            missing = [k for k in required if k not in entry]
            if missing:
                raise ValueError(f"missing key(s) {missing}: a dict entry must be self-contained "
                                 f"(required: {list(required)})")
            _check_dict_values(entry)
            return entry
        raise ValueError(f"must be a preset id {list(presets)} or a dict with keys {list(allowed_keys)}")

    return check


def _composite(knob: str) -> Any:
    element = Annotated[Union[str, dict[str, Any]], BeforeValidator(_composite_entry(knob))]
    return Annotated[
        list[element],  # type: ignore[valid-type]
        Field(default_factory=lambda: list(KNOB_DEFAULTS[knob]), min_length=1,
              description=f"preset ids {list(COMPOSITE_PRESETS[knob])} and/or dict entries with keys "
                          f"{list(COMPOSITE_DICT_KEYS[knob])}"),
        AfterValidator(_dedupe),
    ]


PositiveInt = Annotated[StrictInt, Field(gt=0)]


def _at_most(limit: Limit) -> Any:
    """A bound whose message says why (pydantic's own ``le`` message gives only the number)."""
    def check(value: Any) -> Any:
        if value > limit.maximum:
            raise ValueError(limits.over(limit))
        return value

    return AfterValidator(check)


def _int_upto(limit: Limit, minimum: int = 1) -> Any:
    return Annotated[StrictInt, Field(ge=minimum, json_schema_extra={"maximum": limit.maximum}), _at_most(limit)]


def _float_upto(limit: Limit) -> Any:
    return Annotated[float, Field(gt=0, json_schema_extra={"maximum": limit.maximum}), BeforeValidator(_no_bool),
                     _at_most(limit)]


ShapeSize = _int_upto(limits.WORKER_GPUS)


class ParallelShape(_Model):
    """One worker shape with its replica count; ``pp`` is accepted but only 1 is ever legal."""

    tp: ShapeSize
    attention_dp: ShapeSize = 1
    moe_tp: ShapeSize = 1
    moe_ep: ShapeSize = 1
    pp: ShapeSize = 1
    replicas: ShapeSize = 1


class DisaggParallel(_Model):
    prefill: ParallelShape
    decode: ParallelShape


def _parallel_kind(value: Any) -> str:
    """Which mode an entry is shaped for: roles (prefill / decode) make it disagg."""
    if isinstance(value, DisaggParallel) or (isinstance(value, dict) and ("prefill" in value or "decode" in value)):
        return "disagg"
    return "agg"


_PIN_SHAPES = {"agg": "{tp: ..., attention_dp, moe_tp, moe_ep, pp, replicas}",
               "disagg": "{prefill: {tp: ...}, decode: {tp: ...}}"}


ParallelEntry = Annotated[
    Union[Annotated[ParallelShape, Tag("agg")], Annotated[DisaggParallel, Tag("disagg")]],
    Discriminator(_parallel_kind),
]


# ---------------------------------------------------------------- search_space (§2)


class SearchSpace(_Model):
    # deployment (§2.2)
    deployment_mode: _atomic("deployment_mode", str)
    backend: _atomic("backend", str)
    parallel_configs: list[ParallelEntry] = Field(
        default_factory=list, description="[] derives the pool; one entry pins; several form a menu")
    model_name: str = Field(min_length=1, description="Hugging Face id bundled with aiconfigurator-core, or a local folder")
    hardware_sku: str = Field(min_length=1, description="aiconfigurator-core system id, e.g. h200_sxm")
    gpu_budget: _int_upto(limits.GPU_BUDGET) = 32
    min_gpu_budget: _int_upto(limits.GPU_BUDGET) | None = None
    min_endpoint: _int_upto(limits.GPU_BUDGET) | None = None
    context_length: _int_upto(limits.SEQUENCE_TOKENS) | None = None
    startup_time: Annotated[float, Field(ge=0), BeforeValidator(_no_bool), _at_most(limits.STARTUP_SECONDS)] | None = None
    aic_nextn: Annotated[StrictInt, Field(ge=0, le=5)] | None = None

    # precision (weights/compute, KV cache): one value pins, a list is searched
    quantization: Annotated[_choices("quantization", str), BeforeValidator(_one_or_list)] | None = Field(
        default=None, description="weight/compute precision (AIC quant-mode names, bf16 for bfloat16); one value "
                                  "or a list; null: the checkpoint's own precision")
    kv_cache_dtype: Annotated[_choices("kv_cache_dtype", str), BeforeValidator(_one_or_list)] = Field(
        default_factory=lambda: list(KNOB_DEFAULTS["kv_cache_dtype"]),
        description=f"KV-cache dtype {list(SEARCH_CHOICES['kv_cache_dtype'])}; one value or a list")

    # prefill / decode / agg engines (§2.3–§2.5)
    prefill_max_num_batched_tokens: _atomic("prefill_max_num_batched_tokens", int)
    prefill_max_num_seqs: _atomic("prefill_max_num_seqs", int)
    prefill_block_size: PositiveInt = 64
    prefill_gpu_memory_utilization: Annotated[float, Field(gt=0, le=1)] = 0.9
    prefill_enable_prefix_caching: StrictBool = True
    decode_max_num_batched_tokens: _atomic("decode_max_num_batched_tokens", int)
    decode_max_num_seqs: _atomic("decode_max_num_seqs", int)
    decode_block_size: PositiveInt = 64
    decode_gpu_memory_utilization: Annotated[float, Field(gt=0, le=1)] = 0.9
    decode_enable_prefix_caching: StrictBool = False
    agg_max_num_batched_tokens: _atomic("agg_max_num_batched_tokens", int)
    agg_max_num_seqs: _atomic("agg_max_num_seqs", int)
    agg_block_size: PositiveInt = 64
    agg_gpu_memory_utilization: Annotated[float, Field(gt=0, le=1)] = 0.9
    agg_enable_prefix_caching: StrictBool = True

    # KV manager: G2 host offload (§2.6)
    num_g2_blocks: _int_upto(limits.G2_BLOCKS, minimum=0) = 0
    kv_bytes_per_token: PositiveInt | None = None
    bandwidth_g1_to_g2_gbps: Annotated[float, Field(gt=0)] | None = None
    bandwidth_g2_to_g1_gbps: Annotated[float, Field(gt=0)] | None = None
    offload_batch_size: PositiveInt | None = None

    # router (§2.7) and admission control (§2.8)
    router_mode: _atomic("router_mode", str)
    overlap_score_credit: _atomic("overlap_score_credit", float)
    prefill_load_scale: _atomic("prefill_load_scale", float)
    router_temperature: _atomic("router_temperature", float)
    host_cache_hit_weight: _atomic("host_cache_hit_weight", float)
    disk_cache_hit_weight: _atomic("disk_cache_hit_weight", float)
    active_decode_blocks_threshold: PositiveInt | None = None
    active_prefill_tokens_threshold: PositiveInt | None = None
    active_prefill_tokens_threshold_frac: Annotated[float, Field(gt=0)] | None = None
    no_admission_control: StrictBool = False

    # planner composites and load predictor (§2.9)
    planner_scaling_policy: _composite("planner_scaling_policy")
    planner_fpm_sampling: _composite("planner_fpm_sampling")
    planner_load_sensitivity: _composite("planner_load_sensitivity")
    load_predictor_candidates: _composite("load_predictor_candidates")

    @field_validator("parallel_configs", mode="before")
    @classmethod
    def _pins_fit_the_mode(cls, value: Any, info: ValidationInfo) -> Any:
        """A pin shaped for the other mode, reported as written (before the model fills defaults)."""
        modes = info.data.get("deployment_mode")
        if not isinstance(value, list) or modes is None or len(modes) != 1:
            return value
        mode = modes[0]
        for i, entry in enumerate(value):
            if _parallel_kind(entry) != mode:
                article = "an" if mode == "agg" else "a"
                raise FieldError(f"[{i}]", f"deployment_mode is [{mode}], so {article} {mode} entry must look like "
                                 f"{_PIN_SHAPES[mode]}", entry, True)
        return value

    @model_validator(mode="after")
    def _rules(self) -> SearchSpace:
        if self.min_gpu_budget is not None and self.min_gpu_budget > self.gpu_budget:
            raise FieldError("min_gpu_budget", f"must satisfy 0 < min_gpu_budget <= gpu_budget ({self.gpu_budget})",
                             self.min_gpu_budget, True)
        if self.num_g2_blocks > 0 and self.kv_bytes_per_token is None:
            raise FieldError("kv_bytes_per_token",
                             "is required when num_g2_blocks > 0 (host offload needs the KV size per token)")
        if "kv_router" in self.router_mode:
            for name in ("active_decode_blocks_threshold", "active_prefill_tokens_threshold",
                         "active_prefill_tokens_threshold_frac"):
                if getattr(self, name) is not None:
                    raise FieldError(name, "admission control is not supported by the Dynamo replay API when "
                                     "router_mode includes kv_router; leave it unset or search round_robin only",
                                     getattr(self, name), True)
            if self.no_admission_control:
                raise FieldError("no_admission_control", "must be false when router_mode includes kv_router "
                                 "(not supported by the Dynamo replay API)", True, True)
        if self.parallel_configs and len(self.deployment_mode) != 1:
            raise FieldError("deployment_mode", "must list exactly one mode when parallel_configs is set",
                             self.deployment_mode, True)
        return self


# ---------------------------------------------------------------- workload (§5)


def _kv_load(value: Any, path: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise FieldError(path, "must be a number", value, True)
    if not math.isfinite(value) or value < 0:
        raise FieldError(path, "must be finite and >= 0", value, True)
    if value > limits.KV_LOAD_RATIO.maximum:
        raise FieldError(path, limits.over(limits.KV_LOAD_RATIO), value, True)
    return float(value)


_SYNTHETIC_FIELDS = ("isl", "osl", "request_rate", "concurrency", "kv_load_ratio", "num_request_ratio")


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
                                 "identical requests, which a closed loop runs in lock-step waves")
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
        load = self.concurrency or self.request_rate
        if load is not None:
            requests = round(float(self.num_request_ratio or 0) * load) * self.turns_per_session
            if requests > limits.REQUESTS_PER_REPLAY.maximum:
                raise FieldError("num_request_ratio", f"gives {requests:,} requests per replay "
                                 f"(num_request_ratio × {'concurrency' if self.concurrency else 'request_rate'} × "
                                 f"turns_per_session); {limits.over(limits.REQUESTS_PER_REPLAY)}",
                                 self.num_request_ratio, True)
        return self


# ---------------------------------------------------------------- goal (§4)


class OptimizationTarget(str, Enum):
    throughput = "throughput"
    throughput_per_gpu = "throughput_per_gpu"
    throughput_per_user = "throughput_per_user"
    e2e_latency = "e2e_latency"
    goodput = "goodput"
    goodput_per_gpu = "goodput_per_gpu"
    min_gpus = "min_gpus"
    pareto = "pareto"


GOODPUT_TARGETS = frozenset({OptimizationTarget.goodput, OptimizationTarget.goodput_per_gpu})
MINIMIZED_TARGETS = frozenset({OptimizationTarget.e2e_latency, OptimizationTarget.min_gpus})
DEFAULT_SLA_ATTAINMENT = 0.9   # the share of requests that must meet an SLA unless goal.sla_attainment says otherwise
DEFAULT_PARETO = (OptimizationTarget.throughput_per_gpu, OptimizationTarget.throughput_per_user)


class SLATarget(_Model):
    ttft_ms: Annotated[float, Field(gt=0)] | None = None
    itl_ms: Annotated[float, Field(gt=0)] | None = None
    e2e_ms: Annotated[float, Field(gt=0)] | None = None

    @property
    def satisfies_goodput(self) -> bool:
        return self.e2e_ms is not None or (self.ttft_ms is not None and self.itl_ms is not None)

    @model_validator(mode="after")
    def _one_form(self) -> SLATarget:
        """Dynamo's replay refuses e2e together with ttft/itl, so a mixed SLA would be scored on part of it."""
        if self.e2e_ms is not None and (self.ttft_ms is not None or self.itl_ms is not None):
            raise FieldError("", "e2e_ms cannot be combined with ttft_ms or itl_ms (Dynamo's replay refuses the "
                             "mix); set either e2e_ms alone, or ttft_ms and/or itl_ms",
                             self.model_dump(exclude_none=True), True)
        return self


class OptimizationGoal(_Model):
    target: OptimizationTarget = OptimizationTarget.throughput
    sla: SLATarget | None = None
    pareto_objectives: list[OptimizationTarget] | None = None
    sla_attainment: Annotated[float, Field(ge=0, le=1), BeforeValidator(_no_bool)] | None = Field(
        default=None, description="the share of requests (rejected ones included) that must meet the SLA at today's "
                                  "traffic; a candidate below it ranks after every one that meets it. Default 0.9 "
                                  "when goal.sla is set; 0: the SLA enters goodput only")
    sla_confidence: Annotated[float, Field(ge=0.5, le=0.99), BeforeValidator(_no_bool)] = Field(
        default=0.5, description="the SLA must hold at this quantile of the candidate's error band on measured "
                                 "GPUs; 0.5 is the point prediction")
    headroom_max: Annotated[float, Field(ge=1, json_schema_extra={"maximum": limits.TRAFFIC_SCALE.maximum}),
                            BeforeValidator(_no_bool), _at_most(limits.TRAFFIC_SCALE)] = Field(
        default=4.0, description="the largest traffic scale headroom looks for")
    headroom_attainment: Annotated[float, Field(gt=0, le=1), BeforeValidator(_no_bool)] | None = Field(
        default=None, description="the share of requests that must meet the SLA for a traffic scale to hold; "
                                  "default: sla_attainment (0.9 when that is 0)")
    robust_scale: Annotated[float, Field(ge=1, json_schema_extra={"maximum": limits.TRAFFIC_SCALE.maximum}),
                            BeforeValidator(_no_bool), _at_most(limits.TRAFFIC_SCALE)] = Field(
        default=1.0, description="rank by the worst score over traffic scales 1 and this (1: off)")

    @property
    def objectives(self) -> tuple[OptimizationTarget, ...]:
        """The effective objective set: {target}, or the resolved Pareto list."""
        if self.target is OptimizationTarget.pareto:
            return tuple(self.pareto_objectives) if self.pareto_objectives else DEFAULT_PARETO
        return (self.target,)

    @property
    def is_pareto(self) -> bool:
        return self.target is OptimizationTarget.pareto

    @property
    def required_attainment(self) -> float:
        """The share of requests that must meet the SLA for a candidate to meet it (0: no requirement)."""
        return self.sla_attainment or 0.0

    @property
    def headroom_share(self) -> float:
        """The attainment a traffic scale must keep to hold: headroom ≥ 1 exactly when the candidate meets
        the requirement, unless headroom_attainment says otherwise."""
        return self.headroom_attainment or self.required_attainment or DEFAULT_SLA_ATTAINMENT

    @model_validator(mode="after")
    def _rules(self) -> OptimizationGoal:
        if self.sla is None:
            if self.sla_attainment is not None:
                raise FieldError("sla_attainment", "is the share of requests that must meet goal.sla, and goal.sla "
                                 "is not set; add an SLA or remove sla_attainment", self.sla_attainment, True)
            if self.target is OptimizationTarget.min_gpus:
                raise FieldError("sla", "target min_gpus (the fewest GPUs that meet the SLA) needs an SLA: set "
                                 "ttft_ms, itl_ms and/or e2e_ms", None, True)
        elif self.sla_attainment is None:
            self.sla_attainment = DEFAULT_SLA_ATTAINMENT
        if self.pareto_objectives is not None:
            if not self.is_pareto:
                raise FieldError("pareto_objectives", "is only allowed when target is pareto",
                                 [o.value for o in self.pareto_objectives], True)
            objs = self.pareto_objectives
            if len(objs) < 2:
                raise FieldError("pareto_objectives", "needs at least 2 objectives", [o.value for o in objs], True)
            for bad, why in ((OptimizationTarget.pareto, "pareto cannot be a Pareto objective"),
                             (OptimizationTarget.min_gpus, "min_gpus cannot be a Pareto objective: it is a "
                              "requirement search (the fewest GPUs that meet the SLA); use target min_gpus, or "
                              "throughput_per_gpu / goodput_per_gpu on the front")):
                if bad in objs:
                    raise FieldError(f"pareto_objectives[{objs.index(bad)}]", why, bad.value, True)
            if len(set(objs)) != len(objs):
                raise FieldError("pareto_objectives", "objectives must be distinct", [o.value for o in objs], True)
        if GOODPUT_TARGETS & set(self.objectives):
            if self.sla is None or not self.sla.satisfies_goodput:
                raise FieldError("sla", "a goodput objective needs an SLA with e2e_ms, or both ttft_ms and itl_ms",
                                 self.sla.model_dump(exclude_none=True) if self.sla else None, True)
        return self


# ---------------------------------------------------------------- sweep (§6)


class SweepPolicy(str, Enum):
    rapid = "rapid"
    thorough = "thorough"


class VizierAlgorithm(str, Enum):
    DEFAULT = "DEFAULT"  # GP-UCB-PE
    GAUSSIAN_PROCESS_BANDIT = "GAUSSIAN_PROCESS_BANDIT"
    RANDOM_SEARCH = "RANDOM_SEARCH"
    QUASI_RANDOM_SEARCH = "QUASI_RANDOM_SEARCH"


CLUSTER_ADDRESS = re.compile(r"^(tcp|ray)://(\[[0-9A-Fa-f:.]+\]|[^\s/:\[\]]+):(\d{1,5})$")
CLUSTER_FORMS = "tcp://HOST:PORT (a Dask scheduler) or ray://HOST:PORT (a Ray head); an IPv6 host in brackets"


def parse_cluster_address(text: str) -> tuple[str, str, int]:
    """(scheme, host, port) of a cluster address, the one parser for the config and the evaluator."""
    match = CLUSTER_ADDRESS.fullmatch(str(text).strip())
    if match is None or not 0 < int(match.group(3)) < 65536:
        raise ValueError(f"must be {CLUSTER_FORMS}")
    return match.group(1), match.group(2).strip("[]"), int(match.group(3))


def _cluster_address(value: str) -> str:
    parse_cluster_address(value)
    return value


class SweepConfig(_Model):
    max_rounds: _int_upto(limits.MAX_ROUNDS) = 20
    parallel_evals: _int_upto(limits.PARALLEL_EVALS) | None = Field(
        default=None, description="evaluation processes; None: this machine's cores, at most 16")
    candidates_per_round: _int_upto(limits.CANDIDATES_PER_ROUND) | None = None
    max_eval_seconds: _float_upto(limits.EVAL_SECONDS) | None = 600.0
    seed: _int_upto(limits.SEED, minimum=0) = 0
    policy: SweepPolicy = SweepPolicy.rapid
    algorithm: VizierAlgorithm = VizierAlgorithm.DEFAULT
    cluster: Annotated[str, AfterValidator(_cluster_address)] | None = Field(
        default=None, json_schema_extra={"pattern": CLUSTER_ADDRESS.pattern}, description="run the evaluations on an existing cluster: tcp://HOST:PORT (a Dask "
                                            "scheduler) or ray://HOST:PORT (a Ray head); where is not what, so it "
                                            "is not part of the run's identity")

    @property
    def per_round(self) -> int:
        """Fixed by the config alone (never by the machine), so a run's search is the same everywhere."""
        return self.candidates_per_round or self.parallel_evals or limits.DEFAULT_PER_ROUND

    @property
    def workers(self) -> int:
        """Local evaluation processes: never more than a round can keep busy or this machine has cores."""
        return min(self.parallel_evals or limits.DEFAULT_PER_ROUND, self.per_round, limits.machine_cores())

    @model_validator(mode="after")
    def _bounded(self) -> SweepConfig:
        total = self.max_rounds * self.per_round
        if total > limits.EVALUATIONS.maximum:
            raise FieldError("max_rounds", f"{self.max_rounds} rounds × {self.per_round} per round = {total:,} "
                             f"{limits.over(limits.EVALUATIONS)}", self.max_rounds, True)
        return self


# ---------------------------------------------------------------- the whole config (§1)


class SmartSearchConfig(_Model):
    search_space: SearchSpace
    workload: Workload
    goal: OptimizationGoal = Field(default_factory=OptimizationGoal)
    sweep: SweepConfig = Field(default_factory=SweepConfig)

    @model_validator(mode="before")
    @classmethod
    def _default_pareto_kv_load_ratio(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        goal, workload = data.get("goal"), data.get("workload")
        if (isinstance(goal, dict) and goal.get("target") == "pareto" and isinstance(workload, dict)
                and workload.get("trace_path") is None
                and all(workload.get(k) is None for k in ("request_rate", "concurrency", "kv_load_ratio"))):
            data = {**data, "workload": {**workload, "kv_load_ratio": [0.0, 1.0]}}
        return data

    @model_validator(mode="after")
    def _rules(self) -> SmartSearchConfig:
        most = self.search_space.gpu_budget * limits.MAX_NUM_SEQS_PER_GPU
        for name in ("concurrency", "replay_concurrency"):
            value = getattr(self.workload, name)
            if value is not None and value > most:
                derived = f"gpu_budget {self.search_space.gpu_budget} × {limits.MAX_NUM_SEQS_PER_GPU}"
                raise FieldError(f"workload.{name}", limits.over(limits.IN_FLIGHT, most, derived), value, True)
        if self.workload.kv_load_range is not None and not self.goal.is_pareto:
            raise FieldError("workload.kv_load_ratio", "a [min, max] range is only allowed when goal.target is "
                             "pareto; give a single ratio", self.workload.kv_load_ratio, True)
        if self.sweep.policy is SweepPolicy.thorough and self.workload.kv_load_range is not None:
            raise FieldError("sweep.policy", "thorough enumerates a finite space and rejects the continuous "
                             "workload.kv_load_ratio range; use policy rapid or a single ratio", "thorough", True)
        return self

    # ------------------------------------------------------------ loading

    @classmethod
    def from_yaml(cls, path: str | Path) -> SmartSearchConfig:
        """Parse and validate a YAML file; raises ConfigError listing every problem."""
        path = Path(path)
        data = load_yaml(path)
        config = cls.from_dict(data, source=str(path))
        config.check_files(path.parent)
        return config

    @classmethod
    def from_dict(cls, data: Any, source: str = "<config>") -> SmartSearchConfig:
        if not isinstance(data, dict):
            raise ConfigError(source, [Issue("", "the config must be a mapping with search_space, workload, "
                                             "goal and sweep", data, True)])
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise ConfigError(source, issues_from(exc, data, cls)) from None

    def trace_file(self, base_dir: str | Path) -> Path | None:
        """The trace path resolved against the config file's folder (absolute paths unchanged)."""
        if self.workload.trace_path is None:
            return None
        p = Path(self.workload.trace_path).expanduser()
        return p if p.is_absolute() else Path(base_dir) / p

    def check_files(self, base_dir: str | Path) -> None:
        trace = self.trace_file(base_dir)
        if trace is not None and not trace.is_file():
            raise ConfigError("config", [Issue("workload.trace_path", f"trace file not found: {trace}",
                                               self.workload.trace_path, True)])

    def normalised(self) -> dict[str, Any]:
        """The canonical JSON-able form (defaults filled, duplicates removed, injections applied) that a run's
        identity and its fingerprints are made of; where evaluations run (``sweep.cluster``) is left out."""
        return self.model_dump(mode="json", exclude={"sweep": {"cluster"}})


__all__ = [
    "SmartSearchConfig", "SearchSpace", "Workload", "OptimizationGoal", "SweepConfig", "SLATarget",
    "ParallelShape", "DisaggParallel", "OptimizationTarget", "SweepPolicy", "VizierAlgorithm",
    "GOODPUT_TARGETS", "MINIMIZED_TARGETS", "DEFAULT_SLA_ATTAINMENT",
]

"""The ``search_space`` section: the deployment, the parallel shapes, the engine, KV, router and planner knobs.

Every knob takes a list of allowed values (``knobs.py``) to search, or one value to pin; the validators
here check each entry and the rules between fields.
"""
from __future__ import annotations

import math
from typing import Annotated, Any, Callable, Union

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Discriminator,
    Field,
    StrictBool,
    StrictInt,
    Tag,
    ValidationInfo,
    field_validator,
    model_validator,
)

from spica_core.config import limits
from spica_core.config.fields import _Model, _at_most, _int_upto, _no_bool
from spica_core.config.knobs import (
    COMPOSITE_DICT_KEYS,
    COMPOSITE_FIELD_TYPES,
    COMPOSITE_PRESETS,
    COMPOSITE_REQUIRED_KEYS,
    KNOB_DEFAULTS,
    PREDICTOR_FAMILIES,
    SEARCH_CHOICES,
)
from spica_core.errors import FieldError


# ---------------------------------------------------------------- knob item types


def _member_of(knob: str) -> Callable[[Any], Any]:
    allowed = SEARCH_CHOICES[knob]

    def check(value: Any) -> Any:
        if value not in allowed or isinstance(value, bool):
            raise ValueError(f"not an allowed value; allowed: {list(allowed)}")
        return value

    return check


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


# ``_one_or_list`` as a validator whose JSON schema (the Prefect form's, and its API's check) allows both forms.
OneOrList = BeforeValidator(_one_or_list, json_schema_input_type=Union[str, list[str]])


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

# GPU types: aiconfigurator-core system ids, one to pin or a list to search (checked against AIC when loaded).
SkuList = Annotated[list[Annotated[str, Field(min_length=1)]], OneOrList, Field(min_length=1), AfterValidator(_dedupe)]


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


# ---------------------------------------------------------------- search_space


def roles_of(mode: str) -> tuple[str, ...]:
    """The engine roles a mode deploys: ('agg',) or ('prefill', 'decode')."""
    return ("agg",) if mode == "agg" else ("prefill", "decode")


def sku_field(mode: str, role: str) -> str:
    """The field naming a role's GPU type in a selection or sample: ``hardware_sku`` (agg) or
    ``<role>_hardware_sku`` (disagg's prefill and decode)."""
    return "hardware_sku" if mode == "agg" else f"{role}_hardware_sku"


class SearchSpace(_Model):
    # deployment
    deployment_mode: _atomic("deployment_mode", str)
    backend: _atomic("backend", str)
    parallel_configs: list[ParallelEntry] = Field(
        default_factory=list, description="[] derives the pool; one entry pins; several form a menu")
    model_name: str = Field(min_length=1, description="Hugging Face id bundled with aiconfigurator-core, or a local folder")
    hardware_sku: SkuList | None = Field(
        default=None, description="GPU type: aiconfigurator-core system id, e.g. h200_sxm; a list is searched like "
                                  "backend (required unless disagg-only with both role lists set)")
    prefill_hardware_sku: SkuList | None = Field(
        default=None, description="disagg: the prefill workers' GPU types (default: hardware_sku)")
    decode_hardware_sku: SkuList | None = Field(
        default=None, description="disagg: the decode workers' GPU types (default: hardware_sku)")
    gpu_budget: _int_upto(limits.GPU_BUDGET) = 32
    gpu_inventory: dict[Annotated[str, Field(min_length=1)], _int_upto(limits.GPU_BUDGET)] | None = Field(
        default=None, description="GPUs available per type, e.g. {h100_sxm: 16, h200_sxm: 8}: a deployment uses at "
                                  "most this many of each, on top of gpu_budget; a type not listed is capped by "
                                  "gpu_budget only")
    min_gpu_budget: _int_upto(limits.GPU_BUDGET) | None = None
    min_endpoint: _int_upto(limits.GPU_BUDGET) | None = None
    context_length: _int_upto(limits.SEQUENCE_TOKENS) | None = None
    startup_time: Annotated[float, Field(ge=0), BeforeValidator(_no_bool), _at_most(limits.STARTUP_SECONDS)] | None = None
    aic_nextn: Annotated[StrictInt, Field(ge=0, le=5)] | None = None
    scheduler_recv_interval: _int_upto(limits.SCHEDULER_RECV_INTERVAL) = Field(
        default=1, description="SGLang workers poll for new requests every N scheduler iterations "
                               "(--scheduler-recv-interval; SGLang's default 1); an aggregated worker's new request "
                               "waits (N - 1)/2 decode steps on average before it is scheduled")

    # precision (weights/compute, KV cache): one value pins, a list is searched
    quantization: Annotated[_choices("quantization", str), OneOrList] | None = Field(
        default=None, description="weight/compute precision (AIC quant-mode names, bf16 for bfloat16); one value "
                                  "or a list; null: the checkpoint's own precision")
    kv_cache_dtype: Annotated[_choices("kv_cache_dtype", str), OneOrList] = Field(
        default_factory=lambda: list(KNOB_DEFAULTS["kv_cache_dtype"]),
        description=f"KV-cache dtype {list(SEARCH_CHOICES['kv_cache_dtype'])}; one value or a list")

    # prefill / decode / agg engines
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

    # KV manager: G2 host offload
    num_g2_blocks: _int_upto(limits.G2_BLOCKS, minimum=0) = 0
    kv_bytes_per_token: PositiveInt | None = None
    bandwidth_g1_to_g2_gbps: Annotated[float, Field(gt=0)] | None = None
    bandwidth_g2_to_g1_gbps: Annotated[float, Field(gt=0)] | None = None
    offload_batch_size: PositiveInt | None = None

    # router and admission control
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

    # planner composites and load predictor
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

    def role_skus(self, mode: str) -> dict[str, list[str]]:
        """The GPU types each role of a mode may run on: {'agg': [...]} or {'prefill': [...], 'decode': [...]}."""
        return {role: list(getattr(self, f"{role}_hardware_sku", None) or self.hardware_sku or [])
                for role in roles_of(mode)}

    @property
    def skus(self) -> list[str]:
        """Every GPU type a candidate may run on, in the order the config names them."""
        return _dedupe([sku for mode in self.deployment_mode for skus in self.role_skus(mode).values()
                        for sku in skus])

    def hardware_text(self) -> str:
        """The GPU types for people: ``h200_sxm``, ``h100_sxm or h200_sxm``, role lists when they differ."""
        own = {role: skus for role in ("prefill", "decode") if (skus := getattr(self, f"{role}_hardware_sku"))}
        if not own:
            text = " or ".join(self.hardware_sku or [])
        else:
            parts = [f"agg {' or '.join(self.hardware_sku)}"] if "agg" in self.deployment_mode and self.hardware_sku \
                else []
            text = "; ".join(parts + [f"{role} {' or '.join(skus)}" for role, skus in self.role_skus("disagg").items()])
        if self.gpu_inventory:
            text += " (inventory " + ", ".join(f"{n} × {sku}" for sku, n in self.gpu_inventory.items()) + ")"
        return text

    @model_validator(mode="after")
    def _rules(self) -> SearchSpace:
        for name in ("prefill_hardware_sku", "decode_hardware_sku"):
            if getattr(self, name) is not None and "disagg" not in self.deployment_mode:
                raise FieldError(name, f"sets the {name.split('_')[0]} workers' GPU types, which only disaggregated "
                                 f"deployments have; deployment_mode is {self.deployment_mode}: add disagg or use "
                                 "hardware_sku", getattr(self, name), True)
        if self.hardware_sku is None and not (self.deployment_mode == ["disagg"] and self.prefill_hardware_sku
                                              and self.decode_hardware_sku):
            raise FieldError("hardware_sku", "is required: the GPU type(s) to deploy on, an aiconfigurator-core "
                             "system id such as h200_sxm (only a disagg-only search with both prefill_hardware_sku "
                             "and decode_hardware_sku may leave it out)")
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
        if self.scheduler_recv_interval > 1 and "sglang" not in self.backend:
            raise FieldError("scheduler_recv_interval", f"is an SGLang setting (--scheduler-recv-interval); backend "
                             f"is {self.backend}: add sglang or leave it at 1", self.scheduler_recv_interval, True)
        if self.parallel_configs and len(self.deployment_mode) != 1:
            raise FieldError("deployment_mode", "must list exactly one mode when parallel_configs is set",
                             self.deployment_mode, True)
        return self


__all__ = ["SearchSpace", "ParallelShape", "DisaggParallel", "roles_of", "sku_field"]

"""Allowed values, defaults and composite presets of every searchable knob.

This module is the single table the config model, the branch builder and the unroller read.
"""
from __future__ import annotations

from typing import Any, Final

DEPLOYMENT_MODES: Final = ("disagg", "agg")
BACKENDS: Final = ("vllm", "sglang", "trtllm")
KV_CACHE_DTYPES: Final = ("bf16", "fp8")
DEFAULT_KV_CACHE_DTYPE: Final = "bf16"


# Every weight/compute precision aiconfigurator-core 0.12 can model: its GEMM quant modes, then its
# MoE-only ones, with ``bf16`` for ``bfloat16``. Which of them have perf data depends on the SKU and
# backend (``spica_core.space.precision``); tests/test_precision.py keeps this list equal to AIC's enums.
QUANTIZATIONS: Final = (
    "bf16", "int8_wo", "int4_wo", "fp8", "fp8_static", "sq", "fp8_block", "fp8_ootb", "nvfp4", "nvfp4_wo",
    "w4a16_nvfp4", "w4afp8", "w4a16_mxfp4", "w4a8_mxfp4_mxfp8", "w4a8_mxfp4_mxfp8_trtllm", "w4a16_mxfp4_cutlass",
)


# ---------------------------------------------------------------- composite presets

def _scaling(throughput: bool, load: bool, throughput_interval: int | None, load_interval: int | None
             ) -> dict[str, Any]:
    """The four planner fields of one scaling policy."""
    return {"enable_throughput_scaling": throughput, "enable_load_scaling": load,
            "throughput_adjustment_interval_seconds": throughput_interval,
            "load_adjustment_interval_seconds": load_interval}


SCALING_POLICIES: Final[dict[str, dict[str, Any]]] = {
    "disabled": _scaling(False, False, None, None),
    "throughput_180_5": _scaling(True, False, 180, 5),
    "throughput_600_5": _scaling(True, False, 600, 5),
    "load_180_5": _scaling(False, True, 180, 5),
    "load_180_10": _scaling(False, True, 180, 10),
    "hybrid_180_5": _scaling(True, True, 180, 5),
    "hybrid_600_5": _scaling(True, True, 600, 5),
}

FPM_SAMPLING: Final[dict[str, dict[str, Any]]] = {
    "small": {"max_num_fpm_samples": 32, "fpm_sample_bucket_size": 4},
    "default": {"max_num_fpm_samples": 64, "fpm_sample_bucket_size": 16},
    "large": {"max_num_fpm_samples": 128, "fpm_sample_bucket_size": 16},
    "fine": {"max_num_fpm_samples": 128, "fpm_sample_bucket_size": 64},
}

LOAD_SENSITIVITY: Final[dict[str, dict[str, Any]]] = {
    "aggressive": {"load_scaling_down_sensitivity": 70, "load_min_observations": 3},
    "default": {"load_scaling_down_sensitivity": 80, "load_min_observations": 5},
    "conservative": {"load_scaling_down_sensitivity": 90, "load_min_observations": 8},
}

_KALMAN_DEFAULT: Final = {"kalman_q_level": 1.0, "kalman_q_trend": 0.1, "kalman_r": 10.0, "kalman_min_points": 5}
_KALMAN_REACTIVE: Final = {"kalman_q_level": 10.0, "kalman_q_trend": 1.0, "kalman_r": 5.0, "kalman_min_points": 3}

LOAD_PREDICTORS: Final[dict[str, dict[str, Any]]] = {
    "constant_last": {"load_predictor": "constant", "load_predictor_log1p": False},
    "arima_raw": {"load_predictor": "arima", "load_predictor_log1p": False},
    "arima_log1p": {"load_predictor": "arima", "load_predictor_log1p": True},
    "prophet_w20_raw": {"load_predictor": "prophet", "load_predictor_log1p": False, "prophet_window_size": 20},
    "prophet_w20_log1p": {"load_predictor": "prophet", "load_predictor_log1p": True, "prophet_window_size": 20},
    "prophet_w50_raw": {"load_predictor": "prophet", "load_predictor_log1p": False, "prophet_window_size": 50},
    "prophet_w50_log1p": {"load_predictor": "prophet", "load_predictor_log1p": True, "prophet_window_size": 50},
    "kalman_default_raw": {"load_predictor": "kalman", "load_predictor_log1p": False, **_KALMAN_DEFAULT},
    "kalman_default_log1p": {"load_predictor": "kalman", "load_predictor_log1p": True, **_KALMAN_DEFAULT},
    "kalman_reactive_raw": {"load_predictor": "kalman", "load_predictor_log1p": False, **_KALMAN_REACTIVE},
    "kalman_reactive_log1p": {"load_predictor": "kalman", "load_predictor_log1p": True, **_KALMAN_REACTIVE},
}

# Family defaults for fields a load-predictor dict entry omits (mirror the planner's defaults).
PREDICTOR_FAMILY_DEFAULTS: Final[dict[str, Any]] = {
    "load_predictor_log1p": False, "prophet_window_size": 50, **_KALMAN_DEFAULT,
}
PREDICTOR_FAMILIES: Final = ("constant", "arima", "prophet", "kalman")

COMPOSITE_PRESETS: Final[dict[str, dict[str, dict[str, Any]]]] = {
    "planner_scaling_policy": SCALING_POLICIES,
    "planner_fpm_sampling": FPM_SAMPLING,
    "planner_load_sensitivity": LOAD_SENSITIVITY,
    "load_predictor_candidates": LOAD_PREDICTORS,
}

# Keys a dict entry may carry, and the ones it must carry ("self-contained").
COMPOSITE_DICT_KEYS: Final[dict[str, tuple[str, ...]]] = {
    "planner_scaling_policy": ("enable_throughput_scaling", "enable_load_scaling",
                               "throughput_adjustment_interval_seconds", "load_adjustment_interval_seconds"),
    "planner_fpm_sampling": ("max_num_fpm_samples", "fpm_sample_bucket_size"),
    "planner_load_sensitivity": ("load_scaling_down_sensitivity", "load_min_observations"),
    "load_predictor_candidates": ("load_predictor", "load_predictor_log1p", "prophet_window_size",
                                  "kalman_q_level", "kalman_q_trend", "kalman_r", "kalman_min_points"),
}
# The planner's type of each dict-entry field besides the predictor family; value ranges and
# cross-field rules are left to Dynamo's PlannerConfig.
COMPOSITE_FIELD_TYPES: Final[dict[str, str]] = {
    "enable_throughput_scaling": "a boolean", "enable_load_scaling": "a boolean",
    "throughput_adjustment_interval_seconds": "an integer or null",
    "load_adjustment_interval_seconds": "an integer or null",
    "max_num_fpm_samples": "an integer", "fpm_sample_bucket_size": "an integer",
    "load_scaling_down_sensitivity": "an integer", "load_min_observations": "an integer",
    "load_predictor_log1p": "a boolean", "prophet_window_size": "an integer",
    "kalman_q_level": "a number", "kalman_q_trend": "a number", "kalman_r": "a number",
    "kalman_min_points": "an integer",
}
COMPOSITE_REQUIRED_KEYS: Final[dict[str, tuple[str, ...]]] = {
    "planner_scaling_policy": COMPOSITE_DICT_KEYS["planner_scaling_policy"],
    "planner_fpm_sampling": COMPOSITE_DICT_KEYS["planner_fpm_sampling"],
    "planner_load_sensitivity": COMPOSITE_DICT_KEYS["planner_load_sensitivity"],
    "load_predictor_candidates": ("load_predictor",),
}

# ---------------------------------------------------------------- atomic knobs

SEARCH_CHOICES: Final[dict[str, tuple[Any, ...]]] = {
    "deployment_mode": DEPLOYMENT_MODES,
    "backend": BACKENDS,
    "quantization": QUANTIZATIONS,
    "kv_cache_dtype": KV_CACHE_DTYPES,
    "prefill_max_num_batched_tokens": (8192, 16384, 32768),
    "prefill_max_num_seqs": (1, 2, 4, 8, 16, 32, 64, 128, 256),
    "decode_max_num_batched_tokens": (8192,),
    "decode_max_num_seqs": (256, 512, 1024),
    "agg_max_num_batched_tokens": (8192, 16384, 32768),
    "agg_max_num_seqs": (256, 512, 1024),
    "router_mode": ("kv_router", "round_robin"),
    "overlap_score_credit": (0.0, 0.5, 1.0),
    "prefill_load_scale": (0.0, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0),
    "router_temperature": (0.0, 0.2, 0.5, 1.0),
    "host_cache_hit_weight": (0.5, 0.75, 1.0),
    "disk_cache_hit_weight": (0.0, 0.25, 0.5),
    **{name: tuple(presets) for name, presets in COMPOSITE_PRESETS.items()},
}

# Defaults that are not "every allowed value".
KNOB_DEFAULTS: Final[dict[str, tuple[Any, ...]]] = {
    **SEARCH_CHOICES,
    "backend": ("vllm",),
    "kv_cache_dtype": (DEFAULT_KV_CACHE_DTYPE,),
}

ENGINE_KNOBS: Final[dict[str, tuple[str, ...]]] = {
    "agg": ("agg_max_num_batched_tokens", "agg_max_num_seqs"),
    "disagg": ("prefill_max_num_batched_tokens", "prefill_max_num_seqs",
               "decode_max_num_batched_tokens", "decode_max_num_seqs"),
}
KV_ROUTER_KNOBS: Final = ("overlap_score_credit", "prefill_load_scale", "router_temperature")
CACHE_HIT_KNOBS: Final = ("host_cache_hit_weight", "disk_cache_hit_weight")
PLANNER_DETAIL_KNOBS: Final = ("planner_fpm_sampling", "planner_load_sensitivity")
INT_KNOBS: Final = frozenset(k for k, v in SEARCH_CHOICES.items() if v and isinstance(v[0], int))
FLOAT_KNOBS: Final = frozenset(k for k, v in SEARCH_CHOICES.items() if v and isinstance(v[0], float))


def decode_composite(knob: str, entry: str | dict[str, Any]) -> dict[str, Any]:
    """Expand a preset id or a dict entry into its flat fields (a dict replaces, never merges)."""
    if isinstance(entry, dict):
        if knob == "planner_scaling_policy":
            return _scaling(bool(entry.get("enable_throughput_scaling", False)),
                            bool(entry.get("enable_load_scaling", False)),
                            entry.get("throughput_adjustment_interval_seconds"),
                            entry.get("load_adjustment_interval_seconds"))
        return dict(entry)
    return dict(COMPOSITE_PRESETS[knob][entry])


def predictor_fields(entry: str | dict[str, Any]) -> dict[str, Any]:
    """Planner fields of a load-predictor entry: family, log1p and only the family's own knobs."""
    raw = decode_composite("load_predictor_candidates", entry)
    family = raw["load_predictor"]
    out: dict[str, Any] = {
        "load_predictor": family,
        "load_predictor_log1p": bool(raw.get("load_predictor_log1p", PREDICTOR_FAMILY_DEFAULTS["load_predictor_log1p"])),
    }
    own: tuple[str, ...] = ()
    if family == "prophet":
        own = ("prophet_window_size",)
    elif family == "kalman":
        own = ("kalman_q_level", "kalman_q_trend", "kalman_r", "kalman_min_points")
    for key in own:
        out[key] = raw.get(key, PREDICTOR_FAMILY_DEFAULTS[key])
    return out


def entry_label(knob: str, entry: str | dict[str, Any], index: int) -> str:
    """Human label of a composite entry: the preset id, or ``custom_<index>`` for a dict."""
    return entry if isinstance(entry, str) else f"custom_{index}"

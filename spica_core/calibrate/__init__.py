"""Calibration: the user's own measurements correct Spica's predictions and bands for their cluster.

``measurements`` reads AIPerf exports of the benchmark plans and silicon-format CSV rows and pairs each with
Spica's prediction; ``fit`` turns them into a calibration (``spica_core.evaluate.Calibration``, which the
evaluation path applies); ``silicon`` turns a measured row into the Spica config that replays it.
"""
from __future__ import annotations

from spica_core.calibrate.fit import GroupedRow, Shrinkage, fit_calibration, quantile, shrinkage
from spica_core.calibrate.measurements import (
    AIPERF_EXPORT, aiperf_row, csv_rows, export_files, read_measurements, replay_row,
)
from spica_core.calibrate.silicon import (
    AIC_BENCH_LENGTH_SPREAD, AIC_BENCH_REQUESTS_PER_CONCURRENCY, AIC_GAP_ANALYSIS, agg_replicas, Checkpoint,
    checkpoint_of, choose_precision, client_concurrency, engine_knobs, family, FAMILY_CHECKPOINTS, kv_dtype_for,
    LENGTH_SPREAD, load_rows, make_config, MAX_NUM_BATCHED_TOKENS, max_num_seqs, measured_date,
    MIN_MAX_NUM_SEQS, MODEL_ALIASES, parallel_pin, parse_row, per_rank_concurrency, pin_problem, plan_row,
    PrecisionChoice, Protocol, protocol_for, read_rows, RECV_INTERVAL_RECIPES, recipe_nextn, recipe_recv_interval,
    REQUESTS_PER_CONCURRENCY, REQUIRED_COLUMNS, RowPlan,
    SEQS_CHOICES, SiliconRow, silicon_csv, source_kind, SPECULATIVE_RECIPES, spica_quant,
    used_gpus, warmup_for
)

__all__ = [
    "AIPERF_EXPORT", "GroupedRow", "Shrinkage", "aiperf_row", "csv_rows", "export_files", "fit_calibration",
    "quantile", "read_measurements", "replay_row", "shrinkage",
    "AIC_BENCH_LENGTH_SPREAD", "AIC_BENCH_REQUESTS_PER_CONCURRENCY", "AIC_GAP_ANALYSIS", "agg_replicas",
    "Checkpoint", "checkpoint_of", "choose_precision", "client_concurrency", "engine_knobs", "family",
    "FAMILY_CHECKPOINTS", "kv_dtype_for", "LENGTH_SPREAD", "load_rows", "make_config", "MAX_NUM_BATCHED_TOKENS",
    "max_num_seqs", "measured_date", "MIN_MAX_NUM_SEQS", "MODEL_ALIASES", "parallel_pin", "parse_row",
    "per_rank_concurrency", "pin_problem", "plan_row", "PrecisionChoice", "Protocol", "protocol_for", "read_rows",
    "RECV_INTERVAL_RECIPES", "recipe_nextn", "recipe_recv_interval", "REQUESTS_PER_CONCURRENCY",
    "REQUIRED_COLUMNS", "RowPlan",
    "SEQS_CHOICES", "SiliconRow", "silicon_csv",
    "source_kind", "SPECULATIVE_RECIPES", "spica_quant", "used_gpus", "warmup_for",
]

"""KV capacity per rank from aiconfigurator-core's memory estimator, and KV feasibility of shapes.

Every KV number in Spica comes from :func:`kv_estimate`: the feasibility filter here, the
replay's ``num_gpu_blocks`` and the KV-load concurrency all read the same cached estimate.
It is cached in the process and on disk (``kv/`` in the cache folder, per aiconfigurator-core
version), because AIC loads its perf database for a process's first estimate (about 0.6 s):
without the file every new evaluation worker would pay that for a number another process has.

A shape is kept iff one rank's KV pool holds one longest sequence: ``total_kv_size_tokens >
max_seq_len``, with fixed runtime reservations (8192 batched tokens, 256 sequences, memory
fraction 0.9) so the verdict depends on the shape alone, never on a trial's batching knobs.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping, Sequence

from spica_core.store import fingerprint
from spica_core.space.facts import aic_version, backend_version, cache_dir, is_local_model, model_facts
from spica_core.space.parallel import Shape
from spica_core.space.precision import Precision

# The fixed reservations of the feasibility filter.
FILTER_MAX_NUM_TOKENS = 8192
FILTER_MAX_BATCH_SIZE = 256
FILTER_MEMORY_FRACTION = 0.9

# Substrings of estimator errors that mean "this shape cannot hold the model", not a bug.
KV_SHAPE_ERRORS: tuple[str, ...] = ("no KV budget", "Invalid quantized MoE configuration")


def memory_fraction_kind(backend: str) -> str:
    """TRT-LLM's fraction is of free memory after weights; vLLM/SGLang's is of total memory."""
    return "of_free" if backend == "trtllm" else "of_total"


def kv_estimate(
    model_name: str,
    sku: str,
    backend: str,
    shape: Shape,
    *,
    precision: Precision,
    max_num_tokens: int = FILTER_MAX_NUM_TOKENS,
    max_batch_size: int = FILTER_MAX_BATCH_SIZE,
    memory_fraction: float = FILTER_MEMORY_FRACTION,
    nextn: int | None = None,
) -> tuple[int | None, str]:
    """(per-rank KV tokens, "") or (None, the estimator's reason) for a shape that cannot hold the model.

    None only for the :data:`KV_SHAPE_ERRORS`; anything else (a bug, a missing model) propagates,
    and no perf DB raises NoPerfDatabaseError. Cached per argument tuple.
    """
    return _estimate(model_name, sku, backend, shape, precision=precision, max_num_tokens=max_num_tokens,
                     max_batch_size=max_batch_size, memory_fraction=memory_fraction, nextn=nextn)[:2]


KV_ESTIMATE_SCHEMA = 1


@lru_cache(maxsize=4096)
def _estimate(model_name: str, sku: str, backend: str, shape: Shape, *, precision: Precision, max_num_tokens: int,
              max_batch_size: int, memory_fraction: float, nextn: int | None) -> tuple[int | None, str, int | None]:
    """(KV tokens, reason, weight bytes per GPU) from AIC's memory model, read back from disk when kept."""
    args: dict[str, Any] = dict(
        model_path=model_name, system=sku, backend=backend, backend_version=backend_version(sku, backend),
        max_num_tokens=int(max_num_tokens),
        max_batch_size=int(max_batch_size),
        memory_fraction_kind=memory_fraction_kind(backend),
        memory_fraction_value=float(memory_fraction),
        tp_size=shape.tp,
        pp_size=shape.pp,
        attention_dp_size=shape.attention_dp,
        moe_tp_size=shape.moe_tp,
        moe_ep_size=shape.moe_ep,
        nextn=int(nextn or 0),
        allow_naive_fallback=False,
        **precision.quant_modes(model_facts(model_name).is_moe),
    )
    path = _kept_path(args)
    kept = _read_kept(path) if path is not None else None
    if kept is not None:
        return kept
    value = _aic_estimate(args)
    if path is not None:
        from spica_core.store import write_file  # atomic: a concurrent reader sees no half-written file

        try:
            write_file(path, json.dumps({"tokens": value[0], "reason": value[1], "weights": value[2], "args": args}))
        except OSError:  # a read-only cache only costs the next process the same estimate
            pass
    return value


def _kept_path(args: Mapping[str, Any]) -> Path | None:
    """Where an estimate with AIC arguments ``args`` is kept; None for a local model folder, whose name
    does not say what its config holds."""
    if is_local_model(str(args["model_path"])):
        return None
    key = fingerprint({"args": dict(args), "aic": aic_version(), "schema": KV_ESTIMATE_SCHEMA})
    return cache_dir() / "kv" / f"{key}.json"


def _read_kept(path: Path) -> tuple[int | None, str, int | None] | None:
    """A kept estimate, or None when the file is absent, unreadable or not one."""
    try:
        kept = json.loads(path.read_text())
        tokens, reason, weights = kept["tokens"], kept["reason"], kept["weights"]
    except (OSError, ValueError, TypeError, KeyError):
        return None
    if not (isinstance(reason, str) and all(v is None or type(v) is int for v in (tokens, weights))):
        return None
    return tokens, reason, weights


def _aic_estimate(args: Mapping[str, Any]) -> tuple[int | None, str, int | None]:
    from aiconfigurator_core.sdk.memory import estimate_kv_cache

    try:
        result = estimate_kv_cache(**args)
    except ValueError as exc:
        text = str(exc)
        for marker in KV_SHAPE_ERRORS:
            at = text.find(marker)
            if at >= 0:
                return None, text[at:].strip(), None
        raise
    weights = (result.get("memory_breakdown") or {}).get("weights_bytes")
    return int(result["total_kv_size_tokens"]), "", int(weights) if weights is not None else None


def kv_tokens_per_rank(model_name: str, sku: str, backend: str, shape: Shape, **reservations: Any) -> int | None:
    """Per-rank KV capacity in tokens (AIC ``total_kv_size_tokens``), or None if the shape cannot hold the model.

    ``reservations`` are :func:`kv_estimate`'s keywords; callers that do not need the reason use this.
    """
    return kv_estimate(model_name, sku, backend, shape, **reservations)[0]


@dataclass(frozen=True)
class ShapeKV:
    """One shape's KV verdict for one GPU type, backend and precision (a row of ``shapes.parquet``)."""

    hardware_sku: str
    backend: str
    backend_version: str
    shape: Shape
    kv_tokens_per_rank: int | None
    max_seq_len: int
    feasible: bool
    reason: str
    precision: Precision
    weight_bytes_per_gpu: int | None = None

    def row(self) -> dict[str, Any]:
        s = self.shape
        return {
            "hardware_sku": self.hardware_sku, "backend": self.backend, "backend_version": self.backend_version,
            "shape": f"{s.strategy.upper()}{s.gpus}", "tp": s.tp, "attention_dp": s.attention_dp,
            "moe_tp": s.moe_tp, "moe_ep": s.moe_ep, "pp": s.pp, "gpus": s.gpus, "strategy": s.strategy,
            "quantization": self.precision.quantization, "kv_cache_dtype": self.precision.kv_cache_dtype,
            "native_precision": self.precision.native, "weight_bytes_per_gpu": self.weight_bytes_per_gpu,
            "kv_tokens_per_rank": self.kv_tokens_per_rank, "max_seq_len": self.max_seq_len,
            "feasible": self.feasible, "reason": self.reason,
        }

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> ShapeKV:
        shape = Shape(int(row["tp"]), int(row["attention_dp"]), int(row["moe_tp"]), int(row["moe_ep"]), int(row["pp"]))
        precision = Precision(row["quantization"], row["kv_cache_dtype"], bool(row["native_precision"]))
        weights = row["weight_bytes_per_gpu"]
        return cls(row["hardware_sku"], row["backend"], row["backend_version"], shape, row["kv_tokens_per_rank"],
                   int(row["max_seq_len"]),
                   bool(row["feasible"]), row["reason"], precision, None if weights is None else int(weights))


def max_seq_len(model_name: str, context_length: int | None) -> int:
    """The longest sequence a shape must hold: ``context_length`` if set, else the model's max context."""
    return int(context_length) if context_length is not None else model_facts(model_name).max_context


def shape_kv(model_name: str, sku: str, backend: str, shape: Shape, seq_len: int, precision: Precision) -> ShapeKV:
    """Estimate one shape at one precision and say why it is (not) kept. NoPerfDatabaseError propagates."""
    version = backend_version(sku, backend)
    tokens, error, weights = _estimate(model_name, sku, backend, shape, precision=precision,
                                       max_num_tokens=FILTER_MAX_NUM_TOKENS, max_batch_size=FILTER_MAX_BATCH_SIZE,
                                       memory_fraction=FILTER_MEMORY_FRACTION, nextn=None)
    if tokens is None:
        reason = error
        ok = False
    elif tokens > seq_len:
        reason, ok = "", True
    else:
        reason = f"KV holds {tokens} tokens per rank, not more than max_seq_len {seq_len}"
        ok = False
    return ShapeKV(sku, backend, version, shape, tokens, seq_len, ok, reason, precision, weights)


def no_viable_message(model_name: str, sku: str, gpu_budget: int, mode: str, backend: str,
                      records: Sequence[ShapeKV], min_gpu_budget: int | None = None,
                      inventory: Mapping[str, int] | None = None) -> str:
    """A message that says what was tried and why each shape failed, so the user knows what to change."""
    several = len({r.hardware_sku for r in records}) > 1
    within = f" within gpu_inventory {dict(inventory)}" if inventory else ""
    head = f"no {mode} parallel config of {model_name} on {gpu_budget} × {sku}{within} is viable for {backend}"
    if not records:
        return f"{head}: no legal worker shape fits the budget"
    shown = "; ".join(f"{r.shape.strategy.upper()}{r.shape.gpus}{f' on {r.hardware_sku}' if several else ''}: "
                      f"{r.reason or f'feasible ({r.kv_tokens_per_rank} tokens) but no replica count fits'}"
                      for r in records)
    hint = " (raise gpu_budget, lower context_length, or pick a larger GPU)"
    if min_gpu_budget is not None:
        hint = f" (min_gpu_budget {min_gpu_budget}; raise gpu_budget, lower context_length, or pick a larger GPU)"
    return f"{head}: {shown}{hint}"


__all__ = ["ShapeKV", "max_seq_len", "shape_kv", "no_viable_message", "kv_estimate", "kv_tokens_per_rank",
           "memory_fraction_kind", "KV_SHAPE_ERRORS", "FILTER_MAX_NUM_TOKENS", "FILTER_MAX_BATCH_SIZE",
           "FILTER_MEMORY_FRACTION"]

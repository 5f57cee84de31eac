"""KV feasibility of worker shapes — reference §2.12 step 8.

A shape is kept iff one rank's KV pool holds one longest sequence: ``total_kv_size_tokens >
max_seq_len``, with fixed runtime reservations (8192 batched tokens, 256 sequences, memory
fraction 0.9) so the verdict depends on the shape alone, never on a trial's batching knobs.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from spica_core.space.enumeration import configs_from_shapes, worker_shapes
from spica_core.errors import NoViableParallelConfigError
from spica_core.space.facts import backend_version, kv_estimate, model_facts
from spica_core.space.parallel import Mode, ParallelConfig, Shape

# §2.12 step 8: the fixed reservations of the feasibility filter.
FILTER_MAX_NUM_TOKENS = 8192
FILTER_MAX_BATCH_SIZE = 256
FILTER_MEMORY_FRACTION = 0.9


@dataclass(frozen=True)
class ShapeKV:
    """One shape's KV verdict for one backend (a row of ``shapes.parquet``)."""

    backend: str
    backend_version: str
    shape: Shape
    kv_tokens_per_rank: int | None
    max_seq_len: int
    feasible: bool
    reason: str

    def row(self) -> dict[str, Any]:
        s = self.shape
        return {
            "backend": self.backend, "backend_version": self.backend_version,
            "shape": f"{s.strategy.upper()}{s.gpus}", "tp": s.tp, "attention_dp": s.attention_dp,
            "moe_tp": s.moe_tp, "moe_ep": s.moe_ep, "pp": s.pp, "gpus": s.gpus, "strategy": s.strategy,
            "kv_tokens_per_rank": self.kv_tokens_per_rank, "max_seq_len": self.max_seq_len,
            "feasible": self.feasible, "reason": self.reason,
        }


def max_seq_len(model_name: str, context_length: int | None) -> int:
    """The longest sequence a shape must hold: ``context_length`` if set, else the model's max context."""
    return int(context_length) if context_length is not None else model_facts(model_name).max_context


def shape_kv(model_name: str, sku: str, backend: str, shape: Shape, seq_len: int) -> ShapeKV:
    """Estimate one shape and say why it is (not) kept. NoPerfDatabaseError propagates."""
    version = backend_version(sku, backend)
    tokens, error = kv_estimate(model_name, sku, backend, shape, max_num_tokens=FILTER_MAX_NUM_TOKENS,
                                max_batch_size=FILTER_MAX_BATCH_SIZE, memory_fraction=FILTER_MEMORY_FRACTION)
    if tokens is None:
        reason = error
        ok = False
    elif tokens > seq_len:
        reason, ok = "", True
    else:
        reason = f"KV holds {tokens} tokens per rank, not more than max_seq_len {seq_len}"
        ok = False
    return ShapeKV(backend, version, shape, tokens, seq_len, ok, reason)


def feasible_shapes(model_name: str, sku: str, backend: str, shapes: Sequence[Shape],
                    seq_len: int) -> tuple[list[Shape], list[ShapeKV]]:
    """Filter shapes by KV feasibility; returns (kept shapes in input order, one record per shape)."""
    records = [shape_kv(model_name, sku, backend, s, seq_len) for s in shapes]
    return [r.shape for r in records if r.feasible], records


def parallel_configs_for(model_name: str, sku: str, gpu_budget: int, mode: Mode, backend: str,
                         seq_len: int | None = None, min_gpu_budget: int | None = None
                         ) -> tuple[list[ParallelConfig], list[ShapeKV]]:
    """§2.12 end to end: legal, KV-feasible configs for one backend, plus the shape records.

    Raises NoPerfDatabaseError (no data for the SKU/backend) or NoViableParallelConfigError (nothing fits).
    """
    facts = model_facts(model_name)
    seq = seq_len if seq_len is not None else facts.max_context
    backend_version(sku, backend)  # NoPerfDatabaseError before any estimate
    shapes = worker_shapes(facts.is_moe, gpu_budget, backend)
    kept, records = feasible_shapes(model_name, sku, backend, shapes, seq)
    configs = configs_from_shapes(mode, kept, gpu_budget, min_gpu_budget)
    if not configs:
        raise NoViableParallelConfigError(no_viable_message(model_name, sku, gpu_budget, mode, backend, records,
                                                       min_gpu_budget))
    return configs, records


def no_viable_message(model_name: str, sku: str, gpu_budget: int, mode: str, backend: str,
                      records: Sequence[ShapeKV], min_gpu_budget: int | None = None) -> str:
    """A message that says what was tried and why each shape failed, so the user knows what to change."""
    head = f"no {mode} parallel config of {model_name} on {gpu_budget} × {sku} is viable for {backend}"
    if not records:
        return f"{head}: no legal worker shape fits the budget"
    shown = "; ".join(f"{r.shape.strategy.upper()}{r.shape.gpus}: "
                      f"{r.reason or f'feasible ({r.kv_tokens_per_rank} tokens) but no replica count fits'}"
                      for r in records)
    hint = " (raise gpu_budget, lower context_length, or pick a larger GPU)"
    if min_gpu_budget is not None:
        hint = f" (min_gpu_budget {min_gpu_budget}; raise gpu_budget, lower context_length, or pick a larger GPU)"
    return f"{head}: {shown}{hint}"


__all__ = ["ShapeKV", "max_seq_len", "shape_kv", "feasible_shapes", "parallel_configs_for", "no_viable_message",
           "FILTER_MAX_NUM_TOKENS", "FILTER_MAX_BATCH_SIZE", "FILTER_MEMORY_FRACTION"]

"""AI Configurator's own analytic estimate of a static agg candidate, shown next to the replay's score.

For an aggregated candidate with the planner off, the report shows what ``aiconfigurator cli
estimate --estimate-mode agg`` (Python: ``aiconfigurator.cli.api.cli_estimate(mode="agg")``) would
say for the same deployment. Only aiconfigurator-core is installed, so this module makes the calls
the CLI's ``_run_agg_estimate`` makes, one by one, through the core SDK:

1. ``config_builders.build_model_config(tp, pp, attention_dp, moe_tp, moe_ep)`` and, with
   ``aic_nextn``, ``config_builders.apply_nextn``;
2. ``perf_database.get_database_view(sku, backend, version)``;
3. ``models.helpers.resolve_context_fmha_by_data(..., is_context_role=True)``,
   ``resolve_dsv4_moe_arch`` and ``resolve_nvfp4_for_system`` (the CLI's quant resolution);
4. ``models.get_model(model, config, backend)`` and ``backends.factory.get_backend(backend)``;
5. ``backend.run_agg(model, db, RuntimeConfig(isl, osl, batch_size=b), ctx_tokens=...,
   free_gpu_memory_fraction=..., max_num_tokens=...)``. ``InferenceSession.run_agg``, which the CLI
   calls, lives in the ``aiconfigurator`` package and only forwards to this method.

The static point
----------------
AIC's agg model is closed-loop and mean-field: ``b`` identical requests (one isl, one osl) are
always in flight on each attention-DP rank, with no arrival process. From the candidate and the
caller's three numbers:

* per replica: ``ceil(concurrency / replicas)`` requests, capped at ``max_num_seqs`` per
  attention-DP rank (vLLM, SGLang and TRT-LLM each schedule a DP rank on its own);
* ``batch_size`` (AIC's ``b``, per attention-DP rank) = ``min(ceil(per_replica / attention_dp),
  max_num_seqs)``;
* ``concurrency`` on the result = ``batch_size × attention_dp × replicas``: the point AIC really
  estimated. It can be above the requested concurrency (rounding up, every replica busy) or below
  it (the ``max_num_seqs`` cap); ``requested_concurrency`` keeps the number asked for;
* ``ctx_tokens`` (prefill tokens per mixed step) = ``min(isl, max_num_batched_tokens)``: the CLI's
  default budget of one prompt per step (``cli_estimate`` uses ``ctx_tokens=isl``), cut to the
  candidate's token budget when the prompt must be chunked. The CLI's ``default`` sweep picks
  ``ctx_tokens`` itself per batch size against its SLA; a candidate fixes it instead;
* ``free_gpu_memory_fraction`` = the candidate's ``gpu_memory_utilization`` (vLLM's fraction of
  total memory, SGLang's ``mem_fraction_static``, TRT-LLM's free-memory fraction), and TRT-LLM's
  ``max_num_tokens`` = ``max_num_batched_tokens``. These only feed AIC's memory checks.

The result: AIC's ``ttft`` and ``tpot`` (ms) for that point; ``output_throughput_tok_s`` = AIC's
``tokens/s`` of one replica (already summed over its attention-DP ranks) × ``replicas``; per GPU =
that / ``candidate.used_gpus`` (equal to AIC's ``tokens/s/gpu``). AIC counts ``osl - 1`` output
tokens per request (the first token belongs to the prefill) and, for vLLM, caps throughput at the
Little's-law bound ``b·(osl-1)/(ttft + tpot·(osl-1))``. With ``aic_nextn`` the draft's compute cost
is modelled but no draft acceptance is assumed (Spica carries no acceptance rate; the CLI would
ask for ``--nextn-accepted``), so one token per decode iteration.

``aic_estimate`` returns None when AIC has no analytic answer: not agg, a scaling planner, no perf
database for (SKU, backend), an unknown model or SKU, a shape or quant mode AIC cannot model (AIC's
own "expected" errors: ``aiconfigurator_core.sdk.errors.is_expected_cli_error`` or a compiled-engine
``RustEngineUnsupportedError``), or a point whose memory (weights, activations and the KV of
``b × (isl + osl)`` tokens) exceeds the GPU (``summary.check_oom()``: the CLI's OOM error).
Anything else is a bug and raises. A batch that fits the GPU but not the KV budget the memory
fraction leaves (``summary.check_kv_cache_oom()``) still gets numbers, with the CLI's warning in
``kv_cache_warning``.

Cost (2-core box): the first estimate in a process imports the SDK and loads the perf tables for
(SKU, backend, version), about 3.5 s; a new shape then costs about 6 ms (model build and engine
compile), a new point about 0.15 ms, a repeated point about 10 µs. Sessions are cached per
EngineShape (model, SKU, backend, version, shape, nextn) and points per (shape, isl, osl, batch,
ctx_tokens, memory knobs); "AIC cannot" answers are cached too.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from spica_core.errors import NoPerfDatabaseError, UnknownModelError, UnknownSystemError
from spica_core.deployment import Candidate
from spica_core.space.profiles import EngineShape, model_config
from spica_core.space.facts import aic_version
from spica_core.space.facts import backend_version, model_facts, quiet_aic


@dataclass(frozen=True)
class AICEstimate:
    """AIC's static agg estimate of one candidate at one (isl, osl, concurrency) point.

    ``concurrency`` is the whole candidate's in-flight requests AIC modelled
    (``batch_size × attention_dp × replicas``); ``batch_size`` is AIC's ``b``, per attention-DP
    rank of one replica; ``ctx_tokens`` the prefill tokens per mixed step. See the module doc.
    """

    isl: int
    osl: int
    concurrency: int
    ttft_ms: float
    tpot_ms: float
    output_throughput_tok_s: float            # the whole candidate (one replica × replicas)
    output_throughput_tok_s_per_gpu: float    # output_throughput_tok_s / candidate.used_gpus
    source: str                               # "aiconfigurator-core 0.12.0 vllm 0.24.0 static agg"
    requested_concurrency: int = 0            # the concurrency the caller asked about
    batch_size: int = 0                       # AIC's b: per attention-DP rank, per replica
    ctx_tokens: int = 0                       # AIC's ctx_tokens: prefill tokens per mixed step
    kv_cache_warning: str | None = None       # the CLI's warning when b exceeds AIC's KV capacity


@dataclass(frozen=True)
class _Point:
    """One run_agg answer for one replica (cached)."""

    ttft_ms: float
    tpot_ms: float
    tokens_s: float          # one replica, summed over its attention-DP ranks
    kv_cache_oom: bool


def _aic_cannot(exc: BaseException) -> bool:
    """AIC's own test for an expected "cannot model this" error (not a bug), plus engine-compile gaps."""
    from aiconfigurator_core.sdk.errors import is_expected_cli_error
    from aiconfigurator_core.sdk.rust_engine_step import RustEngineUnsupportedError

    return is_expected_cli_error(exc) or isinstance(exc, RustEngineUnsupportedError) or isinstance(
        exc.__cause__, RustEngineUnsupportedError)


@lru_cache(maxsize=64)
def _session(es: EngineShape) -> tuple[Any, Any, Any] | None:
    """(model, perf DB, backend) built as the CLI's agg estimate builds them; None if AIC cannot."""
    quiet_aic()
    from aiconfigurator_core.sdk.backends.factory import get_backend
    from aiconfigurator_core.sdk.models import get_model
    from aiconfigurator_core.sdk.models.helpers import (resolve_context_fmha_by_data, resolve_dsv4_moe_arch,
                                                        resolve_nvfp4_for_system)
    from aiconfigurator_core.sdk.perf_database import get_database_view

    try:
        mc = model_config(es)
        db = get_database_view(es.system, es.backend, es.backend_version)
        if db is None:
            return None
        resolve_context_fmha_by_data(mc, es.model, db, es.backend, is_context_role=True)
        resolve_dsv4_moe_arch(mc, es.model, system_name=es.system, backend_name=es.backend)
        resolve_nvfp4_for_system(mc, es.system, es.model)
        model = get_model(es.model, mc, es.backend)
        return model, db, get_backend(es.backend)
    except Exception as exc:
        if _aic_cannot(exc):
            return None
        raise


@lru_cache(maxsize=4096)
def _point(es: EngineShape, isl: int, osl: int, batch_size: int, ctx_tokens: int, memory_fraction: float,
           max_num_tokens: int) -> _Point | None:
    """AIC's run_agg at one point for one replica; None when AIC has no answer (cached either way)."""
    session = _session(es)
    if session is None:
        return None
    model, db, backend = session
    from aiconfigurator_core.sdk.config import RuntimeConfig

    try:
        summary = backend.run_agg(model, db, RuntimeConfig(isl=isl, osl=osl, batch_size=batch_size),
                                  ctx_tokens=ctx_tokens, free_gpu_memory_fraction=memory_fraction,
                                  max_num_tokens=max_num_tokens)
    except Exception as exc:
        if _aic_cannot(exc):
            return None
        raise
    if summary.check_oom():      # the CLI raises "OOM: the model ... does not fit in GPU memory"
        return None
    r = summary.get_result_dict()
    if r is None:
        return None
    point = _Point(float(r["ttft"]), float(r["tpot"]), float(r["tokens/s"]), bool(summary.check_kv_cache_oom()))
    if not all(math.isfinite(v) for v in (point.ttft_ms, point.tpot_ms, point.tokens_s)):
        return None
    return point


def static_point(candidate: Candidate, concurrency: int, isl: int) -> tuple[int, int, int]:
    """(batch_size per attention-DP rank, ctx_tokens, modelled whole-candidate concurrency)."""
    rc = candidate.parallel.roles["agg"]
    knobs = candidate.engines["agg"]
    dp = rc.shape.attention_dp
    per_replica = -(-int(concurrency) // rc.replicas)
    b = max(1, min(-(-per_replica // dp), int(knobs.max_num_seqs)))
    ctx = max(1, min(int(isl), int(knobs.max_num_batched_tokens)))
    return b, ctx, b * dp * rc.replicas


def aic_estimate(candidate: Candidate, *, isl: int, osl: int, concurrency: int) -> AICEstimate | None:
    """AIC's analytic agg estimate of a static candidate at (isl, osl, concurrency); see the module doc.

    None when AIC has no analytic answer for it (not agg, planner enabled, no perf data, a shape or
    model AIC cannot model, the model does not fit). A bad argument or a bug raises.
    """
    if min(isl, osl, concurrency) < 1:
        raise ValueError(f"aic_estimate needs isl, osl and concurrency >= 1 (got {isl}, {osl}, {concurrency})")
    if candidate.mode != "agg" or candidate.planner.scales or candidate.planner.policy != "disabled":
        return None
    ctx = candidate.context
    try:
        model_facts(ctx.model_name)
        version = candidate.backend_version or backend_version(candidate.sku("agg"), candidate.backend)
    except (NoPerfDatabaseError, UnknownModelError, UnknownSystemError):
        return None
    rc = candidate.parallel.roles["agg"]
    knobs = candidate.engines["agg"]
    es = EngineShape.of(ctx.model_name, candidate.sku("agg"), candidate.backend, version, rc.shape, candidate.precision,
                        nextn=ctx.aic_nextn)
    b, ctx_tokens, modelled = static_point(candidate, concurrency, isl)
    point = _point(es, int(isl), int(osl), b, ctx_tokens, float(knobs.gpu_memory_utilization),
                   int(knobs.max_num_batched_tokens))
    if point is None:
        return None
    total = point.tokens_s * rc.replicas
    warning = None
    if point.kv_cache_oom:
        warning = (f"batch {b} per rank exceeds AIC's KV cache capacity estimate "
                   f"(gpu_memory_utilization {knobs.gpu_memory_utilization}); a real engine would queue")
    source = f"aiconfigurator-core {aic_version()} {candidate.backend} {version} static agg"
    if es.nextn:
        source += f" nextn={es.nextn} (no draft acceptance)"
    return AICEstimate(isl=int(isl), osl=int(osl), concurrency=modelled, ttft_ms=point.ttft_ms,
                       tpot_ms=point.tpot_ms, output_throughput_tok_s=total,
                       output_throughput_tok_s_per_gpu=total / candidate.used_gpus, source=source,
                       requested_concurrency=int(concurrency), batch_size=b, ctx_tokens=ctx_tokens,
                       kv_cache_warning=warning)


__all__ = ["AICEstimate", "aic_estimate", "static_point"]

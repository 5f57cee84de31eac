"""Timing and KV capacity from aiconfigurator-core, packaged for the replay.

The replay's built-in timing ignores model, GPU and TP, so every candidate is replayed with a
``dynamo_profile`` latency table computed by aiconfigurator-core for its engine shape. A table
takes about a second to build, and many candidates share a shape, so it is built once per
shape and kept on disk under a fingerprint of everything that changes its numbers.

The same table also backs the planner's forward-pass-time model (:class:`StepTimes`), so the
scaling policy and the simulator agree on how long a pass takes.
"""
from __future__ import annotations

import json
import math
import os
import tempfile
from dataclasses import asdict, dataclass, replace
from functools import lru_cache
from pathlib import Path
from collections.abc import Sequence
from typing import Any

import numpy as np

from spica_core.store import fingerprint
from spica_core.space.facts import aic_version, cache_dir, quiet_aic
from spica_core.space.kv import kv_tokens_per_rank
from spica_core.space.parallel import Shape
from spica_core.space.precision import Precision

PROFILE_SCHEMA = 5   # 5: the power grid in the sidecar JSON

# A prefill pass larger than the engine's CUDA-graph capture sizes runs eagerly: the host launches every
# layer's kernels, and on vLLM that launch time is not hidden behind the GPU. AIC's own static vLLM model
# adds 0.8 ms per layer to a prefill for this reason (aiconfigurator-core 0.12.0,
# ``VLLMBackend._prefill_dispatch_overhead_ms``: "recalibrated at ~0.8 ms/layer against the full silicon
# corpus"); AIC adds nothing for SGLang and TRT-LLM, and neither does Spica. The replay pays it once per
# pass that carries prefill tokens, so every request queued behind that pass, and every decode that shares
# it, pays it too. On the accuracy rows, vLLM's TTFT median error was -35 % without it (bench/results/accuracy.json
# at 5d45174) and is +4 % out of fold with it (docs/accuracy.md).
PREFILL_DISPATCH_MS_PER_LAYER = {"vllm": 0.8}

# A block-scaled FP8 GEMM does the work of a per-tensor one plus per-block scales: SGLang's and
# TRT-LLM's tables put it at 0.5-1.2x per-tensor FP8 on every SKU. aiconfigurator-core 0.12.0's
# vLLM tables put it at 6-40x, a flat 0.06-0.3 ms per call whatever the size: a host-bound
# measurement that CUDA-graph decode does not pay (a measured MiniMax-M2.5 TP2 decode step on
# B200 is 9.3 ms; the two GEMMs alone would be 21 ms). Above this ratio the table is not used.
HOST_BOUND_GEMM_RATIO = 3.0

# Table grid. The prefill axis covers every chunk the engines can schedule (max_num_batched_tokens
# is at most 32768), the decode axes cover a rank's whole KV pool and the longest contexts.
PREFILL_MAX_TOKENS = 65536
DECODE_MAX_KV_TOKENS = 1 << 23
DECODE_MAX_CONTEXT = 262144
DECODE_MAX_BATCH = 2048
N_PREFILL, N_KV, N_CTX = 56, 48, 28


@dataclass(frozen=True)
class EngineShape:
    """Everything that changes an engine's step latencies (batching does not: it is looked up)."""

    model: str
    system: str
    backend: str
    backend_version: str
    tp: int = 1
    attention_dp: int = 1
    moe_tp: int = 1
    moe_ep: int = 1
    nextn: int = 0
    gemm_quant_mode: str | None = None
    kvcache_quant_mode: str | None = None
    fmha_quant_mode: str | None = None
    moe_quant_mode: str | None = None

    @classmethod
    def of(cls, model: str, system: str, backend: str, backend_version: str, shape: Shape,
           precision: Precision, nextn: int | None = None) -> EngineShape:
        from spica_core.space.facts import model_facts

        return cls(model, system, backend, backend_version, shape.tp, shape.attention_dp, shape.moe_tp,
                   shape.moe_ep, int(nextn or 0), **precision.quant_modes(model_facts(model).is_moe))

    def key(self) -> str:
        """The cache fingerprint: the shape, the table grid, the schema and the AIC version."""
        return fingerprint({"shape": asdict(self), "schema": PROFILE_SCHEMA, "aic": aic_version(),
                            "dispatch_ms_per_layer": PREFILL_DISPATCH_MS_PER_LAYER.get(self.backend, 0.0),
                            "grid": [PREFILL_MAX_TOKENS, DECODE_MAX_KV_TOKENS, DECODE_MAX_CONTEXT,
                                     DECODE_MAX_BATCH, N_PREFILL, N_KV, N_CTX]})

    def file_stem(self) -> str:
        model = self.model.replace("/", "--")
        quant = "-".join(str(m or "ckpt") for m in (self.gemm_quant_mode, self.kvcache_quant_mode))
        return (f"{model}_{self.system}_{self.backend}-{self.backend_version}_tp{self.tp}dp{self.attention_dp}"
                f"mtp{self.moe_tp}mep{self.moe_ep}_{quant}_{self.key()}")


# ---------------------------------------------------------------- building a table


def _axis(lo: float, hi: float, n: int, with_zero: bool = False) -> np.ndarray:
    pts = np.unique(np.round(np.geomspace(max(lo, 1.0), hi, n)))
    return np.concatenate([[0.0] if with_zero else [], pts]).astype(np.float64)


def model_config(es: EngineShape) -> Any:
    """AIC's model config for one engine shape: parallel sizes, quantisation modes, MTP draft layers."""
    from aiconfigurator_core.sdk.config_builders import apply_nextn, build_model_config

    mc = build_model_config(tp_size=es.tp, pp_size=1, attention_dp_size=es.attention_dp, moe_tp_size=es.moe_tp,
                            moe_ep_size=es.moe_ep, gemm_quant_mode=es.gemm_quant_mode,
                            kvcache_quant_mode=es.kvcache_quant_mode, fmha_quant_mode=es.fmha_quant_mode,
                            moe_quant_mode=es.moe_quant_mode)
    if es.nextn:
        apply_nextn(mc, es.nextn)
    return mc


def step_engine(es: EngineShape) -> tuple[Any, Any]:
    """(model, EngineHandle) with the CLI's quant resolution applied (DeepSeek on Hopper)."""
    quiet_aic()
    from aiconfigurator_core.sdk import rust_engine_step
    from aiconfigurator_core.sdk.models import get_model
    from aiconfigurator_core.sdk.models.helpers import resolve_context_fmha_by_data, resolve_nvfp4_for_system
    from aiconfigurator_core.sdk.perf_database import get_database_view

    mc = model_config(es)
    db = get_database_view(es.system, es.backend, es.backend_version)
    if db is None:
        from spica_core.errors import NoPerfDatabaseError
        raise NoPerfDatabaseError(f"aiconfigurator-core has no perf database for {es.backend} "
                             f"{es.backend_version} on {es.system}")
    resolve_context_fmha_by_data(mc, es.model, db, es.backend, is_context_role=True)
    resolve_nvfp4_for_system(mc, es.system, es.model, backend_name=es.backend)
    model = get_model(es.model, mc, es.backend)
    return model, rust_engine_step._cached_engine_handle(model, db)


def _gemm_ms(handle: Any) -> float:
    """A one-request decode step's attention GEMMs (QKV and output projection), all layers, in ms."""
    ops = {name: value for name, value, *_ in handle.decode_step_per_op(1, 1024, 0)}
    return float(ops.get("generation_qkv_gemm", 0.0) + ops.get("generation_proj_gemm", 0.0))


def ops_power(ops: Sequence[Sequence[Any]], board_w: float) -> tuple[float, float]:
    """(average power per GPU in W, the share of the step's time whose energy was measured) of one step's
    per-op list ``(name, ms, energy W·ms, source)``: an op with a measured energy uses it, the others draw the
    GPU's board power for their time (an upper bound)."""
    total = sum(float(op[1]) for op in ops)
    if total <= 0:
        return board_w, 0.0
    measured = [op for op in ops if float(op[2] or 0.0) > 0]
    measured_ms = sum(float(op[1]) for op in measured)
    energy = sum(float(op[2]) for op in measured) + board_w * (total - measured_ms)
    return energy / total, measured_ms / total


POWER_BATCHES = tuple(2 ** i for i in range(11))          # decode requests per attention-DP rank, 1 … 1024
POWER_CONTEXTS = (512, 2048, 8192, 32768)                  # decode context, tokens
POWER_PROMPTS = tuple(2 ** i for i in range(7, 16))        # prefill prompt, 128 … 32768 tokens


def power_grid(es: EngineShape) -> dict[str, Any]:
    """:func:`ops_power` of a shape's steps over a grid (written with its profile, so that pricing a candidate's
    energy reads a file instead of loading aiconfigurator-core's perf database): decode steps by requests and
    context, prefill passes by prompt length."""
    from spica_core.space.facts import system_facts

    _, handle = step_engine(timing_shape(es)[0])
    board = system_facts(es.system).power_w
    decode = [[ops_power(handle.decode_step_per_op(b, c, 0), board) for c in POWER_CONTEXTS] for b in POWER_BATCHES]
    prefill = [ops_power(handle.run_static_per_op(batch_size=1, isl=n, osl=2)[0], board) for n in POWER_PROMPTS]
    return {"board_w": board, "decode_watts": [[w for w, _ in row] for row in decode],
            "decode_coverage": [[c for _, c in row] for row in decode],
            "prefill_watts": [w for w, _ in prefill], "prefill_coverage": [c for _, c in prefill]}


def _nearest(value: float, axis: Sequence[int]) -> int:
    """The index of the axis point nearest ``value`` on a log scale."""
    return min(range(len(axis)), key=lambda i: abs(math.log(max(value, 1.0)) - math.log(axis[i])))


def step_power(profile: str | Path, role: str, batch: int, isl: int, osl: int) -> tuple[float, float]:
    """(W per GPU, measured share) of one representative step of a role, from the power grid written with its
    profile (``profile``: the NPZ): a prefill pass of ``isl`` tokens, or a decode step of ``batch`` requests per
    attention-DP rank at the mean context ``isl + osl / 2`` (the nearest grid point)."""
    grid = json.loads(Path(profile).with_suffix(".json").read_text())["power"]
    if role == "prefill":
        i = _nearest(isl, POWER_PROMPTS)
        return float(grid["prefill_watts"][i]), float(grid["prefill_coverage"][i])
    b, c = _nearest(batch, POWER_BATCHES), _nearest(isl + osl / 2, POWER_CONTEXTS)
    return float(grid["decode_watts"][b][c]), float(grid["decode_coverage"][b][c])


@lru_cache(maxsize=None)
def timing_shape(es: EngineShape) -> tuple[EngineShape, str | None]:
    """The shape whose AIC timing the replay uses, and why it differs from ``es`` (None = it does not).

    Only a block-FP8 GEMM table that is host-bound (see HOST_BOUND_GEMM_RATIO) is swapped, for the
    per-tensor FP8 table of the same backend; weights, KV and MoE keep their own precision. Kept per
    process: building a profile asks twice (its tables, then its metadata), and it depends on AIC's data only.
    """
    model, handle = step_engine(es)
    if getattr(model.config.gemm_quant_mode, "name", None) != "fp8_block":
        return es, None
    per_tensor = replace(es, gemm_quant_mode="fp8")
    block_ms, tensor_ms = _gemm_ms(handle), _gemm_ms(step_engine(per_tensor)[1])
    if tensor_ms <= 0 or block_ms <= HOST_BOUND_GEMM_RATIO * tensor_ms:
        return es, None
    return per_tensor, (f"{es.backend} {es.backend_version} fp8_block GEMM rows on {es.system} are host-bound "
                        f"({block_ms:.2f} ms vs {tensor_ms:.2f} ms per-tensor fp8 for one request's "
                        f"attention GEMMs); timed as per-tensor fp8")


def build_tables(es: EngineShape) -> dict[str, np.ndarray]:
    """The dynamo_profile arrays: prefill pass latency by new tokens, decode step by (KV, context).

    Batch arguments are per attention-DP rank (each rank runs its own scheduler in the replay).
    Decode uses AIC's single-step estimate at the exact context (osl=0), not the multi-step one.
    A prefill pass also pays the backend's per-layer dispatch time (PREFILL_DISPATCH_MS_PER_LAYER).
    """
    from spica_core.space.facts import model_facts

    _, h = step_engine(timing_shape(es)[0])
    isl = _axis(1, PREFILL_MAX_TOKENS, N_PREFILL)
    dispatch_ms = PREFILL_DISPATCH_MS_PER_LAYER.get(es.backend, 0.0) * model_facts(es.model).num_layers
    ttft = np.array([h.predict_prefill_latency(1, int(x), 0) + dispatch_ms for x in isl], dtype=np.float64)
    kv = _axis(1, DECODE_MAX_KV_TOKENS, N_KV, with_zero=True)
    ctx = _axis(1, DECODE_MAX_CONTEXT, N_CTX)
    itl = np.empty((len(kv), len(ctx)), dtype=np.float64)
    for i, k in enumerate(kv):
        for j, c in enumerate(ctx):
            bs = int(min(max(1, round(k / c)), DECODE_MAX_BATCH))
            c_eff = int(max(1, min(k / bs if k > 0 else c, DECODE_MAX_CONTEXT)))
            itl[i, j] = h.decode_step_latency(bs, c_eff, 0)
    return {"prefill_isl": isl, "prefill_ttft_ms": ttft, "decode_active_kv_tokens": kv,
            "decode_context_length": ctx, "decode_itl": itl}


def _resolved_quant(es: EngineShape) -> dict[str, str]:
    model, _ = step_engine(es)
    cfg = model.config
    return {name: getattr(getattr(cfg, name), "name", str(getattr(cfg, name)))
            for name in ("gemm_quant_mode", "kvcache_quant_mode", "fmha_quant_mode", "moe_quant_mode")}


def profile_path(es: EngineShape, directory: str | Path | None = None) -> Path:
    """The shape's NPZ, built and written atomically on first use (safe across worker processes)."""
    root = Path(directory).expanduser() if directory is not None else cache_dir()
    path = root / f"{es.file_stem()}.npz"
    if path.is_file():
        return path.resolve()
    root.mkdir(parents=True, exist_ok=True)
    tables = build_tables(es)
    timed, why = timing_shape(es)
    fd, tmp = tempfile.mkstemp(dir=root, prefix=f".{path.stem}.", suffix=".npz")
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **tables)
        os.chmod(tmp, 0o644)
        meta = {"shape": asdict(es), "schema": PROFILE_SCHEMA, "aic": aic_version(),
                "resolved_quant": _resolved_quant(es), "timed_quant": _resolved_quant(timed), "timing_note": why,
                "power": power_grid(es)}
        path.with_suffix(".json").write_text(json.dumps(meta, indent=1, sort_keys=True))
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path.resolve()


def timing_model(path: str | Path) -> dict[str, Any]:
    """The engine-args ``timing_model`` entry that points the replay at a profile."""
    return {"type": "external", "provider": "dynamo_profile", "config": {"path": str(Path(path).resolve())}}


# ---------------------------------------------------------------- reading a table (planner side)


def _interp1(x: float, xs: np.ndarray, ys: np.ndarray) -> float:
    """Linear interpolation that extrapolates from the end segments, like the replay's lookup."""
    if x <= xs[0]:
        i = 0
    elif x >= xs[-1]:
        i = len(xs) - 2
    else:
        i = int(np.searchsorted(xs, x) - 1)
    x0, x1, y0, y1 = xs[i], xs[i + 1], ys[i], ys[i + 1]
    return float(y0 + (y1 - y0) * (x - x0) / (x1 - x0))


class StepTimes:
    """Forward-pass time of one engine rank from a profile: prefill by new tokens, decode by (KV, context)."""

    def __init__(self, path: str | Path):
        with np.load(path) as z:
            self.prefill_isl = np.asarray(z["prefill_isl"], dtype=np.float64)
            self.prefill_ms_table = np.asarray(z["prefill_ttft_ms"], dtype=np.float64)
            self.kv = np.asarray(z["decode_active_kv_tokens"], dtype=np.float64)
            self.ctx = np.asarray(z["decode_context_length"], dtype=np.float64)
            self.itl = np.asarray(z["decode_itl"], dtype=np.float64)

    def prefill_ms(self, tokens: float) -> float:
        if tokens <= 0:
            return 0.0
        return max(0.0, _interp1(tokens, self.prefill_isl, self.prefill_ms_table))

    def decode_ms(self, kv_tokens: float, num_requests: float) -> float:
        if num_requests <= 0:
            return 0.0
        ctx = max(1.0, kv_tokens / num_requests)
        # bilinear: interpolate along context in the two bracketing KV rows
        if kv_tokens <= self.kv[0]:
            i = 0
        elif kv_tokens >= self.kv[-1]:
            i = len(self.kv) - 2
        else:
            i = int(np.searchsorted(self.kv, kv_tokens) - 1)
        y0 = _interp1(ctx, self.ctx, self.itl[i])
        y1 = _interp1(ctx, self.ctx, self.itl[i + 1])
        k0, k1 = self.kv[i], self.kv[i + 1]
        return max(0.0, float(y0 + (y1 - y0) * (kv_tokens - k0) / (k1 - k0)))

    def pass_ms(self, prefill_tokens: float = 0, decode_requests: float = 0, decode_kv_tokens: float = 0) -> float:
        """One scheduler pass: prefill part plus decode part, as the replay composes them."""
        return self.prefill_ms(prefill_tokens) + self.decode_ms(decode_kv_tokens, decode_requests)


# ---------------------------------------------------------------- KV capacity


def kv_blocks_per_rank(model: str, system: str, backend: str, shape: Shape, *, precision: Precision, block_size: int,
                       max_num_batched_tokens: int, max_num_seqs: int, memory_fraction: float,
                       nextn: int | None = None) -> int | None:
    """num_gpu_blocks for one attention-DP rank from AIC's memory model; None = the shape has no KV budget."""
    tokens = kv_tokens_per_rank(model, system, backend, shape, precision=precision,
                                max_num_tokens=int(max_num_batched_tokens),
                                max_batch_size=int(max_num_seqs), memory_fraction=float(memory_fraction),
                                nextn=nextn)
    if tokens is None:
        return None
    return int(tokens) // int(block_size)


__all__ = ["EngineShape", "profile_path", "build_tables", "timing_shape", "timing_model", "StepTimes",
           "kv_blocks_per_rank", "step_engine", "PREFILL_DISPATCH_MS_PER_LAYER", "ops_power", "power_grid", "step_power"]

"""Precision as a deployment choice: weight/compute quantization and KV-cache dtype (issue: trust).

A :class:`Precision` is part of a candidate like its parallel shape. It reaches AIC's step timing
(GEMM, MoE, attention and KV quant modes), AIC's memory model (weights and KV per token), the
replay's KV capacity, the engine flags and the manifests.

Names are AIC's quant-mode names, with ``bf16`` for ``bfloat16``. ``quantization`` sets the GEMMs
and, for an MoE model, the experts too. A checkpoint's own precision is what AIC infers from its
config (``hf_quant_config.json``); for an MoE checkpoint whose experts are quantized differently
from its dense layers (gpt-oss's mxfp4 experts, Kimi's int4 experts) it is named by the experts.
A bf16 checkpoint may be quantized to any mode the perf database has data for on that SKU and backend.
A pre-quantized checkpoint runs at its own precision, or at a mode of fewer weight bits: that is the
same architecture served from a lower-bit checkpoint (NVIDIA publishes NVFP4 exports of the FP8
DeepSeek-R1 and -V3, for instance), which the manifests ask the user to point the model at. No engine
turns quantized weights back into more bits, so a pin above the checkpoint's own is refused.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from spica_core.config.knobs import DEFAULT_KV_CACHE_DTYPE
from spica_core.space.facts import aic_version, cache_dir, model_facts

BF16 = "bf16"
_AIC_NAMES = {BF16: "bfloat16"}

# Bits per weight of each quantization (config.knobs.QUANTIZATIONS; MoE modes by their expert weights).
WEIGHT_BITS = {
    "bf16": 16, "int8_wo": 8, "fp8": 8, "fp8_static": 8, "sq": 8, "fp8_block": 8, "fp8_ootb": 8,
    "int4_wo": 4, "nvfp4": 4, "nvfp4_wo": 4, "w4a16_nvfp4": 4, "w4afp8": 4, "w4a16_mxfp4": 4, "w4a8_mxfp4_mxfp8": 4,
    "w4a8_mxfp4_mxfp8_trtllm": 4, "w4a16_mxfp4_cutlass": 4,
}


def aic_name(name: str) -> str:
    """Spica's name → AIC's quant-mode name (``bf16`` → ``bfloat16``)."""
    return _AIC_NAMES.get(name, name)


def spica_name(aic: str) -> str:
    """AIC's quant-mode name → Spica's (``bfloat16`` → ``bf16``)."""
    return BF16 if aic == "bfloat16" else aic


@dataclass(frozen=True, order=True)
class Precision:
    """Weights/compute and KV cache. ``native`` = the checkpoint's own quantization (AIC infers the modes)."""

    quantization: str
    kv_cache_dtype: str = DEFAULT_KV_CACHE_DTYPE
    native: bool = True

    def quant_modes(self, is_moe: bool) -> dict[str, str | None]:
        """AIC's build_model_config / estimate_kv_cache keywords (None = AIC infers from the checkpoint)."""
        out: dict[str, str | None] = {"kvcache_quant_mode": aic_name(self.kv_cache_dtype)}
        if not self.native:
            out["gemm_quant_mode"] = aic_name(self.quantization)
            if is_moe:
                out["moe_quant_mode"] = aic_name(self.quantization)
        return out

    def label(self) -> str:
        """``fp8`` or ``fp8 kv-fp8``: the weights, and the KV dtype when it is not the default."""
        kv = "" if self.kv_cache_dtype == DEFAULT_KV_CACHE_DTYPE else f" kv-{self.kv_cache_dtype}"
        return f"{self.quantization}{kv}"

    def fields(self) -> dict[str, Any]:
        return {"quantization": self.quantization, "kv_cache_dtype": self.kv_cache_dtype}


@lru_cache(maxsize=None)
def checkpoint_quantization(model_name: str) -> str:
    """The checkpoint's own quantization, in Spica's names (experts first for a mixed MoE checkpoint)."""
    facts = model_facts(model_name)
    if facts.is_moe and facts.moe_quant_mode != facts.gemm_quant_mode:
        return spica_name(facts.moe_quant_mode)
    return spica_name(facts.gemm_quant_mode)


def precision_of(model_name: str, quantization: str | None, kv_cache_dtype: str) -> Precision:
    """The Precision a config's value means for this model (None = the checkpoint's own)."""
    own = checkpoint_quantization(model_name)
    if quantization is None or quantization == own:
        return Precision(own, kv_cache_dtype, native=True)
    return Precision(quantization, kv_cache_dtype, native=False)


def precisions(model_name: str, quantizations: list[str] | None, kv_cache_dtypes: list[str]) -> tuple[Precision, ...]:
    """Every precision a search space allows, quantization-major, in configured order."""
    quants: list[str | None] = list(quantizations) if quantizations else [None]
    out: list[Precision] = []
    for q in quants:
        for kv in kv_cache_dtypes:
            p = precision_of(model_name, q, kv)
            if p not in out:
                out.append(p)
    return tuple(out)


# ---------------------------------------------------------------- what the perf database holds


@lru_cache(maxsize=None)
def perf_db_quantizations(sku: str, backend: str, version: str, is_moe: bool) -> tuple[str, ...]:
    """Quantizations with GEMM (and, for MoE, expert) perf data for (SKU, backend, version), Spica names.

    Reading AIC's support matrix loads every table of the database (about 5 s), so the answer is kept
    on disk per aiconfigurator-core version, like the SKU's facts.
    """
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", f"{sku}-{backend}-{version}")
    path = cache_dir() / f"quant-{safe}-aic{aic_version()}.json"
    try:
        table = json.loads(path.read_text())
    except (OSError, ValueError):
        table = _read_quant_support(sku, backend, version)
        from spica_core.store import write_file

        try:
            write_file(path, json.dumps(table))
        except OSError:  # a read-only cache only costs the next process the same read
            pass
    gemm = [spica_name(m) for m in table.get("gemm", [])]
    if not is_moe:
        return tuple(gemm)
    moe = {spica_name(m) for m in table.get("moe", [])}
    return tuple(m for m in gemm if m in moe)


def _read_quant_support(sku: str, backend: str, version: str) -> dict[str, list[str]]:
    from aiconfigurator_core.sdk.perf_database import get_database_view

    db = get_database_view(sku, backend, version)
    if db is None:
        return {}
    support = db.supported_quant_mode
    return {key: sorted(str(m) for m in support[key]) for key in ("gemm", "moe") if key in support}


def precision_problem(model_name: str, sku: str, backend: str, version: str, quantization: str) -> str | None:
    """Why ``quantization`` cannot run this model on (SKU, backend), or None when it can."""
    own = checkpoint_quantization(model_name)
    if quantization == own:
        return None
    if own != BF16 and WEIGHT_BITS[quantization] >= WEIGHT_BITS[own]:
        return (f"{model_name} is a pre-quantized {own} checkpoint: it runs at its own precision or from a "
                f"checkpoint of fewer weight bits, not at {quantization}; remove the pin, pin {own!r}, or pin a "
                f"mode below {WEIGHT_BITS[own]} bits")
    have = perf_db_quantizations(sku, backend, version, model_facts(model_name).is_moe)
    if quantization not in have:
        return (f"aiconfigurator-core has no {quantization} perf data for {backend} {version} on {sku}; "
                f"values with data: {list(have)}")
    return None


def check_quantization(config: Any, source: str) -> None:
    """Every pinned quantization must run on at least one configured backend and GPU type; ConfigError names
    the field.

    ``config`` is a SmartSearchConfig. A value that runs on some backends only narrows those to the others
    (the branches stage records why).
    """
    from spica_core.errors import ConfigError, Issue
    from spica_core.space.facts import system_facts

    ss = config.search_space
    if not ss.quantization:
        return
    issues: list[Issue] = []
    for i, quant in enumerate(ss.quantization):
        problems = {f"{b} on {sku}": precision_problem(ss.model_name, sku, b, version, quant)
                    for sku in ss.skus for b in ss.backend
                    if (version := system_facts(sku).backend_versions.get(b)) is not None}
        if problems and all(problems.values()):
            why = "; ".join(f"{where}: {p}" for where, p in problems.items())
            issues.append(Issue(f"search_space.quantization[{i}]", f"cannot run {ss.model_name} on "
                                f"{', '.join(ss.skus)} — {why}", quant, True))
    if issues:
        raise ConfigError(source, issues)


__all__ = ["check_quantization", "BF16", "WEIGHT_BITS", "Precision", "aic_name", "spica_name", "checkpoint_quantization",
           "precision_of", "precisions", "perf_db_quantizations", "precision_problem"]

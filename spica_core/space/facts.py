"""Model and GPU facts from aiconfigurator-core; KV capacity is ``kv.py``.

Everything here is read from the installed aiconfigurator-core: its bundled model configs, its
system specs and its perf database. Nothing is tabulated by hand, so a new AIC release changes
the facts without a code change. All calls are cached: enumeration asks for the same facts many
times. A SKU's facts are also kept on disk per aiconfigurator-core version, because reading them
parses its whole perf-database index (about 2.5 s), which every command, stage and evaluation worker
would otherwise pay once per process.
"""
from __future__ import annotations

import json
import logging
import os
import re
from dataclasses import asdict, dataclass
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from collections.abc import Iterable
from typing import Any

from spica_core.errors import NoPerfDatabaseError, UnknownModelError, UnknownSystemError

_AIC_LOGGERS = ("aiconfigurator_core", "aiconfigurator")

DEFAULT_CACHE_DIR = Path("~/.cache/spica/profiles")

# Backends in the order aiconfigurator-core names them; used to probe weights and perf DBs.
_AIC_BACKENDS: tuple[str, ...] = ("trtllm", "sglang", "vllm")


def quiet_aic() -> None:
    """Silence aiconfigurator's per-DB-load warnings: they are noise for a search that loads many."""
    for name in _AIC_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)


quiet_aic()


@lru_cache(maxsize=1)
def aic_version() -> str:
    try:
        return metadata.version("aiconfigurator-core")
    except metadata.PackageNotFoundError:  # pragma: no cover - the package is a hard dependency
        return "absent"


def cache_dir() -> Path:
    """Where what is computed from aiconfigurator-core is kept: SPICA_CACHE_DIR, or ~/.cache/spica/profiles."""
    return Path(os.environ.get("SPICA_CACHE_DIR") or DEFAULT_CACHE_DIR).expanduser()


# ---------------------------------------------------------------- models


@dataclass(frozen=True)
class ModelFacts:
    """What enumeration and KV feasibility need to know about a model."""

    name: str
    is_moe: bool
    architecture: str
    weight_bytes: int          # the whole checkpoint as AIC models it (quantised), on one GPU at tp=1
    max_context: int           # max_position_embeddings
    kv_bytes_per_token: int    # at tp=1 with a bf16 KV cache (an fp8 cache holds half)
    is_mla: bool               # latent KV (DeepSeek/Kimi/GLM-5): replicated, not sharded, across TP ranks
    num_layers: int = 0        # decoder layers (the engine dispatches each layer's kernels every pass)
    gemm_quant_mode: str = "bfloat16"  # the checkpoint's own quant modes, as AIC infers them
    moe_quant_mode: str = "bfloat16"
    network: str = ""          # architecture and layer dimensions: checkpoints of one network (an NVFP4 export,
                               # a renamed or fine-tuned model) share it, and so do their step timings


def bundled_models() -> list[str]:
    """Model ids aiconfigurator-core can load offline (bundled HF configs)."""
    from aiconfigurator_core.sdk.common import DefaultHFModels

    return sorted(DefaultHFModels)


def is_local_model(name: str) -> bool:
    """A model folder on this machine (its config is read from there, not from AIC's bundled ones)."""
    return os.path.isdir(name) and os.path.isfile(os.path.join(name, "config.json"))


def _unknown_model(name: str, why: str) -> UnknownModelError:
    ids = bundled_models()
    shown = ", ".join(ids[:15])
    return UnknownModelError(
        f"unknown model {name!r}: {why}. aiconfigurator-core loads {len(ids)} bundled ids offline "
        f"(e.g. {shown}, ...); spell the id exactly, or point model_name at a local folder that "
        f"holds the model's config.json (and optionally hf_quant_config.json)."
    )


@lru_cache(maxsize=None)
def model_facts(model_name: str) -> ModelFacts:
    """Read a bundled or local model's facts; never downloads (unknown ids fail fast instead)."""
    from aiconfigurator_core.sdk.common import DefaultHFModels
    from aiconfigurator_core.sdk.config_builders import build_model_config
    from aiconfigurator_core.sdk.models import get_model
    from aiconfigurator_core.sdk.models.helpers import check_is_moe
    from aiconfigurator_core.sdk.utils import get_model_config_from_model_path

    if not (is_local_model(model_name) or model_name in DefaultHFModels):
        why = ("the folder has no config.json" if os.path.isdir(model_name)
               else "it is not bundled with aiconfigurator-core (and Spica never downloads configs)")
        raise _unknown_model(model_name, why)
    try:
        parsed = get_model_config_from_model_path(model_name)
    except Exception as exc:  # unsupported architecture, malformed config
        raise _unknown_model(model_name, f"aiconfigurator-core cannot read it ({exc})") from None
    is_moe = bool(check_is_moe(model_name))
    raw = parsed.get("raw_config") or {}
    extra = parsed.get("extra_params")
    kv_lora = raw.get("kv_lora_rank") or (extra.get("kv_lora_rank") if isinstance(extra, dict) else None)

    # Weights and KV bytes/token from AIC's own op model at tp=1 (the real, often FP8, checkpoint).
    last_error: Exception | None = None
    for backend in _AIC_BACKENDS:
        try:
            mc = build_model_config(tp_size=1, pp_size=1, attention_dp_size=1, moe_tp_size=1, moe_ep_size=1,
                                    kvcache_quant_mode="bfloat16")
            model = get_model(model_name, mc, backend)
            weights = sum(op.get_weights() for op in model.context_ops)
            kv = model.get_kvcache_bytes_per_sequence(1)
            gemm, moe = model.config.gemm_quant_mode.name, model.config.moe_quant_mode.name
            break
        except Exception as exc:  # a backend may not model this family; try the next
            last_error = exc
    else:
        raise _unknown_model(model_name, f"aiconfigurator-core cannot build it ({last_error})")

    return ModelFacts(
        name=model_name,
        is_moe=is_moe,
        architecture=str(parsed["architecture"]),
        weight_bytes=int(weights),
        max_context=int(parsed["context"]),
        kv_bytes_per_token=int(kv),
        is_mla=bool(kv_lora),
        num_layers=int(parsed.get("layers") or 0),
        gemm_quant_mode=str(gemm),
        moe_quant_mode=str(moe),
        network=_network(parsed),
    )


def _network(parsed: dict) -> str:
    """A network's identity from AIC's parsed config: its architecture and every dimension that shapes a step."""
    dims = ("layers", "hidden_size", "n", "n_kv", "d", "inter_size", "num_experts", "moe_inter_size", "topk", "vocab")
    return " ".join([str(parsed["architecture"])] + [f"{k}={parsed.get(k)}" for k in dims])


# ---------------------------------------------------------------- systems


@dataclass(frozen=True)
class SystemFacts:
    """What enumeration needs about a GPU SKU."""

    name: str
    vram_bytes_per_gpu: int
    gpus_per_node: int
    backend_versions: dict[str, str]  # backend -> latest perf-DB version with data
    power_w: float                    # the GPU's board power (the system file's gpu.power), W
    inter_node_gbps: float            # per-GPU bandwidth off the node (the system file's node.inter_node_bw), GB/s

    def __hash__(self) -> int:  # dict field: hash by name (facts are a function of the name)
        return hash(self.name)


def known_systems() -> list[str]:
    """Every SKU aiconfigurator-core has a system spec for (with or without perf data)."""
    from aiconfigurator_core.sdk.common import SupportedSystems

    return sorted(SupportedSystems)


@lru_cache(maxsize=1)
def _supported_databases() -> dict[str, dict[str, list[str]]]:
    from aiconfigurator_core.sdk.perf_database import get_supported_databases

    return {s: dict(b) for s, b in get_supported_databases().items()}


@lru_cache(maxsize=None)
def system_facts(sku: str) -> SystemFacts:
    """VRAM, node size and perf-DB versions of a SKU; unknown SKUs list the known ones."""
    path = cache_dir() / f"system-{re.sub(r'[^A-Za-z0-9_.-]', '_', sku)}-aic{aic_version()}.json"
    try:
        return SystemFacts(**json.loads(path.read_text()))
    except (OSError, ValueError, TypeError):  # absent, unreadable or from another layout: read AIC again
        pass
    facts = _read_system_facts(sku)
    from spica_core.store import write_file  # atomic: a concurrent reader sees no half-written file

    try:
        write_file(path, json.dumps(asdict(facts)))
    except OSError:  # a read-only cache only costs the next process the same read
        pass
    return facts


def _read_system_facts(sku: str) -> SystemFacts:
    from aiconfigurator_core.sdk.perf_database import get_latest_database_version, load_system_spec

    spec: dict[str, Any] = load_system_spec(sku) if sku in known_systems() else {}
    if not spec:
        with_data = sorted(_supported_databases())
        raise UnknownSystemError(
            f"unknown hardware_sku {sku!r}; aiconfigurator-core systems: {', '.join(known_systems())} "
            f"(with perf data: {', '.join(with_data)})"
        )
    versions: dict[str, str] = {}
    for backend in _AIC_BACKENDS:
        if not _supported_databases().get(sku, {}).get(backend):
            continue
        latest = get_latest_database_version(sku, backend)
        if latest:
            versions[backend] = str(latest)
    return SystemFacts(
        name=sku,
        vram_bytes_per_gpu=int(spec["gpu"]["mem_capacity"]),
        gpus_per_node=int(spec["node"]["num_gpus_per_node"]),
        backend_versions=versions,
        power_w=float(spec["gpu"].get("power") or 0.0),
        inter_node_gbps=float(spec["node"]["inter_node_bw"]) / 1e9,
    )


def backend_version(sku: str, backend: str) -> str:
    """The perf-DB version Spica uses for (SKU, backend): AIC's latest (the ``current`` slot)."""
    facts = system_facts(sku)
    try:
        return facts.backend_versions[backend]
    except KeyError:
        have = ", ".join(facts.backend_versions) or "none"
        raise NoPerfDatabaseError(
            f"aiconfigurator-core has no perf database for backend {backend!r} on {sku!r} "
            f"(backends with data on {sku}: {have})"
        ) from None


def shared_backend_version(skus: Iterable[str], backend: str) -> str:
    """The one perf-DB version of ``backend`` on every GPU type a deployment runs on (one deployment runs one
    engine version); NoPerfDatabaseError when their data are of different versions."""
    versions = {sku: backend_version(sku, backend) for sku in dict.fromkeys(skus)}
    if len(set(versions.values())) > 1:
        raise NoPerfDatabaseError(f"aiconfigurator-core's {backend} data are of different engine versions on "
                                  + ", ".join(f"{sku} ({v})" for sku, v in versions.items())
                                  + "; one deployment runs one")
    return next(iter(versions.values()))


__all__ = [
    "ModelFacts", "SystemFacts", "aic_version", "backend_version", "shared_backend_version", "bundled_models", "cache_dir", "is_local_model",
    "known_systems", "model_facts", "quiet_aic", "system_facts",
]

"""Reading a DynamoGraphDeployment's components: names, containers, the GPU resource and a worker's flags.

The backend a container launches, its image tag, the parallel sizes and KV block size its arguments set.
The generator (``manifests.py``) writes with the same names and flags the checks read here.
"""
from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from spica_core.config import BACKENDS


GPU_RESOURCE = "nvidia.com/gpu"
MAIN_CONTAINER = "main"
WORKER_TYPES = ("worker", "prefill", "decode")


# Each backend's parallel-size flags: the spelling Spica's manifests write first, then the others the engine
# accepts (a hand-written manifest may use them). An instance's GPUs are the product of INSTANCE_SIZES: SGLang's
# TP size is the whole instance, its attention DP lives inside it.
PARALLEL_FLAGS: dict[str, dict[str, tuple[str, ...]]] = {
    "vllm": {"tp": ("--tensor-parallel-size", "-tp"), "pp": ("--pipeline-parallel-size", "-pp"),
             "dp": ("--data-parallel-size", "-dp")},
    "sglang": {"tp": ("--tp-size", "--tensor-parallel-size", "--tp"), "pp": ("--pp-size", "--pipeline-parallel-size"),
               "dp": ("--dp-size",), "ep": ("--ep-size",)},
    "trtllm": {"tp": ("--tensor-parallel-size",), "pp": ("--pipeline-parallel-size",),
               "ep": ("--expert-parallel-size",)},
}
INSTANCE_SIZES: dict[str, tuple[str, ...]] = {"vllm": ("tp", "pp", "dp"), "sglang": ("tp", "pp"),
                                              "trtllm": ("tp", "pp")}


def parallel_flag(backend: str, size: str) -> str:
    """The flag Spica writes for one parallel size of a backend (``tp``, ``pp``, ``dp``, ``ep``)."""
    return PARALLEL_FLAGS[backend][size][0]


def image_tag(image: str) -> str | None:
    """The tag of an image reference (None for an untagged or digest-only reference)."""
    ref = image.split("@", 1)[0]
    last = ref.rsplit("/", 1)[-1]
    return last.split(":", 1)[1] if ":" in last else None


def backend_of(container: Mapping[str, Any]) -> str | None:
    """The backend a container launches (``python3 -m dynamo.<backend>``), or None."""
    tokens = _tokens(container)
    for a, b in zip(tokens, tokens[1:]):
        if a == "-m" and b.startswith("dynamo.") and b[len("dynamo."):] in BACKENDS:
            return b[len("dynamo."):]
    return None


# ---------------------------------------------------------------- flags


def _flag(args: list[str], *names: str) -> str | None:
    """The value of the last occurrence of any of ``names`` (``--x v`` or ``--x=v``)."""
    found = None
    for i, arg in enumerate(args):
        for name in names:
            if arg == name and i + 1 < len(args):
                found = args[i + 1]
            elif arg.startswith(name + "="):
                found = arg[len(name) + 1:]
    return found


def _int_flag(args: list[str], *names: str, default: int = 1) -> int | None:
    value = _flag(args, *names)
    if value is None:
        return default
    try:
        return int(value)
    except ValueError:
        return None


def instance_gpus(backend: str | None, args: list[str]) -> int | None:
    """GPUs of one worker instance from its global parallel flags (None when they cannot be read)."""
    flags = PARALLEL_FLAGS.get(backend or "")
    if flags is None:
        return None
    if backend == "trtllm" and _flag(args, *flags["tp"]) is None and "--extra-engine-args" in args:
        return None   # the parallel sizes live in a file we cannot read
    sizes = [_int_flag(args, *flags[size]) for size in INSTANCE_SIZES[backend or ""]]
    if any(s is None for s in sizes):
        return None
    return math.prod(s for s in sizes if s is not None)


def _override(args: list[str]) -> dict[str, Any] | None:
    raw = _flag(args, "--override-engine-args")
    if raw is None:
        return None
    try:
        parsed = json.loads(raw)
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict) else None


def block_size(backend: str | None, args: list[str]) -> int | None:
    """The KV block (page) size a worker's args set, or None."""
    if backend == "vllm":
        value = _flag(args, "--block-size")
    elif backend == "sglang":
        value = _flag(args, "--page-size")
    elif backend == "trtllm":
        override = _override(args) or {}
        cache = override.get("kv_cache_config") if isinstance(override.get("kv_cache_config"), dict) else {}
        value = cache.get("tokens_per_block", _flag(args, "--kv-block-size"))
    else:
        return None
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None


# ---------------------------------------------------------------- components


def _get(value: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    return value


def _dicts(values: Any) -> list[Mapping[str, Any]]:
    return [v for v in values if isinstance(v, Mapping)] if isinstance(values, list) else []


def _main(comp: Mapping[str, Any]) -> Mapping[str, Any] | None:
    mains = [c for c in _dicts(_get(comp, "podTemplate", "spec", "containers")) if c.get("name") == MAIN_CONTAINER]
    return mains[0] if len(mains) == 1 else None


def _tokens(container: Mapping[str, Any]) -> list[str]:
    return [t for t in [*(container.get("command") or ()), *(container.get("args") or ())] if isinstance(t, str)]


def _comp(comp: Mapping[str, Any], index: int) -> str:
    name = comp.get("name")
    return f"spec.components[{name}]" if isinstance(name, str) and name else f"spec.components[{index}]"


__all__ = ["GPU_RESOURCE", "INSTANCE_SIZES", "MAIN_CONTAINER", "PARALLEL_FLAGS", "WORKER_TYPES",
           "backend_of", "block_size", "image_tag", "instance_gpus", "parallel_flag"]

"""The serving engines, one module each (``vllm``, ``sglang``, ``trtllm``): the flags a manifest writes for a
worker, how the manifest checks read them back, and the engine section the replay needs. A backend name is a key
of :data:`ENGINES`; every module has the same names (``args``, ``block_size``, ``publishes_events``,
``problems``, ``replay_settings``, ``PARALLEL_FLAGS``, ``INSTANCE_SIZES``, ``EVENT_FLAGS``)."""
from __future__ import annotations

import math
from types import ModuleType

from spica_core.engines import sglang, trtllm, vllm
from spica_core.engines.flags import flag_value, int_flag, json_arg, num_arg
from spica_core.engines.launch import Launch, Problems

ENGINES: dict[str, ModuleType] = {m.NAME: m for m in (vllm, sglang, trtllm)}


def engine(backend: str) -> ModuleType:
    """The module of a backend (KeyError for an unknown one: backends are checked where the config is read)."""
    return ENGINES[backend]


def publishes_events(backend: str | None, worker_args: list[str]) -> bool:
    """Whether a worker publishes KV events for the KV router: by its engine's rules, or, for a container whose
    engine cannot be read, by any engine's event flag."""
    module = ENGINES.get(backend or "")
    if module is not None:
        return bool(module.publishes_events(worker_args))
    return any(flag in worker_args for m in ENGINES.values() for flag in m.EVENT_FLAGS)


def instance_gpus(backend: str | None, worker_args: list[str]) -> int | None:
    """GPUs of one worker instance from its parallel flags (None when they cannot be read)."""
    module = ENGINES.get(backend or "")
    if module is None:
        return None
    flags = module.PARALLEL_FLAGS
    if backend == trtllm.NAME and flag_value(worker_args, *flags["tp"]) is None and "--extra-engine-args" in worker_args:
        return None   # the parallel sizes live in a file we cannot read
    sizes = [int_flag(worker_args, *flags[size]) for size in module.INSTANCE_SIZES]
    if any(s is None for s in sizes):
        return None
    return math.prod(s for s in sizes if s is not None)


__all__ = ["ENGINES", "Launch", "Problems", "engine", "flag_value", "instance_gpus", "int_flag", "json_arg",
           "num_arg", "publishes_events", "sglang", "trtllm", "vllm"]

"""TRT-LLM (``python3 -m dynamo.trtllm``): the flags a manifest writes, how the checks read them back, and what
the replay needs beyond the shared engine arguments (nothing).

Engine settings that have no flag go through ``--override-engine-args`` (JSON, deep-merged last)."""
from __future__ import annotations

import math
from typing import Any

from spica_core.deployment import EngineKnobs
from spica_core.engines.flags import flag_value, int_flag, int_or_none, json_arg, json_flag, num_arg
from spica_core.engines.launch import Launch
from spica_core.errors import SpicaError

NAME = "trtllm"
PARALLEL_FLAGS: dict[str, tuple[str, ...]] = {"tp": ("--tensor-parallel-size",), "pp": ("--pipeline-parallel-size",),
                                              "ep": ("--expert-parallel-size",)}
INSTANCE_SIZES = ("tp", "pp")
OVERRIDE_FLAG = "--override-engine-args"
# --publish-events-and-metrics is what Spica writes; Dynamo 1.6 expands it to --publish-kv-events --publish-metrics.
EVENT_FLAGS = ("--publish-events-and-metrics", "--publish-kv-events")


def args(launch: Launch) -> list[str]:
    """The worker's arguments."""
    shape, knobs, role, c = launch.shape, launch.knobs, launch.role, launch.candidate
    if knobs.max_num_batched_tokens % knobs.block_size:
        launch.problems.add(f"{role}_max_num_batched_tokens", f"TRT-LLM needs max_num_tokens "
                                                              f"({knobs.max_num_batched_tokens}) divisible by the "
                                                              f"block size ({knobs.block_size})")
    out = ["--model-path", launch.model, "--served-model-name", launch.model, PARALLEL_FLAGS["tp"][0],
           str(shape.tp * shape.attention_dp)]
    if shape.pp > 1:
        out += [PARALLEL_FLAGS["pp"][0], str(shape.pp)]
    if shape.attention_dp > 1:
        out += ["--enable-attention-dp"]
    if shape.is_moe_sharded:
        out += [PARALLEL_FLAGS["ep"][0], str(shape.moe_ep)]
    out += ["--max-batch-size", str(knobs.max_num_seqs), "--max-num-tokens", str(knobs.max_num_batched_tokens),
            "--kv-block-size", str(knobs.block_size),
            "--free-gpu-memory-fraction", num_arg(knobs.gpu_memory_utilization)]
    out += launch.context_args("--max-seq-len")
    if role != "agg":
        out += ["--disaggregation-mode", role]
    if launch.publishes_events:
        out += [EVENT_FLAGS[0]]
    if launch.offloads:
        out += ["--connector", "kvbm"]
    cache: dict[str, Any] = {"free_gpu_memory_fraction": knobs.gpu_memory_utilization,
                             "tokens_per_block": knobs.block_size, "enable_block_reuse": knobs.enable_prefix_caching}
    if c.precision.kv_cache_dtype == "fp8":
        cache["dtype"] = "fp8"
    if not c.precision.native:  # TRT-LLM loads pre-quantized (ModelOpt) checkpoints only
        launch.note_checkpoint()
    if launch.offloads:
        cache["enable_partial_reuse"] = False
    override: dict[str, Any] = {"enable_chunked_prefill": True, "disable_overlap_scheduler": role == "prefill",
                                "kv_cache_config": cache}
    if shape.is_moe_sharded:
        override["moe_tensor_parallel_size"] = shape.moe_tp
    if role != "agg":
        buffer = _transceiver_tokens(launch)
        if buffer is not None:
            override["cache_transceiver_config"] = {"backend": "DEFAULT", "max_tokens_in_buffer": buffer}
    if c.context.aic_nextn:
        override["speculative_config"] = {"decoding_type": "MTP", "num_nextn_predict_layers": c.context.aic_nextn}
    out += [OVERRIDE_FLAG, json_arg(override)]
    if shape.attention_dp > 1:
        launch.note("trtllm-per-rank: max_batch_size / max_num_tokens are taken as per attention-DP rank "
                    "(inferred, not verified in TRT-LLM)")
    return out


def _transceiver_tokens(launch: Launch) -> int | None:
    """max(S_tokens, context_length) rounded up to a whole number of blocks (the AIC bridge rule)."""
    length = launch.candidate.context.context_length
    if length is None:
        from spica_core.space.facts import model_facts

        try:
            length = model_facts(launch.model).max_context
        except SpicaError as exc:
            launch.problems.add("context_length", f"the TRT-LLM KV transfer buffer must hold the longest sequence, "
                                                  f"and the model's maximum is unknown ({exc}); pin context_length")
            return None
    tokens = max(launch.knobs.max_num_batched_tokens, int(length))
    return math.ceil(tokens / launch.knobs.block_size) * launch.knobs.block_size


def block_size(worker_args: list[str]) -> int | None:
    """The KV block size a worker's arguments set (the override's ``tokens_per_block`` wins over the flag)."""
    cache = (json_flag(worker_args, OVERRIDE_FLAG) or {}).get("kv_cache_config")
    cache = cache if isinstance(cache, dict) else {}
    return int_or_none(cache.get("tokens_per_block", flag_value(worker_args, "--kv-block-size")))


def publishes_events(worker_args: list[str]) -> bool:
    """Whether the worker publishes KV events for the KV router."""
    return any(flag in worker_args for flag in EVENT_FLAGS)


def problems(worker_args: list[str]) -> list[str]:
    """What a worker's arguments get wrong for TRT-LLM."""
    out = []
    if flag_value(worker_args, OVERRIDE_FLAG) is not None and json_flag(worker_args, OVERRIDE_FLAG) is None:
        out.append(f"{OVERRIDE_FLAG} is not a JSON object")
    tokens, size = int_flag(worker_args, "--max-num-tokens", default=0), block_size(worker_args)
    if tokens and size and tokens % size:
        out.append(f"TRT-LLM --max-num-tokens {tokens} is not a multiple of the KV block size {size}")
    return out


def replay_settings(knobs: EngineKnobs) -> dict[str, Any]:
    return {}


__all__ = ["INSTANCE_SIZES", "NAME", "PARALLEL_FLAGS", "args", "block_size", "problems", "publishes_events",
           "replay_settings"]

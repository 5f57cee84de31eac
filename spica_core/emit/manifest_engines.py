"""Each engine's command line in a manifest: vLLM, SGLang and TRT-LLM flags, precision, and KVBM host offload.

Each backend gets its own spelling of the parallel sizes, batching limits, KV cache, disaggregation and
KV-event settings, with batching per attention-DP rank as the replay modelled it.
"""
from __future__ import annotations

import math
from typing import Any

from spica_core.deployment import EngineKnobs
from spica_core.emit.crd_reading import parallel_flag
from spica_core.emit.manifest_context import _Context, _context_args, _env, _json, _num
from spica_core.errors import SpicaError
from spica_core.space.parallel import Shape


HOST_MEMORY_HEADROOM_GIB = 64        # KVBM pods: the host cache plus this much for the process
HOST_MEMORY_LIMIT_FACTOR = 1.25      # memory limit = request × this
SGLANG_BOOTSTRAP_PORT = 12345
VLLM_KV_EVENTS = {"publisher": "zmq", "topic": "kv-events", "endpoint": "tcp://*:20080", "enable_kv_cache_events": True}
SGLANG_KV_EVENTS = {"publisher": "zmq", "topic": "kv-events", "endpoint": "tcp://*:5557"}
NIXL_CONNECTOR = {"kv_connector": "NixlConnector", "kv_role": "kv_both"}
KVBM_MODULE = "kvbm.vllm_integration.connector"
KVBM_CONNECTOR = {"kv_connector": "DynamoConnector", "kv_connector_module_path": KVBM_MODULE, "kv_role": "kv_both"}
PD_CONNECTOR = {"kv_connector": "PdConnector", "kv_role": "kv_both",
                "kv_connector_extra_config": {"connectors": [KVBM_CONNECTOR, NIXL_CONNECTOR]},
                "kv_connector_module_path": KVBM_MODULE}


# -- precision: each engine's own flags; FP8 is the only precision the engines quantize to at load time


ONLINE_FP8 = ("fp8", "fp8_block", "fp8_static")
KV_DTYPE_FLAGS = {"vllm": "fp8", "sglang": "fp8_e4m3"}   # --kv-cache-dtype values of an fp8 KV cache


def _precision_args(ctx: _Context, backend: str) -> list[str]:
    """vLLM/SGLang ``--quantization`` (a bf16 checkpoint quantized at load) and ``--kv-cache-dtype``."""
    p = ctx.candidate.precision
    args: list[str] = []
    if not p.native and p.quantization in ONLINE_FP8:
        args += ["--quantization", "fp8"]
    elif not p.native:   # the engine reads any other precision from a quantized checkpoint, never from a flag
        _note_checkpoint(ctx, backend)
    if p.kv_cache_dtype == "fp8":
        args += ["--kv-cache-dtype", KV_DTYPE_FLAGS[backend]]
    return args


def _note_checkpoint(ctx: _Context, backend: str) -> None:
    p = ctx.candidate.precision
    note = (f"quantization {p.quantization}: {backend} does not quantize to it at load time; point the model at a "
            f"{p.quantization} checkpoint of {ctx.candidate.context.model_name}")
    if note not in ctx.notes:
        ctx.notes.append(note)


# -- vLLM


def _vllm_args(ctx: _Context, role: str, shape: Shape, knobs: EngineKnobs) -> list[str]:
    model = ctx.candidate.context.model_name
    args = ["--model", model, "--served-model-name", model, parallel_flag("vllm", "tp"), str(shape.tp)]
    if shape.pp > 1:
        args += [parallel_flag("vllm", "pp"), str(shape.pp)]
    if shape.attention_dp > 1:
        args += [parallel_flag("vllm", "dp"), str(shape.attention_dp)]
    if shape.moe_ep > 1:
        args += ["--enable-expert-parallel"]
    args += ["--max-num-seqs", str(knobs.max_num_seqs), "--max-num-batched-tokens", str(knobs.max_num_batched_tokens),
             "--block-size", str(knobs.block_size), "--gpu-memory-utilization", _num(knobs.gpu_memory_utilization),
             "--enable-prefix-caching" if knobs.enable_prefix_caching else "--no-enable-prefix-caching"]
    args += _precision_args(ctx, "vllm")
    args += _context_args(ctx, "--max-model-len")
    nextn = ctx.candidate.context.aic_nextn
    if nextn:
        args += ["--speculative-config", _json({"method": "mtp", "num_speculative_tokens": nextn})]
    if role != "agg":
        args += ["--disaggregation-mode", role]
    if ctx.offloads(role):
        args += ["--kv-transfer-config", _json(KVBM_CONNECTOR if role == "agg" else PD_CONNECTOR)]
        if role == "prefill":
            args += ["--disable-hybrid-kv-cache-manager"]
    elif role != "agg":
        args += ["--kv-transfer-config", _json(NIXL_CONNECTOR)]
    if ctx.publishes_events(role):
        args += ["--kv-events-config", _json(VLLM_KV_EVENTS)]
    return args


# -- SGLang: worker-level limits are divided by the attention-DP size inside SGLang


def _sglang_args(ctx: _Context, role: str, shape: Shape, knobs: EngineKnobs) -> list[str]:
    model = ctx.candidate.context.model_name
    dp = shape.attention_dp
    args = ["--model-path", model, "--served-model-name", model, parallel_flag("sglang", "tp"), str(shape.tp * dp)]
    if shape.pp > 1:
        args += [parallel_flag("sglang", "pp"), str(shape.pp)]
    if dp > 1:
        args += [parallel_flag("sglang", "dp"), str(dp), "--enable-dp-attention"]
    if shape.moe_ep > 1:
        args += [parallel_flag("sglang", "ep"), str(shape.moe_ep)]
    args += ["--max-running-requests", str(knobs.max_num_seqs * dp),
             "--chunked-prefill-size", str(knobs.max_num_batched_tokens * dp),
             "--max-prefill-tokens", str(knobs.max_num_batched_tokens),
             "--page-size", str(knobs.block_size), "--mem-fraction-static", _num(knobs.gpu_memory_utilization)]
    if not knobs.enable_prefix_caching:
        args += ["--disable-radix-cache"]
    args += _precision_args(ctx, "sglang")
    args += _context_args(ctx, "--context-length")
    nextn = ctx.candidate.context.aic_nextn
    if nextn:
        args += ["--speculative-algorithm", "NEXTN", "--speculative-num-steps", str(nextn),
                 "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", str(nextn + 1)]
    args += ["--trust-remote-code", "--skip-tokenizer-init"]
    if role != "agg":
        args += ["--disaggregation-mode", role, "--disaggregation-transfer-backend", "nixl",
                 "--disaggregation-bootstrap-port", str(SGLANG_BOOTSTRAP_PORT), "--host", "0.0.0.0"]
    if ctx.publishes_events(role):
        args += ["--kv-events-config", _json(SGLANG_KV_EVENTS)]
    return args


# -- TRT-LLM: engine settings through --override-engine-args (deep-merged last)


def _trtllm_args(ctx: _Context, role: str, shape: Shape, knobs: EngineKnobs) -> list[str]:
    c = ctx.candidate
    model = c.context.model_name
    g_tp = shape.tp * shape.attention_dp
    if knobs.max_num_batched_tokens % knobs.block_size:
        ctx.problems.add(f"{role}_max_num_batched_tokens", f"TRT-LLM needs max_num_tokens "
                                                           f"({knobs.max_num_batched_tokens}) divisible by the block "
                                                           f"size ({knobs.block_size})")
    args = ["--model-path", model, "--served-model-name", model, parallel_flag("trtllm", "tp"), str(g_tp)]
    if shape.pp > 1:
        args += [parallel_flag("trtllm", "pp"), str(shape.pp)]
    if shape.attention_dp > 1:
        args += ["--enable-attention-dp"]
    if shape.is_moe_sharded:
        args += [parallel_flag("trtllm", "ep"), str(shape.moe_ep)]
    args += ["--max-batch-size", str(knobs.max_num_seqs), "--max-num-tokens", str(knobs.max_num_batched_tokens),
             "--kv-block-size", str(knobs.block_size),
             "--free-gpu-memory-fraction", _num(knobs.gpu_memory_utilization)]
    args += _context_args(ctx, "--max-seq-len")
    if role != "agg":
        args += ["--disaggregation-mode", role]
    if ctx.publishes_events(role):
        args += ["--publish-events-and-metrics"]
    if ctx.offloads(role):
        args += ["--connector", "kvbm"]
    cache: dict[str, Any] = {"free_gpu_memory_fraction": knobs.gpu_memory_utilization,
                             "tokens_per_block": knobs.block_size, "enable_block_reuse": knobs.enable_prefix_caching}
    if c.precision.kv_cache_dtype == "fp8":
        cache["dtype"] = "fp8"
    if not c.precision.native:  # TRT-LLM loads pre-quantized (ModelOpt) checkpoints only
        _note_checkpoint(ctx, "trtllm")
    if ctx.offloads(role):
        cache["enable_partial_reuse"] = False
    override: dict[str, Any] = {"enable_chunked_prefill": True, "disable_overlap_scheduler": role == "prefill",
                                "kv_cache_config": cache}
    if shape.is_moe_sharded:
        override["moe_tensor_parallel_size"] = shape.moe_tp
    if role != "agg":
        buffer = _transceiver_tokens(ctx, knobs)
        if buffer is not None:
            override["cache_transceiver_config"] = {"backend": "DEFAULT", "max_tokens_in_buffer": buffer}
    if c.context.aic_nextn:
        override["speculative_config"] = {"decoding_type": "MTP", "num_nextn_predict_layers": c.context.aic_nextn}
    args += ["--override-engine-args", _json(override)]
    if "trtllm-per-rank" not in ctx.notes and shape.attention_dp > 1:
        ctx.notes.append("trtllm-per-rank: max_batch_size / max_num_tokens are taken as per attention-DP rank "
                         "(inferred, not verified in TRT-LLM)")
    return args


def _transceiver_tokens(ctx: _Context, knobs: EngineKnobs) -> int | None:
    """max(S_tokens, context_length) rounded up to a whole number of blocks (the AIC bridge rule)."""
    length = ctx.candidate.context.context_length
    if length is None:
        from spica_core.space.facts import model_facts

        try:
            length = model_facts(ctx.candidate.context.model_name).max_context
        except SpicaError as exc:
            ctx.problems.add("context_length", f"the TRT-LLM KV transfer buffer must hold the longest sequence, and "
                                               f"the model's maximum is unknown ({exc}); pin context_length")
            return None
    tokens = max(knobs.max_num_batched_tokens, int(length))
    return math.ceil(tokens / knobs.block_size) * knobs.block_size


# -- KVBM host offload


def _kvbm_env(ctx: _Context) -> list[dict[str, str]]:
    offload = ctx.candidate.offload
    env = [_env("DYN_KVBM_CPU_CACHE_OVERRIDE_NUM_BLOCKS", str(offload.num_g2_blocks))]
    if offload.offload_batch_size is not None:
        env.append(_env("DYN_KVBM_MAX_TRANSFER_BATCH_SIZE", str(offload.offload_batch_size)))
        note = "offload_batch_size: mapped to DYN_KVBM_MAX_TRANSFER_BATCH_SIZE (approximate; not replayed)"
        if note not in ctx.notes:
            ctx.notes.append(note)
    return env


def _host_memory(ctx: _Context, shape: Shape, knobs: EngineKnobs) -> tuple[str, str] | None:
    """(request, limit) of a KVBM pod: the host tier (one pool per attention-DP rank) plus headroom."""
    per_token = ctx.candidate.offload.kv_bytes_per_token
    if per_token is None:
        return None
    cache = ctx.candidate.offload.num_g2_blocks * knobs.block_size * per_token * shape.attention_dp
    request = math.ceil(cache / 2 ** 30) + HOST_MEMORY_HEADROOM_GIB
    return f"{request}Gi", f"{math.ceil(request * HOST_MEMORY_LIMIT_FACTOR)}Gi"

"""vLLM (``python3 -m dynamo.vllm``): the flags a manifest writes, how the checks read them back, and what the
replay needs beyond the shared engine arguments (nothing: vLLM's batching knobs are the replay's own)."""
from __future__ import annotations

from typing import Any

from spica_core.deployment import EngineKnobs
from spica_core.engines.flags import flag_value, int_or_none, json_arg, num_arg
from spica_core.engines.launch import Launch

NAME = "vllm"
# Each parallel size's flags: the spelling Spica writes first, then the others vLLM accepts (a hand-written
# manifest may use them). An instance's GPUs are the product of INSTANCE_SIZES.
PARALLEL_FLAGS: dict[str, tuple[str, ...]] = {"tp": ("--tensor-parallel-size", "-tp"),
                                              "pp": ("--pipeline-parallel-size", "-pp"),
                                              "dp": ("--data-parallel-size", "-dp")}
EVENT_FLAGS = ("--kv-events-config",)
INSTANCE_SIZES = ("tp", "pp", "dp")
FP8_KV_DTYPE = "fp8"
KV_EVENTS = {"publisher": "zmq", "topic": "kv-events", "endpoint": "tcp://*:20080", "enable_kv_cache_events": True}
NIXL_CONNECTOR = {"kv_connector": "NixlConnector", "kv_role": "kv_both"}
KVBM_MODULE = "kvbm.vllm_integration.connector"
KVBM_CONNECTOR = {"kv_connector": "DynamoConnector", "kv_connector_module_path": KVBM_MODULE, "kv_role": "kv_both"}
PD_CONNECTOR = {"kv_connector": "PdConnector", "kv_role": "kv_both",
                "kv_connector_extra_config": {"connectors": [KVBM_CONNECTOR, NIXL_CONNECTOR]},
                "kv_connector_module_path": KVBM_MODULE}


def args(launch: Launch) -> list[str]:
    """The worker's arguments."""
    shape, knobs, role = launch.shape, launch.knobs, launch.role
    out = ["--model", launch.model, "--served-model-name", launch.model, PARALLEL_FLAGS["tp"][0], str(shape.tp)]
    if shape.pp > 1:
        out += [PARALLEL_FLAGS["pp"][0], str(shape.pp)]
    if shape.attention_dp > 1:
        out += [PARALLEL_FLAGS["dp"][0], str(shape.attention_dp)]
    if shape.moe_ep > 1:
        out += ["--enable-expert-parallel"]
    out += ["--max-num-seqs", str(knobs.max_num_seqs), "--max-num-batched-tokens", str(knobs.max_num_batched_tokens),
            "--block-size", str(knobs.block_size), "--gpu-memory-utilization", num_arg(knobs.gpu_memory_utilization),
            "--enable-prefix-caching" if knobs.enable_prefix_caching else "--no-enable-prefix-caching"]
    out += launch.precision_args(FP8_KV_DTYPE)
    out += launch.context_args("--max-model-len")
    nextn = launch.candidate.context.aic_nextn
    if nextn:
        out += ["--speculative-config", json_arg({"method": "mtp", "num_speculative_tokens": nextn})]
    if role != "agg":
        out += ["--disaggregation-mode", role]
    if launch.offloads:
        out += ["--kv-transfer-config", json_arg(KVBM_CONNECTOR if role == "agg" else PD_CONNECTOR)]
        if role == "prefill":
            out += ["--disable-hybrid-kv-cache-manager"]
    elif role != "agg":
        out += ["--kv-transfer-config", json_arg(NIXL_CONNECTOR)]
    if launch.publishes_events:
        out += [EVENT_FLAGS[0], json_arg(KV_EVENTS)]
    return out


def block_size(worker_args: list[str]) -> int | None:
    """The KV block size a worker's arguments set."""
    return int_or_none(flag_value(worker_args, "--block-size"))


def publishes_events(worker_args: list[str]) -> bool:
    """Whether the worker publishes KV events for the KV router (with prefix caching off, vLLM has none)."""
    return EVENT_FLAGS[0] in worker_args and "--no-enable-prefix-caching" not in worker_args


def problems(worker_args: list[str]) -> list[str]:
    """What a worker's arguments get wrong for vLLM."""
    if EVENT_FLAGS[0] in worker_args and not publishes_events(worker_args):
        return ["publishes KV events with prefix caching off (vLLM publishes none)"]
    return []


def replay_settings(knobs: EngineKnobs) -> dict[str, Any]:
    return {}


__all__ = ["INSTANCE_SIZES", "NAME", "PARALLEL_FLAGS", "args", "block_size", "problems", "publishes_events",
           "replay_settings"]

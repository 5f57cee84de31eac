"""SGLang (``python3 -m dynamo.sglang``): the flags a manifest writes, how the checks read them back, and the
prefill budgets the replay schedules with.

SGLang divides its worker-level limits by the attention-DP size, and its TP size is the whole instance (its
attention DP lives inside it), so a manifest writes them multiplied up from the per-rank knobs."""
from __future__ import annotations

from typing import Any

from spica_core.deployment import EngineKnobs
from spica_core.engines.flags import flag_value, int_or_none, json_arg, num_arg
from spica_core.engines.launch import Launch

NAME = "sglang"
PARALLEL_FLAGS: dict[str, tuple[str, ...]] = {"tp": ("--tp-size", "--tensor-parallel-size", "--tp"),
                                              "pp": ("--pp-size", "--pipeline-parallel-size"),
                                              "dp": ("--dp-size",), "ep": ("--ep-size",)}
EVENT_FLAGS = ("--kv-events-config",)
INSTANCE_SIZES = ("tp", "pp")
FP8_KV_DTYPE = "fp8_e4m3"
BOOTSTRAP_PORT = 12345
KV_EVENTS = {"publisher": "zmq", "topic": "kv-events", "endpoint": "tcp://*:5557"}


def args(launch: Launch) -> list[str]:
    """The worker's arguments."""
    shape, knobs, role = launch.shape, launch.knobs, launch.role
    dp = shape.attention_dp
    out = ["--model-path", launch.model, "--served-model-name", launch.model, PARALLEL_FLAGS["tp"][0],
           str(shape.tp * dp)]
    if shape.pp > 1:
        out += [PARALLEL_FLAGS["pp"][0], str(shape.pp)]
    if dp > 1:
        out += [PARALLEL_FLAGS["dp"][0], str(dp), "--enable-dp-attention"]
    if shape.moe_ep > 1:
        out += [PARALLEL_FLAGS["ep"][0], str(shape.moe_ep)]
    budget = prefill_budgets(knobs)
    out += ["--max-running-requests", str(knobs.max_num_seqs * dp),
            "--chunked-prefill-size", str(budget["chunked_prefill_size"] * dp),
            "--max-prefill-tokens", str(budget["max_prefill_tokens"]),
            "--page-size", str(knobs.block_size), "--mem-fraction-static", num_arg(knobs.gpu_memory_utilization)]
    if not knobs.enable_prefix_caching:
        out += ["--disable-radix-cache"]
    out += launch.precision_args(FP8_KV_DTYPE)
    out += launch.context_args("--context-length")
    nextn = launch.candidate.context.aic_nextn
    if nextn:
        out += ["--speculative-algorithm", "NEXTN", "--speculative-num-steps", str(nextn),
                "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", str(nextn + 1)]
    recv = launch.candidate.context.scheduler_recv_interval
    if recv > 1:
        out += ["--scheduler-recv-interval", str(recv)]
    out += ["--trust-remote-code", "--skip-tokenizer-init"]
    if role != "agg":
        out += ["--disaggregation-mode", role, "--disaggregation-transfer-backend", "nixl",
                "--disaggregation-bootstrap-port", str(BOOTSTRAP_PORT), "--host", "0.0.0.0"]
    if launch.publishes_events:
        out += [EVENT_FLAGS[0], json_arg(KV_EVENTS)]
    return out


def prefill_budgets(knobs: EngineKnobs) -> dict[str, int]:
    """SGLang schedules prefill by its own two budgets, not by max_num_batched_tokens: both are set from that knob,
    per attention-DP rank (the runtime's defaults, 8,192 and 16,384, would ignore the knob)."""
    tokens = int(knobs.max_num_batched_tokens)
    return {"chunked_prefill_size": tokens, "max_prefill_tokens": tokens}


def block_size(worker_args: list[str]) -> int | None:
    """The KV page size a worker's arguments set."""
    return int_or_none(flag_value(worker_args, "--page-size"))


def publishes_events(worker_args: list[str]) -> bool:
    """Whether the worker publishes KV events for the KV router (with the radix cache off, SGLang has none)."""
    return EVENT_FLAGS[0] in worker_args and "--disable-radix-cache" not in worker_args


def problems(worker_args: list[str]) -> list[str]:
    """What a worker's arguments get wrong for SGLang."""
    if EVENT_FLAGS[0] in worker_args and not publishes_events(worker_args):
        return ["publishes KV events with the radix cache off (SGLang publishes none)"]
    return []


def replay_settings(knobs: EngineKnobs) -> dict[str, Any]:
    """The replay's ``sglang`` engine section: the prefill budgets the manifest sets."""
    return {"sglang": prefill_budgets(knobs)}


__all__ = ["INSTANCE_SIZES", "NAME", "PARALLEL_FLAGS", "args", "block_size", "prefill_budgets", "problems",
           "publishes_events", "replay_settings"]

"""Candidate → v1beta1 DynamoGraphDeployment (manifests spec), and the offline CRD check (spec §8)."""
from __future__ import annotations

import copy
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from spica_core.config.model import SmartSearchConfig
from spica_core.emit.crd import API_VERSION, KIND, check_manifest
from spica_core.config import BACKENDS
from spica_core.emit.crd_reading import WORKER_TYPES, backend_of
from spica_core.engines import instance_gpus
from spica_core.emit.manifest_options import ManifestOptions
from spica_core.emit.manifests import manifest, manifest_yaml
from spica_core.emit.outputs import EmitOptions, write_manifests
from spica_core.emit.records import CandidateRecord
from spica_core.errors import ManifestError
from spica_core.deployment import Candidate, Router
from spica_core.space.parallel import ParallelConfig

EXAMPLES = Path(__file__).parent / "data" / "dynamo-examples"
EXAMPLE_FILES = sorted(EXAMPLES.glob("example-*.yaml"))

QWEN = {"model_name": "Qwen/Qwen3-32B", "hardware_sku": "h200_sxm"}
DSV3 = {"model_name": "deepseek-ai/DeepSeek-V3", "hardware_sku": "h200_sxm"}
NO_PLANNER = {"planner_scaling_policy": "disabled"}
KV = {"router_mode": "kv_router", "overlap_score_credit": 0.5, "prefill_load_scale": 4.0, "router_temperature": 0.2}
VLLM_EVENTS = '{"publisher":"zmq","topic":"kv-events","endpoint":"tcp://*:20080","enable_kv_cache_events":true}'
NIXL = '{"kv_connector":"NixlConnector","kv_role":"kv_both"}'


def config(space: dict[str, Any], mode: str, backend: str, goal: dict[str, Any] | None = None) -> SmartSearchConfig:
    return SmartSearchConfig.from_dict({"search_space": {**space, "deployment_mode": [mode], "backend": [backend]},
                                        "workload": {"trace_path": "t.jsonl"}, **({"goal": goal} if goal else {})})


def candidate(space: dict[str, Any], mode: str, backend: str, selection: dict[str, Any], parallel: dict[str, Any],
              winners: dict[int, Any] | None = None) -> Candidate:
    cfg = config(space, mode, backend)
    return Candidate.unroll(cfg.search_space, {"deployment_mode": mode, "backend": backend, **selection},
                            ParallelConfig.from_dict(mode, parallel), winners)


def by_name(doc: dict[str, Any], name: str) -> dict[str, Any]:
    [comp] = [c for c in doc["spec"]["components"] if c["name"] == name]
    return comp


def main(comp: dict[str, Any]) -> dict[str, Any]:
    [ctr] = comp["podTemplate"]["spec"]["containers"]
    assert ctr["name"] == "main"
    return ctr


def env(comp: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in main(comp).get("env", [])}


def engine_args(comp: dict[str, Any]) -> list[str]:
    """The worker args after the model flags (checked separately)."""
    args = main(comp)["args"]
    assert args[1] == args[3] and args[2] == "--served-model-name"
    return args[4:]


def valid(doc: dict[str, Any], c: Candidate) -> None:
    assert check_manifest(doc, used_gpus=c.parallel.used_gpus) == []
    assert yaml.safe_load(manifest_yaml(doc)) == doc   # the YAML is the same document, strings stay strings


# ---------------------------------------------------------------- the shipped examples


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=lambda p: p.stem)
def test_shipped_examples_pass_with_a_version_tag_and_need_the_override_with_my_tag(path: Path) -> None:
    text = path.read_text()
    raw = yaml.safe_load(text)
    names = [c["name"] for c in raw["spec"]["components"]]
    # the examples ship the placeholder tag ':my-tag': the webhook wants runtimeVersionOverride on every component
    assert check_manifest(raw) == [
        f"spec.components[{n}].runtimeVersionOverride: required because the main image tag of "
        f"{main(c)['image']!r} is not a semantic version; set it to the Dynamo runtime version, e.g. '1.6.1'"
        for n, c in zip(names, raw["spec"]["components"])]
    assert check_manifest(yaml.safe_load(text.replace(":my-tag", ":1.6.1"))) == []
    overridden = copy.deepcopy(raw)
    for comp in overridden["spec"]["components"]:
        comp["runtimeVersionOverride"] = "1.6.1"
    assert check_manifest(overridden) == []


def test_the_shipped_examples_cover_every_backend_in_both_modes() -> None:
    """So the parametrized check above is not vacuous: the examples are DGDs of each backend, agg and disagg."""
    covered = set()
    for path in EXAMPLE_FILES:
        doc = yaml.safe_load(path.read_text())
        assert (doc["apiVersion"], doc["kind"]) == (API_VERSION, KIND), path.name
        workers = [c for c in doc["spec"]["components"] if c.get("type") in WORKER_TYPES]
        [backend] = {backend_of(main(c)) for c in workers}
        mode = "disagg" if {c["type"] for c in workers} == {"prefill", "decode"} else "agg"
        covered.add((backend, mode))
    assert covered == {(b, m) for b in BACKENDS for m in ("agg", "disagg")}


def _example(name: str = "example-vllm-disagg.yaml") -> dict[str, Any]:
    return yaml.safe_load((EXAMPLES / name).read_text().replace(":my-tag", ":1.6.1"))


def _decode_main(doc: dict[str, Any]) -> dict[str, Any]:
    return main(by_name(doc, "VllmDecodeWorker"))


def test_unknown_field_is_an_error() -> None:
    doc = _example()
    _decode_main(doc)["arg"] = ["--model", "x"]
    [problem] = check_manifest(doc)
    assert problem.startswith("spec.components[VllmDecodeWorker].podTemplate.spec.containers[main]: "
                              "unknown field 'arg' (allowed: args, command, env")


def test_v1alpha1_services_and_v1alpha1_scaling_adapter_are_errors() -> None:
    doc = _example()
    doc["spec"]["services"] = {"Frontend": {}}
    by_name(doc, "VllmDecodeWorker")["scalingAdapter"] = {"enabled": True}
    problems = check_manifest(doc)
    assert problems[0].startswith("spec: unknown field 'services' (allowed: annotations, backendFramework, components")
    assert problems[1] == "spec.components[VllmDecodeWorker].scalingAdapter: no fields are allowed here (got 'enabled')"
    assert len(problems) == 2


def test_gpu_limit_as_int_is_an_error() -> None:
    doc = _example()
    _decode_main(doc)["resources"]["limits"]["nvidia.com/gpu"] = 1
    assert check_manifest(doc, used_gpus=2) == [
        "spec.components[VllmDecodeWorker].podTemplate.spec.containers[main].resources.limits['nvidia.com/gpu']: "
        "write the quantity as a string, e.g. '1' (got int 1)"]


def test_missing_image_is_an_error() -> None:
    doc = _example()
    del _decode_main(doc)["image"]
    assert check_manifest(doc) == ["spec.components[VllmDecodeWorker]: the 'main' container needs a non-empty image"]


def test_component_names_differing_in_case_are_an_error() -> None:
    doc = _example()
    by_name(doc, "VllmPrefillWorker")["name"] = "vllmdecodeworker"
    assert check_manifest(doc) == ["spec.components: component names must be unique case-insensitively"]


def test_gpu_total_must_equal_used_gpus() -> None:
    doc = _example()
    assert check_manifest(doc, used_gpus=2) == []
    by_name(doc, "VllmDecodeWorker")["replicas"] = 3
    assert check_manifest(doc, used_gpus=2) == [
        "spec.components: the worker components use 4 GPUs (replicas × per-pod GPUs × nodes), but the candidate uses 2"]


def test_env_values_and_args_must_be_strings_and_env_names_unique() -> None:
    doc = _example()
    ctr = _decode_main(doc)
    ctr["env"] = [{"name": "DYN_ROUTER_TEMPERATURE", "value": 0.5}, {"name": "DYN_ROUTER_TEMPERATURE", "value": "1"}]
    ctr["args"].append(16384)
    problems = check_manifest(doc)
    where = "spec.components[VllmDecodeWorker].podTemplate.spec.containers[main]"
    assert f"{where}.args[6]: 16384 is not of type 'string'" in problems
    assert f"{where}.env[DYN_ROUTER_TEMPERATURE].value: 0.5 is not of type 'string'" in problems
    assert any(p.startswith(f"{where}.env[DYN_ROUTER_TEMPERATURE]: duplicate entry (name='DYN_ROUTER_TEMPERATURE')")
               for p in problems)
    assert len(problems) == 3


def test_create_time_and_webhook_rules() -> None:
    doc = _example()
    doc["spec"]["restart"] = {"id": "now"}
    doc["spec"]["backendFramework"] = "sglang"
    by_name(doc, "VllmDecodeWorker")["multinode"] = {}
    by_name(doc, "VllmPrefillWorker")["podTemplate"]["metadata"] = {
        "annotations": {"nvidia.com/vllm-distributed-executor-backend": "slurm"}}
    by_name(doc, "Frontend")["podTemplate"]["spec"]["containers"].append({"name": "sidecar"})
    doc["metadata"]["name"] = "Vllm_Disagg"
    problems = check_manifest(doc)
    assert "spec: spec.restart must be unset on create; set spec.restart.id after creation to request a restart" in problems
    assert ("spec.backendFramework: 'sglang' does not match the worker command (python3 -m dynamo.vllm in "
            "VllmDecodeWorker, VllmPrefillWorker)") in problems
    assert ("spec.components[VllmDecodeWorker].multinode: set nodeCount explicitly (the apiserver defaults an empty "
            "multinode to 2 nodes)") in problems
    assert ("spec.components[VllmPrefillWorker].podTemplate.metadata.annotations: podTemplate backend annotation must "
            "be mp or ray, case-insensitively") in problems
    assert ("spec.components[Frontend].podTemplate.spec.containers[sidecar]: sidecar containers must specify a "
            "non-empty image") in problems
    assert any(p.startswith("metadata.name: 'Vllm_Disagg' must be a DNS-1123 label") for p in problems)
    # nodeCount defaults to 2 on the server: 1 GPU per pod × 2 nodes no longer matches --tensor-parallel-size 1
    assert ("spec.components[VllmDecodeWorker]: a worker instance spans 1 GPUs by its parallel flags, but the component "
            "gives it 1 GPU(s) per pod × 2 node(s) = 2") in problems


def test_kv_router_needs_an_event_publisher_and_planner_keys_are_checked() -> None:
    doc = _example("example-vllm-agg_router.yaml")
    assert check_manifest(doc) == []
    worker = main(by_name(doc, "VllmDecodeWorker"))
    worker["args"] = worker["args"][:2]    # drop --kv-events-config
    [problem] = check_manifest(doc)
    assert problem.startswith("spec.components[Frontend]: the KV router listens for KV events, but no agg or prefill "
                              "worker publishes them")

    doc = _example("example-vllm-agg_router.yaml")   # a worker whose engine the command does not name
    worker = main(by_name(doc, "VllmDecodeWorker"))
    worker["command"] = ["/entrypoint.sh"]
    assert "--kv-events-config" in worker["args"] and check_manifest(doc) == []   # its event flag still counts

    doc = _example("example-vllm-disagg_planner.yaml")
    planner = main(by_name(doc, "Planner"))
    config = json.loads(planner["args"][1])
    planner["args"][1] = json.dumps({**config, "max_gpu_budegt": 16, "fpm_sample_bucket_size": 10})
    assert check_manifest(doc) == [
        "spec.components[Planner]: planner --config has keys PlannerConfig does not know (it drops them silently): "
        "max_gpu_budegt",
        "spec.components[Planner]: planner fpm_sample_bucket_size 10 must be a perfect square"]


# ---------------------------------------------------------------- §7a: agg vLLM, TP2 × 4, KV router


AGG_SELECTION = {"agg_max_num_seqs": 512, "agg_max_num_batched_tokens": 16384, **KV, **NO_PLANNER}


def agg_kv() -> Candidate:
    return candidate({**QWEN, "gpu_budget": 8, "context_length": 32768}, "agg", "vllm", AGG_SELECTION,
                     {"tp": 2, "replicas": 4})


def test_agg_vllm_kv_router_matches_the_worked_example() -> None:
    c = agg_kv()
    doc = manifest(c, rank=1)
    valid(doc, c)
    assert doc["apiVersion"] == "nvidia.com/v1beta1" and doc["kind"] == "DynamoGraphDeployment"
    assert doc["spec"]["backendFramework"] == "vllm"
    assert [(x["name"], x["type"], x["replicas"]) for x in doc["spec"]["components"]] == [
        ("Frontend", "frontend", 1), ("worker", "worker", 4)]
    frontend, worker = doc["spec"]["components"]
    assert env(frontend) == {"DYN_ROUTER_MODE": "kv", "DYN_ROUTER_KV_OVERLAP_SCORE_CREDIT": "0.5",
                             "DYN_ROUTER_PREFILL_LOAD_SCALE": "4.0", "DYN_ROUTER_TEMPERATURE": "0.2"}
    assert "command" not in main(frontend) and "args" not in main(frontend)
    assert "resources" not in main(frontend)
    w = main(worker)
    assert w["image"] == "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.6.1"
    assert w["command"] == ["python3", "-m", "dynamo.vllm"]
    assert w["args"][:4] == ["--model", "Qwen/Qwen3-32B", "--served-model-name", "Qwen/Qwen3-32B"]
    assert engine_args(worker) == [
        "--tensor-parallel-size", "2", "--max-num-seqs", "512", "--max-num-batched-tokens", "16384",
        "--block-size", "64", "--gpu-memory-utilization", "0.9", "--enable-prefix-caching", "--max-model-len", "32768",
        "--kv-events-config", VLLM_EVENTS]
    assert w["resources"] == {"limits": {"nvidia.com/gpu": "2"}}
    assert w["envFrom"] == [{"secretRef": {"name": "hf-token-secret"}}]
    assert "scalingAdapter" not in worker and "multinode" not in worker and "runtimeVersionOverride" not in worker
    assert worker["sharedMemorySize"] == "64Gi"


def test_model_cache_pvc_and_no_hf_secret() -> None:
    c = agg_kv()
    worker = by_name(manifest(c), "worker")
    assert env(worker) == {"HF_HOME": "/model-cache"}
    assert main(worker)["volumeMounts"] == [{"name": "model-cache", "mountPath": "/model-cache"}]
    assert worker["podTemplate"]["spec"]["volumes"] == [
        {"name": "model-cache", "persistentVolumeClaim": {"claimName": "model-cache"}}]
    bare = manifest(c, ManifestOptions(model_cache_pvc=None, hf_token_secret=None))
    valid(bare, c)
    worker = by_name(bare, "worker")
    assert "env" not in main(worker) and "volumeMounts" not in main(worker) and "envFrom" not in main(worker)
    assert "volumes" not in worker["podTemplate"]["spec"]


def test_round_robin_and_prefix_caching_off() -> None:
    c = candidate({**QWEN, "gpu_budget": 8, "agg_enable_prefix_caching": False, "agg_block_size": 32,
                   "agg_gpu_memory_utilization": 0.85}, "agg", "vllm",
                  {"agg_max_num_seqs": 256, "agg_max_num_batched_tokens": 8192, "router_mode": "round_robin",
                   **NO_PLANNER}, {"tp": 1, "replicas": 8})
    doc = manifest(c)
    valid(doc, c)
    assert env(by_name(doc, "Frontend")) == {"DYN_ROUTER_MODE": "round-robin"}
    worker = by_name(doc, "worker")
    assert worker["replicas"] == 8 and "sharedMemorySize" not in worker
    assert engine_args(worker) == ["--tensor-parallel-size", "1", "--max-num-seqs", "256", "--max-num-batched-tokens",
                                   "8192", "--block-size", "32", "--gpu-memory-utilization", "0.85",
                                   "--no-enable-prefix-caching"]


def test_provenance_annotations_name_and_namespace() -> None:
    c = replace(agg_kv(), backend_version="0.24.0")
    doc = manifest(c, ManifestOptions(namespace="inference"), rank=3,
                   annotations={"spica.dev/config-fingerprint": "abc123", "spica.dev/score": 12.5})
    valid(doc, c)
    meta = doc["metadata"]
    assert meta["namespace"] == "inference"
    assert meta["name"].startswith("spica-vllm-agg-") and meta["name"].endswith("-r3") and len(meta["name"]) <= 40
    assert meta["labels"] == {"app.kubernetes.io/managed-by": "spica"}
    a = meta["annotations"]
    assert a["spica.dev/config-fingerprint"] == "abc123" and a["spica.dev/score"] == "12.5"
    assert a["spica.dev/rank"] == "3"
    assert a["spica.dev/perf-db-version"] == "vllm 0.24.0"
    assert a["spica.dev/image-engine"] == "vllm 0.31.0" and a["spica.dev/dynamo-version"] == "1.6.1"
    assert a["spica.dev/image"] == "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.6.1"
    assert a["spica.dev/parallel"] == "4×TP2" and a["spica.dev/used-gpus"] == "8"
    assert json.loads(a["spica.dev/candidate"]) == json.loads(json.dumps(c.to_sample()))
    assert all(isinstance(v, str) for v in a.values())
    assert manifest(c, rank=3)["metadata"]["name"] == meta["name"]          # stable for the same candidate
    assert manifest(c, ManifestOptions(name="qwen-agg"))["metadata"]["name"] == "qwen-agg"


def test_custom_non_semver_image_gets_the_runtime_version_override_everywhere() -> None:
    c = agg_kv()
    doc = manifest(c, ManifestOptions(image="registry.local/team/vllm-runtime:my-tag"))
    valid(doc, c)
    assert {x["name"]: x.get("runtimeVersionOverride") for x in doc["spec"]["components"]} == {
        "Frontend": "1.6.1", "worker": "1.6.1"}
    assert "spica.dev/image-engine" not in doc["metadata"]["annotations"]


def test_manifest_yaml_quotes_strings_that_yaml_would_read_otherwise() -> None:
    c = agg_kv()
    doc = manifest(c, annotations={"team/flag": "y", "team/switch": "off"})
    text = manifest_yaml(doc)
    assert "team/flag: 'y'" in text and "team/switch: 'off'" in text
    assert "nvidia.com/gpu: '2'" in text and "- '16384'" in text and "value: '0.5'" in text
    assert f"- '{VLLM_EVENTS}'" in text    # one JSON blob, one line
    assert yaml.safe_load(text) == doc
    assert text.index("apiVersion") < text.index("kind") < text.index("metadata") < text.index("spec")


# ---------------------------------------------------------------- §7b: disagg SGLang DeepSeek-V3, TEP8 + 2 × DEP8


DISAGG_SELECTION = {"prefill_max_num_seqs": 8, "prefill_max_num_batched_tokens": 16384, "decode_max_num_seqs": 256,
                    "decode_max_num_batched_tokens": 8192}
TEP8_DEP8 = {"prefill": {"tp": 8, "moe_ep": 8, "replicas": 1},
             "decode": {"tp": 1, "attention_dp": 8, "moe_ep": 8, "replicas": 2}}
SGLANG_TAIL = ["--trust-remote-code", "--skip-tokenizer-init"]


def sglang_disagg(router: dict[str, Any] | None = None) -> Candidate:
    return candidate({**DSV3, "gpu_budget": 24, "context_length": 8192}, "disagg", "sglang",
                     {**DISAGG_SELECTION, **(router or {"router_mode": "round_robin"}), **NO_PLANNER}, TEP8_DEP8)


def _transfer(role: str) -> list[str]:
    return ["--disaggregation-mode", role, "--disaggregation-transfer-backend", "nixl",
            "--disaggregation-bootstrap-port", "12345", "--host", "0.0.0.0"]


def test_disagg_sglang_moe_matches_the_worked_example() -> None:
    c = sglang_disagg()
    assert c.parallel.used_gpus == 24
    doc = manifest(c)
    valid(doc, c)
    assert doc["spec"]["backendFramework"] == "sglang"
    assert [(x["name"], x["type"], x["replicas"]) for x in doc["spec"]["components"]] == [
        ("Frontend", "frontend", 1), ("prefill", "prefill", 1), ("decode", "decode", 2)]
    assert env(by_name(doc, "Frontend")) == {"DYN_ROUTER_MODE": "round-robin"}
    prefill, decode = by_name(doc, "prefill"), by_name(doc, "decode")
    for comp in (prefill, decode):
        assert main(comp)["command"] == ["python3", "-m", "dynamo.sglang"]
        assert main(comp)["args"][:4] == ["--model-path", "deepseek-ai/DeepSeek-V3", "--served-model-name",
                                          "deepseek-ai/DeepSeek-V3"]
        assert main(comp)["resources"]["limits"] == {"nvidia.com/gpu": "8"}
        assert "multinode" not in comp and comp["sharedMemorySize"] == "64Gi"
    assert engine_args(prefill) == [
        "--tp-size", "8", "--ep-size", "8", "--max-running-requests", "8", "--chunked-prefill-size", "16384",
        "--max-prefill-tokens", "16384", "--page-size", "64", "--mem-fraction-static", "0.9", "--context-length", "8192",
        *SGLANG_TAIL, *_transfer("prefill")]
    # decode limits are per attention-DP rank in Spica; SGLang divides the worker-level values by dp=8
    assert engine_args(decode) == [
        "--tp-size", "8", "--dp-size", "8", "--enable-dp-attention", "--ep-size", "8",
        "--max-running-requests", "2048", "--chunked-prefill-size", "65536", "--max-prefill-tokens", "8192",
        "--page-size", "64", "--mem-fraction-static", "0.9", "--disable-radix-cache", "--context-length", "8192",
        *SGLANG_TAIL, *_transfer("decode")]


def test_disagg_sglang_kv_router_events_on_prefill_only_and_mtp() -> None:
    c = sglang_disagg(KV)
    c = replace(c, context=replace(c.context, aic_nextn=1))
    doc = manifest(c)
    valid(doc, c)
    assert env(by_name(doc, "Frontend"))["DYN_ROUTER_MODE"] == "kv"
    spec_decoding = ["--speculative-algorithm", "NEXTN", "--speculative-num-steps", "1", "--speculative-eagle-topk",
                     "1", "--speculative-num-draft-tokens", "2"]
    prefill, decode = engine_args(by_name(doc, "prefill")), engine_args(by_name(doc, "decode"))
    assert prefill[-2:] == ["--kv-events-config", '{"publisher":"zmq","topic":"kv-events","endpoint":"tcp://*:5557"}']
    assert "--kv-events-config" not in decode
    for args in (prefill, decode):
        start = args.index("--speculative-algorithm")
        assert args[start:start + 8] == spec_decoding


def test_sglang_workers_poll_at_the_configured_interval_and_other_backends_refuse_it() -> None:
    c = sglang_disagg()
    c = replace(c, context=replace(c.context, scheduler_recv_interval=30))
    doc = manifest(c)
    valid(doc, c)
    for name in ("prefill", "decode"):
        args = engine_args(by_name(doc, name))
        assert args[args.index("--scheduler-recv-interval") + 1] == "30"
    assert "--scheduler-recv-interval" not in engine_args(by_name(manifest(sglang_disagg()), "decode"))  # default 1
    with pytest.raises(Exception, match="scheduler_recv_interval.*SGLang setting"):
        config({**QWEN, "scheduler_recv_interval": 10}, "agg", "vllm")
    with pytest.raises(Exception, match="scheduler_recv_interval"):
        config({**QWEN, "scheduler_recv_interval": 0}, "agg", "sglang")


def test_multinode_on_a_four_gpu_node() -> None:
    c = candidate({**DSV3, "hardware_sku": "gb200", "gpu_budget": 24, "context_length": 8192}, "disagg", "sglang",
                  {**DISAGG_SELECTION, "router_mode": "round_robin", **NO_PLANNER}, TEP8_DEP8)
    doc = manifest(c)
    valid(doc, c)
    for name in ("prefill", "decode"):
        comp = by_name(doc, name)
        assert comp["multinode"] == {"nodeCount": 2}
        assert main(comp)["resources"]["limits"] == {"nvidia.com/gpu": "4"}
        assert engine_args(comp)[:2] == ["--tp-size", "8"]    # global sizes stay in the args


# ---------------------------------------------------------------- §7c: the Planner


PLANNER_SELECTION = {"planner_fpm_sampling": "default", "planner_load_sensitivity": "default"}


def agg_planner() -> Candidate:
    return candidate({**QWEN, "gpu_budget": 16, "context_length": 32768, "min_endpoint": 1}, "agg", "vllm",
                     {"agg_max_num_seqs": 512, "agg_max_num_batched_tokens": 16384, "router_mode": "round_robin",
                      "planner_scaling_policy": "load_180_10", **PLANNER_SELECTION}, {"tp": 2, "replicas": 2})


def planner_json(doc: dict[str, Any]) -> dict[str, Any]:
    args = main(by_name(doc, "Planner"))["args"]
    assert args[0] == "--config" and len(args) == 2
    return json.loads(args[1])


def test_agg_planner_matches_the_worked_example() -> None:
    c = agg_planner()
    doc = manifest(c, ManifestOptions(optimization_target="throughput"))
    valid(doc, c)
    assert [(x["name"], x["type"], x["replicas"]) for x in doc["spec"]["components"]] == [
        ("Frontend", "frontend", 1), ("Planner", "planner", 1), ("worker", "worker", 2)]
    planner = by_name(doc, "Planner")
    assert main(planner)["image"] == "nvcr.io/nvidia/ai-dynamo/dynamo-planner:1.6.1"
    assert main(planner)["command"] == ["python3", "-m", "dynamo.planner"]
    assert "resources" not in main(planner)
    assert planner_json(doc) == {
        "environment": "kubernetes", "backend": "vllm", "mode": "agg", "optimization_target": "throughput",
        "pre_deployment_sweeping_mode": "none", "enable_throughput_scaling": False, "enable_load_scaling": True,
        "throughput_adjustment_interval_seconds": 180, "load_adjustment_interval_seconds": 10,
        "max_num_fpm_samples": 64, "fpm_sample_bucket_size": 16, "load_scaling_down_sensitivity": 80,
        "load_min_observations": 5, "max_gpu_budget": 16, "min_endpoint": 1, "decode_engine_num_gpu": 2,
        "model_name": "Qwen/Qwen3-32B", "report_interval_hours": None, "live_dashboard_port": 0}
    worker = by_name(doc, "worker")
    assert worker["scalingAdapter"] == {}
    assert engine_args(worker) == ["--tensor-parallel-size", "2", "--max-num-seqs", "512", "--max-num-batched-tokens",
                                   "16384", "--block-size", "64", "--gpu-memory-utilization", "0.9",
                                   "--enable-prefix-caching", "--max-model-len", "32768"]
    assert doc["metadata"]["annotations"]["spica.dev/planner-target"] == "throughput"


def test_a_scaling_candidate_needs_the_goals_planner_target() -> None:
    with pytest.raises(ManifestError, match=r"planner_scaling_policy: 'load_180_10' scales, and the Planner's "
                                            r"optimization_target comes from the sweep goal"):
        manifest(agg_planner())


def test_disagg_sla_hybrid_planner_with_its_predictor() -> None:
    goal = config(QWEN, "disagg", "vllm", {"target": "goodput_per_gpu", "sla": {"ttft_ms": 2000, "itl_ms": 30}}).goal
    c = candidate({**QWEN, "gpu_budget": 16, "min_gpu_budget": 4}, "disagg", "vllm",
                  {"prefill_max_num_seqs": 4, "prefill_max_num_batched_tokens": 16384, "decode_max_num_seqs": 512,
                   "decode_max_num_batched_tokens": 8192, "router_mode": "round_robin",
                   "planner_scaling_policy": "hybrid_180_5", "planner_fpm_sampling": "large",
                   "planner_load_sensitivity": "aggressive"},
                  {"prefill": {"tp": 1, "replicas": 2}, "decode": {"tp": 2, "replicas": 3}},
                  winners={180: "kalman_default_raw"})
    doc = manifest(c, ManifestOptions.for_goal(goal))
    valid(doc, c)
    assert planner_json(doc) == {
        "environment": "kubernetes", "backend": "vllm", "mode": "disagg", "optimization_target": "sla",
        "pre_deployment_sweeping_mode": "none", "enable_throughput_scaling": True, "enable_load_scaling": True,
        "throughput_adjustment_interval_seconds": 180, "load_adjustment_interval_seconds": 5,
        "max_num_fpm_samples": 128, "fpm_sample_bucket_size": 16, "load_scaling_down_sensitivity": 70,
        "load_min_observations": 3, "load_predictor": "kalman", "load_predictor_log1p": False,
        "kalman_q_level": 1.0, "kalman_q_trend": 0.1, "kalman_r": 10.0, "kalman_min_points": 5,
        "max_gpu_budget": 16, "min_gpu_budget": 4, "prefill_engine_num_gpu": 1, "decode_engine_num_gpu": 2,
        "model_name": "Qwen/Qwen3-32B", "ttft_ms": 2000.0, "itl_ms": 30.0, "report_interval_hours": None,
        "live_dashboard_port": 0}
    assert by_name(doc, "prefill")["scalingAdapter"] == {} and by_name(doc, "decode")["scalingAdapter"] == {}
    assert [by_name(doc, r)["replicas"] for r in ("prefill", "decode")] == [2, 3]
    assert engine_args(by_name(doc, "prefill"))[-4:] == ["--disaggregation-mode", "prefill", "--kv-transfer-config",
                                                         NIXL]
    assert engine_args(by_name(doc, "decode"))[-4:] == ["--disaggregation-mode", "decode", "--kv-transfer-config",
                                                        NIXL]
    assert "--no-enable-prefix-caching" in engine_args(by_name(doc, "decode"))


def test_planner_image_follows_a_custom_runtime_image() -> None:
    c = agg_planner()
    doc = manifest(c, ManifestOptions(image="registry.local/vllm-runtime:2025-q3", optimization_target="latency"))
    valid(doc, c)
    planner = by_name(doc, "Planner")
    assert main(planner)["image"] == "registry.local/dynamo-planner:2025-q3"
    assert planner["runtimeVersionOverride"] == "1.6.1"
    assert planner_json(doc)["optimization_target"] == "latency"


# ---------------------------------------------------------------- host offload (KVBM)


OFFLOAD = {"num_g2_blocks": 20000, "kv_bytes_per_token": 262144, "offload_batch_size": 32,
           "bandwidth_g1_to_g2_gbps": 50.0}
KV_WITH_HOST = {"router_mode": "kv_router", "overlap_score_credit": 1.0, "prefill_load_scale": 1.0,
                "router_temperature": 0.0, "host_cache_hit_weight": 0.75, "disk_cache_hit_weight": 0.25}
KVBM = '{"kv_connector":"DynamoConnector","kv_connector_module_path":"kvbm.vllm_integration.connector","kv_role":"kv_both"}'


def test_agg_vllm_host_offload() -> None:
    c = candidate({**QWEN, "gpu_budget": 8, **OFFLOAD}, "agg", "vllm",
                  {"agg_max_num_seqs": 256, "agg_max_num_batched_tokens": 8192, **KV_WITH_HOST, **NO_PLANNER},
                  {"tp": 2, "replicas": 4})
    assert c.offload.enabled
    doc = manifest(c)
    valid(doc, c)
    assert env(by_name(doc, "Frontend")) == {
        "DYN_ROUTER_MODE": "kv", "DYN_ROUTER_KV_OVERLAP_SCORE_CREDIT": "1.0", "DYN_ROUTER_PREFILL_LOAD_SCALE": "1.0",
        "DYN_ROUTER_TEMPERATURE": "0.0", "DYN_ROUTER_HOST_CACHE_HIT_WEIGHT": "0.75",
        "DYN_ROUTER_DISK_CACHE_HIT_WEIGHT": "0.25"}
    worker = by_name(doc, "worker")
    assert env(worker) == {"DYN_KVBM_CPU_CACHE_OVERRIDE_NUM_BLOCKS": "20000", "DYN_KVBM_MAX_TRANSFER_BATCH_SIZE": "32",
                           "HF_HOME": "/model-cache"}
    args = engine_args(worker)
    assert args[args.index("--kv-transfer-config") + 1] == KVBM
    assert args[-2:] == ["--kv-events-config", VLLM_EVENTS]
    # host tier: 20000 blocks × 64 tokens × 262144 B = 312.5 GiB → 313 + 64 GiB headroom; limit × 1.25
    assert main(worker)["resources"] == {"limits": {"nvidia.com/gpu": "2", "memory": "472Gi"},
                                         "requests": {"nvidia.com/gpu": "2", "memory": "377Gi"}}
    a = doc["metadata"]["annotations"]
    assert a["spica.dev/not-rendered"] == "kv_bytes_per_token,bandwidth_g1_to_g2_gbps"
    assert "offload_batch_size" in a["spica.dev/approximations"]


def test_disagg_vllm_host_offload_on_prefill_only() -> None:
    c = candidate({**QWEN, "gpu_budget": 8, **OFFLOAD}, "disagg", "vllm",
                  {**DISAGG_SELECTION, **KV_WITH_HOST, **NO_PLANNER},
                  {"prefill": {"tp": 2, "replicas": 1}, "decode": {"tp": 2, "replicas": 3}})
    doc = manifest(c)
    valid(doc, c)
    prefill, decode = by_name(doc, "prefill"), by_name(doc, "decode")
    pargs = engine_args(prefill)
    pd = json.loads(pargs[pargs.index("--kv-transfer-config") + 1])
    assert pd["kv_connector"] == "PdConnector" and pd["kv_connector_module_path"] == "kvbm.vllm_integration.connector"
    assert [x["kv_connector"] for x in pd["kv_connector_extra_config"]["connectors"]] == ["DynamoConnector",
                                                                                           "NixlConnector"]
    assert "--disable-hybrid-kv-cache-manager" in pargs and "--kv-events-config" in pargs
    assert env(prefill)["DYN_KVBM_CPU_CACHE_OVERRIDE_NUM_BLOCKS"] == "20000"
    assert "DYN_KVBM_CPU_CACHE_OVERRIDE_NUM_BLOCKS" not in env(decode)
    assert "memory" not in main(decode)["resources"]["limits"]
    dargs = engine_args(decode)
    assert dargs[dargs.index("--kv-transfer-config") + 1] == NIXL and "--kv-events-config" not in dargs


# ---------------------------------------------------------------- TRT-LLM


def test_trtllm_agg_engine_overrides() -> None:
    c = candidate({**QWEN, "gpu_budget": 8, "context_length": 16384}, "agg", "trtllm",
                  {"agg_max_num_seqs": 256, "agg_max_num_batched_tokens": 8192, **KV, **NO_PLANNER},
                  {"tp": 4, "replicas": 2})
    doc = manifest(c)
    valid(doc, c)
    args = engine_args(by_name(doc, "worker"))
    assert args[:-1] == ["--tensor-parallel-size", "4", "--max-batch-size", "256", "--max-num-tokens", "8192",
                         "--kv-block-size", "64", "--free-gpu-memory-fraction", "0.9", "--max-seq-len", "16384",
                         "--publish-events-and-metrics", "--override-engine-args"]
    assert json.loads(args[-1]) == {"enable_chunked_prefill": True, "disable_overlap_scheduler": False,
                                    "kv_cache_config": {"free_gpu_memory_fraction": 0.9, "tokens_per_block": 64,
                                                        "enable_block_reuse": True}}


# ---------------------------------------------------------------- refusals


def test_refusal_lists_every_field_that_cannot_be_expressed() -> None:
    c = candidate({**QWEN, "gpu_budget": 8, **OFFLOAD}, "agg", "sglang",
                  {"agg_max_num_seqs": 256, "agg_max_num_batched_tokens": 8192, "router_mode": "round_robin",
                   **NO_PLANNER}, {"tp": 2, "pp": 2})
    with pytest.raises(ManifestError) as err:
        manifest(c)
    text = str(err.value)
    assert "2 field(s)" in text
    assert "\n  - num_g2_blocks: SGLang has no KVBM host offload" in text
    assert "\n  - pp: pipeline parallelism (2) was not replayed" in text


def _emitted(c: Candidate, rank: int) -> CandidateRecord:
    return CandidateRecord(rank=rank, score=100.0 / rank, used_gpus=c.parallel.used_gpus, candidate=c,
                           metrics={}, objectives=None, round=0, trial=rank)


def test_emitted_manifests_deploy_exactly_their_candidates(tmp_path: Path) -> None:
    """What ``write_manifests`` puts on disk, read back as a user's kubectl would: one DGD per candidate, running
    its backend with its replicas and parallel sizes, or a refusal naming what cannot be expressed."""
    trtllm = candidate({**QWEN, "gpu_budget": 8, "context_length": 16384}, "agg", "trtllm",
                       {"agg_max_num_seqs": 256, "agg_max_num_batched_tokens": 8192, **KV, **NO_PLANNER},
                       {"tp": 4, "replicas": 2})
    vllm_disagg = candidate({**QWEN, "gpu_budget": 8}, "disagg", "vllm",
                            {**DISAGG_SELECTION, "router_mode": "round_robin", **NO_PLANNER},
                            {"prefill": {"tp": 1, "replicas": 2}, "decode": {"tp": 2, "replicas": 3}})
    refused = candidate({**QWEN, "gpu_budget": 8, **OFFLOAD}, "agg", "sglang",
                        {"agg_max_num_seqs": 256, "agg_max_num_batched_tokens": 8192, "router_mode": "round_robin",
                         **NO_PLANNER}, {"tp": 2, "pp": 2})
    records = [_emitted(c, rank) for rank, c in enumerate([agg_kv(), sglang_disagg(), trtllm, vllm_disagg, refused],
                                                          start=1)]
    written, why = write_manifests(tmp_path, records, EmitOptions(all=True), None)
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"rank-{r}.yaml" for r in (1, 2, 3, 4)] + [
        "rank-5.refused.txt"]
    assert written == {r: tmp_path / f"rank-{r}.yaml" for r in (1, 2, 3, 4)}
    assert "\n  - num_g2_blocks: SGLang has no KVBM host offload" in (tmp_path / "rank-5.refused.txt").read_text()
    assert why[5] == (tmp_path / "rank-5.refused.txt").read_text().strip()

    for record in records[:4]:
        c = record.candidate
        doc = yaml.safe_load(written[record.rank].read_text())
        assert (doc["apiVersion"], doc["kind"]) == ("nvidia.com/v1beta1", "DynamoGraphDeployment")
        assert doc["spec"]["backendFramework"] == c.backend
        assert doc["metadata"]["annotations"]["spica.dev/rank"] == str(record.rank)
        workers = [x for x in doc["spec"]["components"] if x["type"] in WORKER_TYPES]
        assert sorted(x["type"] for x in workers) == sorted({"agg": "worker"}.get(r, r) for r in c.parallel.roles)
        gpus = 0
        for role, rc in c.parallel.roles.items():
            [comp] = [x for x in workers if x["type"] == {"agg": "worker"}.get(role, role)]
            ctr = main(comp)
            assert ctr["command"] == ["python3", "-m", f"dynamo.{c.backend}"] and backend_of(ctr) == c.backend
            assert ctr["args"][1] == c.context.model_name
            assert comp["replicas"] == rc.replicas, (record.rank, role)
            per_pod, nodes = int(ctr["resources"]["limits"]["nvidia.com/gpu"]), comp.get("multinode",
                                                                                         {}).get("nodeCount", 1)
            assert per_pod * nodes == instance_gpus(c.backend, ctr["args"]) == rc.shape.gpus, (record.rank, role)
            tp_flag = "--tp-size" if c.backend == "sglang" else "--tensor-parallel-size"
            tp = rc.shape.gpus if c.backend == "sglang" else rc.shape.tp   # SGLang's TP size spans attention DP
            assert ctr["args"][ctr["args"].index(tp_flag) + 1] == str(tp), (record.rank, role)
            gpus += comp["replicas"] * per_pod * nodes
        assert gpus == record.used_gpus == c.parallel.used_gpus
        assert check_manifest(doc, used_gpus=record.used_gpus) == []


@pytest.mark.parametrize("change, field", [
    (lambda c: replace(c, router=Router("least_loaded")), "router_mode"),
    (lambda c: replace(c, engines={"agg": replace(c.engines["agg"], enable_prefix_caching=False)}),
     "agg_enable_prefix_caching"),
    (lambda c: replace(c, parallel=ParallelConfig.from_dict("agg", {"tp": 4, "moe_tp": 2, "moe_ep": 2})), "moe_tp"),
    (lambda c: replace(c, parallel=ParallelConfig.from_dict("agg", {"tp": 2, "replicas": 5})), "used_gpus"),
], ids=["router-mode", "kv-router-without-prefix-cache", "vllm-mixed-moe", "over-budget"])
def test_refused_candidate_names_the_field(change: Any, field: str) -> None:
    with pytest.raises(ManifestError, match=rf"\n  - {field}: "):
        manifest(change(agg_kv()))


def test_disagg_block_sizes_must_match() -> None:
    c = candidate({**QWEN, "gpu_budget": 8, "prefill_block_size": 32}, "disagg", "vllm",
                  {**DISAGG_SELECTION, "router_mode": "round_robin", **NO_PLANNER},
                  {"prefill": {"tp": 2}, "decode": {"tp": 2}})
    with pytest.raises(ManifestError, match=r"prefill_block_size: 32 differs from decode_block_size 64"):
        manifest(c)


def test_bad_options_are_refused() -> None:
    c = agg_kv()
    with pytest.raises(ManifestError, match=r"ManifestOptions.image: 'nvcr.io/nvidia/ai-dynamo/sglang-runtime:1.6.1' "
                                            r"is the sglang runtime, but the candidate runs vllm"):
        manifest(c, ManifestOptions(image="nvcr.io/nvidia/ai-dynamo/sglang-runtime:1.6.1"))
    with pytest.raises(ManifestError, match=r"ManifestOptions.name: 'Qwen_Agg' must be a DNS-1123 label"):
        manifest(c, ManifestOptions(name="Qwen_Agg"))
    with pytest.raises(ManifestError, match=r"annotations: 'spica.dev/rank' is set from the candidate \('1'\)"):
        manifest(c, rank=1, annotations={"spica.dev/rank": "7"})
    with pytest.raises(ManifestError, match=r"router_mode: the image runs Dynamo 1.7.0: from 1.7 the KV router weights"):
        manifest(c, ManifestOptions(image="nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.7.0"))
    assert by_name(manifest(agg_planner(), ManifestOptions(dynamo_version="1.7.0", optimization_target="throughput")),
                   "worker")["podTemplate"]["spec"]["containers"][0]["image"].endswith("vllm-runtime:1.7.0")


def test_only_v1beta1_is_checked() -> None:
    doc = _example()
    doc["apiVersion"] = "nvidia.com/v1alpha1"
    [problem] = check_manifest(doc)
    assert problem.startswith("apiVersion: must be 'nvidia.com/v1beta1' (got 'nvidia.com/v1alpha1')")


def test_the_parallel_flags_a_manifest_writes_are_the_ones_the_checker_reads() -> None:
    """One table of spellings per engine: a written flag that the GPU count check could not read would hide a
    wrong size."""
    from spica_core.engines import ENGINES

    assert set(ENGINES) == set(BACKENDS)
    for backend, module in ENGINES.items():
        sizes = module.INSTANCE_SIZES
        args = [a for size in sizes for a in (module.PARALLEL_FLAGS[size][0], "2")]
        assert instance_gpus(backend, args) == 2 ** len(sizes), backend
        for size, spellings in module.PARALLEL_FLAGS.items():
            if size in sizes:
                for spelling in spellings:
                    assert instance_gpus(backend, [spelling, "3"]) == 3, (backend, spelling)


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_each_engine_reads_back_what_it_writes(backend: str) -> None:
    """Each engine module writes a worker's flags and parses them back (block size, KV events, GPUs), and the
    replay's engine section holds the same batching budgets the flags set."""
    from spica_core.engines import Launch, engine
    from spica_core.evaluate.engine_args import role_payload

    c = candidate({**QWEN, "gpu_budget": 8, "context_length": 16384, "agg_block_size": 32}, "agg", backend,
                  {"agg_max_num_seqs": 256, "agg_max_num_batched_tokens": 8192, **KV, **NO_PLANNER},
                  {"tp": 2, "replicas": 1})
    module, rc = engine(backend), c.parallel.roles["agg"]
    notes: list[str] = []
    problems: list[tuple[str, str]] = []

    class Collected:
        def add(self, field_name: str, why: str) -> None:
            problems.append((field_name, why))

    args = module.args(Launch(c, "agg", rc.shape, c.engines["agg"], False, True, notes, Collected()))
    assert problems == [] and module.problems(args) == []
    assert module.block_size(args) == 32 and module.publishes_events(args)
    assert instance_gpus(backend, args) == 2
    replay = role_payload(c, "agg", num_gpu_blocks=100, profile="")["engine"]
    assert {k: v for k, v in replay.items() if k == backend} == module.replay_settings(c.engines["agg"])
    if backend == "sglang":
        assert args[args.index("--chunked-prefill-size") + 1] == str(replay["sglang"]["chunked_prefill_size"])

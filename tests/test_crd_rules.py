"""The CRD's create-time CEL rules and set-typed lists, checked offline by ``check_manifest`` (issue 22).

Each rule gets one manifest: a valid generated manifest mutated to break that rule (and, where the rule
allows it, nothing else). The rules are the CRD's own rule strings, so a new rule is checked as soon as the
CRD ships it; the count below makes sure it also gets a violation test.
"""
from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from spica_core.config.model import SmartSearchConfig
from spica_core.emit import crd_schema
from spica_core.emit.crd import check_manifest
from spica_core.emit.crd_cel import cel_problems, rules_of
from spica_core.emit.crd_webhook import EXECUTOR_ANNOTATION
from spica_core.emit.manifests import manifest
from spica_core.deployment import Candidate
from spica_core.space.parallel import ParallelConfig

DOCS = Path(__file__).resolve().parent.parent / "docs" / "emit.md"
Doc = dict[str, Any]


def _generated() -> tuple[Doc, int]:
    """A manifest as ``spica emit`` writes it: agg vLLM, TP2 × 4 replicas, KV router, no planner."""
    space = {"model_name": "Qwen/Qwen3-32B", "hardware_sku": "h200_sxm", "gpu_budget": 8, "context_length": 32768,
             "deployment_mode": ["agg"], "backend": ["vllm"]}
    config = SmartSearchConfig.from_dict({"search_space": space, "workload": {"trace_path": "t.jsonl"}})
    selection = {"deployment_mode": "agg", "backend": "vllm", "agg_max_num_seqs": 512,
                 "agg_max_num_batched_tokens": 16384, "router_mode": "kv_router", "overlap_score_credit": 0.5,
                 "prefill_load_scale": 4.0, "router_temperature": 0.2, "planner_scaling_policy": "disabled"}
    parallel = ParallelConfig.from_dict("agg", {"tp": 2, "replicas": 4})
    candidate = Candidate.unroll(config.search_space, selection, parallel)
    return manifest(candidate, rank=1), candidate.parallel.used_gpus


GENERATED, USED_GPUS = _generated()


def _base() -> Doc:
    return copy.deepcopy(GENERATED)


def _component(doc: Doc, name: str) -> Doc:
    [comp] = [c for c in doc["spec"]["components"] if c["name"] == name]
    return comp


def _worker(doc: Doc) -> Doc:
    return _component(doc, "worker")


def _add_epp(doc: Doc, name: str = "Epp", epp_config: Any = None) -> Doc:
    """An EPP component with its own main container (copied from the frontend) and a ConfigMap config."""
    frontend = _component(doc, "Frontend")
    comp = {"name": name, "type": "epp", "replicas": 1,
            "podTemplate": {"spec": {"containers": [copy.deepcopy(frontend["podTemplate"]["spec"]["containers"][0])]}},
            "eppConfig": {"configMapRef": {"name": "epp", "key": "config.yaml"}} if epp_config is None else epp_config}
    doc["spec"]["components"].append(comp)
    return comp


def _experimental(doc: Doc, **fields: Any) -> None:
    _worker(doc)["experimental"] = fields


def _kv_policy(doc: Doc, **fields: Any) -> None:
    doc["spec"]["experimental"] = {"kvTransferPolicy": {"domain": "rack", **fields}}


# ---------------------------------------------------------------- one violation per rule


def _restart(doc: Doc) -> None:
    doc["spec"]["restart"] = {"id": "now"}


def _two_epps(doc: Doc) -> None:
    _add_epp(doc, "EppA")
    _add_epp(doc, "EppB")


def _names_differ_in_case(doc: Doc) -> None:
    _component(doc, "Frontend")["name"] = "WORKER"


def _epp_config_off_epp(doc: Doc) -> None:
    _worker(doc)["eppConfig"] = {"configMapRef": {"key": "config.yaml"}}


def _min_available_over_replicas(doc: Doc) -> None:
    _worker(doc)["minAvailable"] = 5   # replicas is 4


def _epp_config_without_source(doc: Doc) -> None:
    _add_epp(doc, epp_config={})


def _checkpoint_job_and_ref(doc: Doc) -> None:
    _experimental(doc, checkpoint={"enabled": True, "checkpointRef": "qwen-ckpt", "job": {}})


def _gms_containers_inter_pod(doc: Doc) -> None:
    _experimental(doc, gpuMemoryService={"mode": "InterPod", "extraClientContainers": ["helper"]})


def _gms_pods_intra_pod(doc: Doc) -> None:
    # mode is left to its default, IntraPod; extra pods also break the "not implemented" rule (it is implied)
    _experimental(doc, gpuMemoryService={"extraClientPods": [{"name": "client", "podTemplate": {}}]})


def _gms_pods_inter_pod(doc: Doc) -> None:
    pods = [{"name": "client", "podTemplate": {}}]
    _experimental(doc, gpuMemoryService={"mode": "InterPod", "extraClientPods": pods})


def _executor_annotation(doc: Doc) -> None:
    _worker(doc)["podTemplate"]["metadata"] = {"annotations": {EXECUTOR_ANNOTATION: "slurm"}}


def _sidecar_without_image(doc: Doc) -> None:
    _worker(doc)["podTemplate"]["spec"]["containers"].append({"name": "sidecar"})


def _init_container_without_image(doc: Doc) -> None:
    _worker(doc)["podTemplate"]["spec"]["initContainers"] = [{"name": "warmup"}]


def _kv_policy_without_topology(doc: Doc) -> None:
    _kv_policy(doc)


def _kv_policy_preferred_without_weight(doc: Doc) -> None:
    _kv_policy(doc, labelKey="topology.kubernetes.io/zone", enforcement="preferred")


def _kv_policy_weight_without_preferred(doc: Doc) -> None:
    _kv_policy(doc, labelKey="topology.kubernetes.io/zone", preferredWeight=0.5)   # enforcement defaults to required


def _kv_policy_long_label_prefix(doc: Doc) -> None:
    prefix = ".".join(["a" * 63] * 4)   # 255 characters: passes the schema's pattern and maxLength, not the CEL rule
    _kv_policy(doc, labelKey=f"{prefix}/zone")


W = "spec.components[worker]"
KV = "spec.experimental.kvTransferPolicy"

# rule message -> (mutation, the problems it must give: (the path of the node the rule sits on, message) each)
VIOLATIONS: dict[str, tuple[Callable[[Doc], None], list[tuple[str, str]]]] = {
    "spec.restart must be unset on create; set spec.restart.id after creation to request a restart":
        (_restart, [("spec", "spec.restart must be unset on create")]),
    "at most one component may have type epp":
        (_two_epps, [("spec.components", "at most one component may have type epp")]),
    "component names must be unique case-insensitively":
        (_names_differ_in_case, [("spec.components", "component names must be unique case-insensitively")]),
    "eppConfig may only be set when type is epp":
        (_epp_config_off_epp, [(W, "eppConfig may only be set when type is epp")]),
    "minAvailable must be less than or equal to replicas unless replicas is 0":
        (_min_available_over_replicas, [(W, "minAvailable must be less than or equal to replicas")]),
    "exactly one of configMapRef or config must be specified":
        (_epp_config_without_source,
         [("spec.components[Epp].eppConfig", "exactly one of configMapRef or config must be specified")]),
    "checkpoint.job cannot be set when checkpointRef is specified":
        (_checkpoint_job_and_ref,
         [(f"{W}.experimental.checkpoint", "checkpoint.job cannot be set when checkpointRef is specified")]),
    "extraClientContainers is only supported with mode=IntraPod":
        (_gms_containers_inter_pod, [(f"{W}.experimental.gpuMemoryService",
                                      "extraClientContainers is only supported with mode=IntraPod")]),
    "extraClientPods is only supported with mode=InterPod":
        (_gms_pods_intra_pod, [(f"{W}.experimental.gpuMemoryService",
                                "extraClientPods is only supported with mode=InterPod"),
                               (f"{W}.experimental.gpuMemoryService", "not implemented yet")]),
    "extraClientPods is reserved for inter-pod GMS and is not implemented yet":
        (_gms_pods_inter_pod, [(f"{W}.experimental.gpuMemoryService",
                                "extraClientPods is reserved for inter-pod GMS and is not implemented yet")]),
    "podTemplate backend annotation must be mp or ray, case-insensitively":
        (_executor_annotation, [(f"{W}.podTemplate.metadata.annotations", "must be mp or ray")]),
    "sidecar containers must specify a non-empty image":
        (_sidecar_without_image,
         [(f"{W}.podTemplate.spec.containers[sidecar]", "sidecar containers must specify a non-empty image")]),
    "init containers must specify a non-empty image":
        (_init_container_without_image, [(f"{W}.podTemplate.spec.initContainers[warmup]",
                                          "init containers must specify a non-empty image")]),
    "exactly one of labelKey or clusterTopologyName is required":
        (_kv_policy_without_topology, [(KV, "exactly one of labelKey or clusterTopologyName is required")]),
    "preferredWeight is required when enforcement is preferred":
        (_kv_policy_preferred_without_weight, [(KV, "preferredWeight is required when enforcement is preferred")]),
    "preferredWeight may only be set when enforcement is preferred":
        (_kv_policy_weight_without_preferred,   # enforcement defaults to required: the CRD's default is applied
         [(KV, "preferredWeight may only be set when enforcement is preferred")]),
    "labelKey prefix must be 253 characters or less":
        (_kv_policy_long_label_prefix, [(f"{KV}.labelKey", "labelKey prefix must be 253 characters or less")]),
}


def test_the_generated_manifest_has_no_problems() -> None:
    assert check_manifest(_base(), used_gpus=USED_GPUS) == []


@pytest.mark.parametrize("message", list(VIOLATIONS), ids=lambda m: m[:48])
def test_each_create_time_rule_rejects_its_violation(message: str) -> None:
    mutate, expected = VIOLATIONS[message]
    doc = _base()
    mutate(doc)
    problems = check_manifest(doc, used_gpus=USED_GPUS)
    assert [p.split(": ", 1)[0] for p in problems] == [field for field, _ in expected], problems
    for problem, (_, words) in zip(problems, expected):
        assert words in problem


def test_every_create_time_rule_of_the_crd_has_a_violation_test() -> None:
    assert sorted(VIOLATIONS) == sorted(r.message for r in CREATE_TIME)


# ---------------------------------------------------------------- the valid side of the new rules


@pytest.mark.parametrize("mutate", [
    lambda d: _add_epp(d),                                                         # configMapRef only
    lambda d: _add_epp(d, epp_config={"config": {"plugins": [], "schedulingProfiles": []}}),   # inline config only
    lambda d: _experimental(d, checkpoint={"enabled": True, "job": {}}),
    lambda d: _experimental(d, checkpoint={"enabled": True, "checkpointRef": "", "job": {}}),
    lambda d: _experimental(d, checkpoint={"enabled": True, "checkpointRef": "qwen-ckpt"}),
    lambda d: _experimental(d, gpuMemoryService={"extraClientContainers": ["helper"]}),       # default mode IntraPod
    lambda d: _experimental(d, gpuMemoryService={"mode": "InterPod", "extraClientPods": []}),
    lambda d: _kv_policy(d, clusterTopologyName="gb200"),
    lambda d: _kv_policy(d, labelKey="topology.kubernetes.io/zone", enforcement="preferred", preferredWeight=0.5),
    lambda d: _kv_policy(d, labelKey=".".join(["a" * 63] * 3) + "." + "a" * 61 + "/zone"),   # a 253-character prefix
], ids=["epp-configmap", "epp-inline", "checkpoint-job", "checkpoint-empty-ref", "checkpoint-ref", "gms-intra-pod",
        "gms-no-pods", "kv-topology", "kv-preferred", "kv-prefix-253"])
def test_what_the_new_rules_allow_passes(mutate: Callable[[Doc], Any]) -> None:
    doc = _base()
    mutate(doc)
    assert check_manifest(doc, used_gpus=USED_GPUS) == []


def test_the_rules_see_the_schema_defaults() -> None:
    """The apiserver defaults before it runs CEL: gpuMemoryService.mode defaults to IntraPod, so extra client
    containers without a mode are allowed, and extra pods without one are not."""
    doc = _base()
    _experimental(doc, gpuMemoryService={"extraClientPods": [{"name": "client", "podTemplate": {}}]})
    assert any("only supported with mode=InterPod" in p for p in check_manifest(doc, used_gpus=USED_GPUS))


# ---------------------------------------------------------------- the rules come from the CRD file


RULES = rules_of(crd_schema.version_schema())
CREATE_TIME = [r for r in RULES if r.on_create]


def test_the_rules_are_read_from_the_crd_and_only_update_only_ones_are_left_out() -> None:
    assert len(CREATE_TIME) == 17, "the CRD's create-time rules changed: add a violation test for each new one"
    # the update-only rules skipped on purpose, as the apiserver skips them on create: minAvailable's immutability
    assert [r.message for r in RULES if not r.on_create] == ["minAvailable is immutable after creation"]
    restart = next(r for r in RULES if "restart" in r.message)
    assert restart.optional_old_self and restart.on_create and restart.where == "spec"


def test_a_rule_that_cannot_be_evaluated_is_reported_by_name() -> None:
    """A rule with a function this checker lacks is a problem that names it, never a silent pass."""
    schema = {"type": "object", "properties": {"spec": {"type": "object", "x-kubernetes-validations": [
        {"rule": "self.name.reverse() == 'x'", "message": "a rule beyond the checker"}]}}}
    [problem] = cel_problems({"spec": {"name": "x"}}, schema)
    assert problem.startswith("spec: the CRD rule \"self.name.reverse() == 'x'\" (a rule beyond the checker) could "
                              "not be evaluated offline")


def test_the_docs_say_where_the_rules_come_from() -> None:
    text = DOCS.read_text(encoding="utf-8")
    section = text.split("## CRD rules checked", 1)[1].split("\n## ", 1)[0]
    assert "x-kubernetes-validations" in section and "cel-python" in section


# ---------------------------------------------------------------- set-typed lists (uniqueItems)


def _set_lists(node: Any, path: str) -> Iterator[str]:
    if not isinstance(node, dict):
        return
    if node.get("x-kubernetes-list-type") == "set":
        yield path
    for name, child in (node.get("properties") or {}).items():
        yield from _set_lists(child, f"{path}.{name}" if path else name)
    if isinstance(node.get("items"), dict):
        yield from _set_lists(node["items"], f"{path}[]")


def _exit_codes(container: Doc, values: list[Any]) -> None:
    container["restartPolicy"] = "Always"   # restart rules need an explicit container restart policy
    container["restartPolicyRules"] = [{"action": "Restart", "exitCodes": {"operator": "In", "values": values}}]


def _pod_spec(doc: Doc) -> Doc:
    return _worker(doc)["podTemplate"]["spec"]


# set-typed list -> (a mutation writing `values` into it, where the second entry is reported)
SETS: dict[str, tuple[Callable[[Doc, list[Any]], None], str]] = {
    "spec.components[].experimental.checkpoint.job.gmsClientContainers": (
        lambda d, v: _experimental(d, checkpoint={"enabled": True, "job": {"gmsClientContainers": v}}),
        "spec.components[worker].experimental.checkpoint.job.gmsClientContainers[1]"),
    "spec.components[].experimental.gpuMemoryService.extraClientContainers": (
        lambda d, v: _experimental(d, gpuMemoryService={"extraClientContainers": v}),
        "spec.components[worker].experimental.gpuMemoryService.extraClientContainers[1]"),
    "spec.components[].podTemplate.spec.containers[].restartPolicyRules[].exitCodes.values": (
        lambda d, v: _exit_codes(_pod_spec(d)["containers"][0], v),
        "spec.components[worker].podTemplate.spec.containers[main].restartPolicyRules[0].exitCodes.values[1]"),
    "spec.components[].podTemplate.spec.ephemeralContainers[].restartPolicyRules[].exitCodes.values": (
        lambda d, v: _exit_codes(_ephemeral(d), v),
        "spec.components[worker].podTemplate.spec.ephemeralContainers[debug].restartPolicyRules[0]"
        ".exitCodes.values[1]"),
    "spec.components[].podTemplate.spec.initContainers[].restartPolicyRules[].exitCodes.values": (
        lambda d, v: _exit_codes(_init(d), v),
        "spec.components[worker].podTemplate.spec.initContainers[warmup].restartPolicyRules[0].exitCodes.values[1]"),
}


def _ephemeral(doc: Doc) -> Doc:
    container = {"name": "debug", "image": "busybox:1.36"}
    _pod_spec(doc)["ephemeralContainers"] = [container]
    return container


def _init(doc: Doc) -> Doc:
    container = {"name": "warmup", "image": "busybox:1.36"}
    _pod_spec(doc)["initContainers"] = [container]
    return container


def test_every_set_typed_list_of_the_crd_has_a_test() -> None:
    [v1beta1] = [v for v in crd_schema.crd()["spec"]["versions"] if v["name"] == "v1beta1"]
    assert sorted(_set_lists(v1beta1["schema"]["openAPIV3Schema"], "")) == sorted(SETS)


def _distinct_and_repeated(path: str) -> tuple[list[Any], list[Any]]:
    if path.endswith("exitCodes.values"):
        return [1, 137], [1, 1.0]   # 1 and 1.0 are one value, as with JSON Schema uniqueItems
    return ["gms-a", "gms-b"], ["gms-a", "gms-a"]


@pytest.mark.parametrize("path", list(SETS), ids=lambda p: p.replace("spec.components[].", ""))
def test_a_set_typed_list_rejects_a_repeated_value(path: str) -> None:
    mutate, where = SETS[path]
    distinct, repeated = _distinct_and_repeated(path)
    doc = _base()
    mutate(doc, distinct)
    assert check_manifest(doc, used_gpus=USED_GPUS) == []
    doc = _base()
    mutate(doc, repeated)
    [problem] = check_manifest(doc, used_gpus=USED_GPUS)
    assert problem.startswith(f"{where}: duplicate value {repeated[1]!r}; this list is a set"), problem
    assert "(entry 0 has the same value)" in problem

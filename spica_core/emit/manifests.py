"""One candidate → one ``nvidia.com/v1beta1`` DynamoGraphDeployment (manifests spec §1–§6).

``manifest(candidate)`` deploys exactly the candidate that was scored: the frontend with the
candidate's router, one worker component per role with its replicas, GPU limits and engine flags
(each backend's own spelling, batching per attention-DP rank as the replay modelled it), the Planner
with its PlannerConfig JSON when the candidate scales, KVBM host offload when it offloads, an
optional model-cache PVC and the provenance annotations. A candidate field with no deploy-time
equivalent that would change what runs is never dropped: :class:`ManifestError` lists every such
field. Fields that only size or tune the simulation (§2.4) are kept in the ``spica.dev/candidate``
annotation and named in ``spica.dev/not-rendered``.

``manifest_yaml(doc)`` renders it: key order as built, every string a YAML string (numeric-looking and
YAML-1.1 boolean-looking strings quoted), JSON blobs on one line.
"""
from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import yaml

from spica_core.emit.crd import (
    API_VERSION, DNS_LABEL, GPU_RESOURCE, KIND, MAIN_CONTAINER, SEMVER_TAG, image_tag, parallel_flag,
)
from spica_core.errors import ManifestError, PlannerConfigError, SpicaError
from spica_core.deployment import Candidate, EngineKnobs
from spica_core.store import canonical_json, fingerprint
from spica_core.space.parallel import Shape

if TYPE_CHECKING:
    from spica_core.config.model import OptimizationGoal

DYNAMO_VERSION = "1.6.1"
IMAGE_REGISTRY = "nvcr.io/nvidia/ai-dynamo"
RUNTIME_REPOS = {"vllm": "vllm-runtime", "sglang": "sglang-runtime", "trtllm": "tensorrtllm-runtime"}
PLANNER_REPO = "dynamo-planner"
# Engines the ai-dynamo 1.6.1 runtime images ship (spec §0); the perf DB may be older (spica.dev/perf-db-version).
IMAGE_ENGINES = {"vllm": "vllm 0.31.0", "sglang": "sglang 0.5.21", "trtllm": "tensorrt-llm 1.3.0rc29"}
ANNOTATION_PREFIX = "spica.dev/"
MANAGED_BY = {"app.kubernetes.io/managed-by": "spica"}
MAX_DGD_NAME = 40                    # it prefixes every child name (§6.5)
MODEL_CACHE_VOLUME = "model-cache"
MODEL_CACHE_MOUNT = "/model-cache"   # HF_HOME points here
HOST_MEMORY_HEADROOM_GIB = 64        # KVBM pods: the host cache plus this much for the process (§5.1)
HOST_MEMORY_LIMIT_FACTOR = 1.25      # memory limit = request × this
SGLANG_BOOTSTRAP_PORT = 12345
PLANNER_TARGETS = ("throughput", "latency", "sla")

COMPONENT_NAMES = {"agg": "worker", "prefill": "prefill", "decode": "decode"}
COMPONENT_TYPES = {"agg": "worker", "prefill": "prefill", "decode": "decode"}
FRONTEND, PLANNER = "Frontend", "Planner"

VLLM_KV_EVENTS = {"publisher": "zmq", "topic": "kv-events", "endpoint": "tcp://*:20080", "enable_kv_cache_events": True}
SGLANG_KV_EVENTS = {"publisher": "zmq", "topic": "kv-events", "endpoint": "tcp://*:5557"}
NIXL_CONNECTOR = {"kv_connector": "NixlConnector", "kv_role": "kv_both"}
KVBM_MODULE = "kvbm.vllm_integration.connector"
KVBM_CONNECTOR = {"kv_connector": "DynamoConnector", "kv_connector_module_path": KVBM_MODULE, "kv_role": "kv_both"}
PD_CONNECTOR = {"kv_connector": "PdConnector", "kv_role": "kv_both",
                "kv_connector_extra_config": {"connectors": [KVBM_CONNECTOR, NIXL_CONNECTOR]},
                "kv_connector_module_path": KVBM_MODULE}

# Keys the operator owns (§6.4): never set them.
OPERATOR_KEYS = frozenset({
    "nvidia.com/dynamo-component-type", "nvidia.com/dynamo-sub-component-type",
    "nvidia.com/dynamo-graph-deployment-name", "nvidia.com/dynamo-component", "nvidia.com/dynamo-namespace",
    "nvidia.com/selector", "nvidia.com/metrics-enabled", "nvidia.com/workload-provider",
})
# Candidate fields that only size or tune the simulation (§2.4); recorded, never rendered.
REPLAY_ONLY = ("startup_time", "kv_bytes_per_token", "bandwidth_g1_to_g2_gbps", "bandwidth_g2_to_g1_gbps",
               "concurrency", "kv_load_ratio", "kv_load_capacity_tokens", "kv_load_concurrency_capacity")
_ANNOTATION_KEY = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                             r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_IMAGE_REPO = re.compile(r"(?:^|/)(vllm|sglang|tensorrtllm)-runtime$")
_RUNTIME_BACKEND = {"vllm": "vllm", "sglang": "sglang", "tensorrtllm": "trtllm"}


@dataclass(frozen=True)
class ManifestOptions:
    """Deployment parameters a candidate does not carry.

    ``image`` None = ``nvcr.io/nvidia/ai-dynamo/<backend>-runtime:1.6.1`` (§6.6); ``planner_image`` None =
    the ``dynamo-planner`` image of the same registry and tag. ``optimization_target`` (with ``ttft_ms`` /
    ``itl_ms`` for ``sla``) is the sweep goal's planner target (§4.6): required for a candidate that
    scales, because the replay scored it under that target — see :meth:`for_goal`.
    """

    image: str | None = None
    namespace: str | None = None
    model_cache_pvc: str | None = "model-cache"
    name: str | None = None
    planner_image: str | None = None
    hf_token_secret: str | None = "hf-token-secret"
    dynamo_version: str = DYNAMO_VERSION        # runtimeVersionOverride when an image tag is not semver
    optimization_target: str | None = None
    ttft_ms: float | None = None
    itl_ms: float | None = None
    shared_memory_size: str | None = "64Gi"     # /dev/shm of workers that span more than one GPU

    @classmethod
    def for_goal(cls, goal: OptimizationGoal, **kwargs: Any) -> ManifestOptions:
        """Options carrying the planner target (and SLA) the sweep's goal gave the replayed planner."""
        from spica_core.config.policies import planner_target

        sla = goal.sla
        return cls(optimization_target=planner_target(goal), ttft_ms=sla.ttft_ms if sla else None,
                   itl_ms=sla.itl_ms if sla else None, **kwargs)


def default_image(backend: str, version: str = DYNAMO_VERSION) -> str:
    return f"{IMAGE_REGISTRY}/{RUNTIME_REPOS[backend]}:{version}"


def default_name(candidate: Candidate, rank: int | None = None) -> str:
    """``spica-<backend>-<mode>-<fingerprint8>[-r<rank>]``: short, lower case, stable for a candidate."""
    base = f"spica-{candidate.backend}-{candidate.mode}-{fingerprint(candidate.to_sample(), 8)}"
    return f"{base}-r{rank}" if rank is not None else base


class _Problems:
    """Every field a manifest cannot express, collected before refusing once."""

    def __init__(self) -> None:
        self.items: list[tuple[str, str]] = []

    def add(self, field_name: str, why: str) -> None:
        if (field_name, why) not in self.items:
            self.items.append((field_name, why))

    def raise_if_any(self, candidate: Candidate) -> None:
        if not self.items:
            return
        lines = "\n".join(f"  - {f}: {why}" for f, why in self.items)
        raise ManifestError(f"the {candidate.mode} {candidate.backend} candidate ({candidate.parallel.label()}) cannot "
                            f"be expressed as a DynamoGraphDeployment; {len(self.items)} field(s):\n{lines}")


@dataclass
class _Context:
    candidate: Candidate
    options: ManifestOptions
    problems: _Problems
    image: str
    gpus_per_node: int | None
    notes: list[str] = field(default_factory=list)   # approximations, recorded in an annotation

    @property
    def backend(self) -> str:
        return self.candidate.backend

    def key(self, role: str, name: str, *, shape: bool = False) -> str:
        """The flat-sample (§9.1) key of a role's field: agg shape keys are unprefixed."""
        return name if shape and role == "agg" else f"{role}_{name}"

    def offloads(self, role: str) -> bool:
        return self.candidate.offload.enabled and role in ("agg", "prefill")

    def publishes_events(self, role: str) -> bool:
        return self.candidate.router.is_kv and role in ("agg", "prefill")


# ---------------------------------------------------------------- entry points


def manifest(candidate: Candidate, options: ManifestOptions = ManifestOptions(), *, rank: int | None = None,
             annotations: Mapping[str, str] = {}) -> dict[str, Any]:
    """The DGD for exactly this candidate; raises ManifestError listing every field that cannot be expressed."""
    problems = _Problems()
    backend = candidate.backend
    if backend not in RUNTIME_REPOS:
        problems.add("backend", f"{backend!r} has no Dynamo runtime (vllm, sglang, trtllm)")
        problems.raise_if_any(candidate)
    image = options.image or default_image(backend, options.dynamo_version)
    ctx = _Context(candidate, options, problems, image, _gpus_per_node(candidate, problems))
    _check_options(ctx)
    _check_candidate(ctx)
    planner = _planner_component(ctx)
    workers = [_worker_component(ctx, role) for role in candidate.roles]
    name = options.name or default_name(candidate, rank)
    meta_annotations = _annotations(ctx, rank, annotations)
    problems.raise_if_any(candidate)

    components = [_frontend_component(ctx), *([planner] if planner else []), *workers]
    metadata: dict[str, Any] = {"name": name}
    if options.namespace:
        metadata["namespace"] = options.namespace
    metadata["labels"] = dict(MANAGED_BY)
    metadata["annotations"] = meta_annotations
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": metadata,
            "spec": {"backendFramework": backend, "components": components}}


class _Dumper(yaml.SafeDumper):
    """SafeDumper that also quotes YAML-1.1 boolean spellings PyYAML leaves plain (y, n)."""


_BOOL_LIKE = re.compile(r"^(y|Y|yes|Yes|YES|n|N|no|No|NO|true|True|TRUE|false|False|FALSE|on|On|ON|off|Off|OFF)$")


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "'" if _BOOL_LIKE.match(value) else ("|" if "\n" in value else None)
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _represent_str)


def manifest_yaml(doc: Mapping[str, Any]) -> str:
    """YAML of a manifest: keys in built order, strings quoted where YAML would read another type."""
    return yaml.dump(dict(doc), Dumper=_Dumper, sort_keys=False, default_flow_style=False, allow_unicode=True,
                     width=1 << 20)


# ---------------------------------------------------------------- checks before building


def _gpus_per_node(candidate: Candidate, problems: _Problems) -> int | None:
    from spica_core.space.facts import system_facts

    try:
        return system_facts(candidate.context.hardware_sku).gpus_per_node
    except SpicaError as exc:
        problems.add("hardware_sku", f"the node size is unknown, so multi-node layout cannot be decided ({exc})")
        return None


def _check_options(ctx: _Context) -> None:
    o, p = ctx.options, ctx.problems
    if o.name is not None and (len(o.name) > MAX_DGD_NAME or not DNS_LABEL.match(o.name)):
        p.add("ManifestOptions.name", f"{o.name!r} must be a DNS-1123 label (lower case letters, digits, '-', starting "
                                      f"with a letter) of at most {MAX_DGD_NAME} characters")
    if o.namespace is not None and not re.match(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$", o.namespace):
        p.add("ManifestOptions.namespace", f"{o.namespace!r} is not a DNS-1123 label")
    if not re.match(r"^(0|[1-9]\d{0,3})\.(0|[1-9]\d{0,3})\.(0|[1-9]\d{0,3})$", o.dynamo_version):
        p.add("ManifestOptions.dynamo_version", f"{o.dynamo_version!r} must be MAJOR.MINOR.PATCH")
    deployed = _deployed_version(ctx)
    if ctx.candidate.router.is_kv and deployed >= (1, 7):
        p.add("router_mode", f"the image runs Dynamo {'.'.join(map(str, deployed))}: from 1.7 the KV router weights "
                             "move to a --router-policy-config file, which this generator does not write yet (it "
                             "targets 1.6.x, whose DYN_ROUTER_* variables carry them)")
    repo = ctx.image.split("@", 1)[0].rsplit(":", 1)[0] if image_tag(ctx.image) else ctx.image.split("@", 1)[0]
    found = _IMAGE_REPO.search(repo)
    if found and _RUNTIME_BACKEND[found.group(1)] != ctx.backend:
        p.add("ManifestOptions.image", f"{ctx.image!r} is the {found.group(1)} runtime, but the candidate runs "
                                       f"{ctx.backend}")


def _deployed_version(ctx: _Context) -> tuple[int, ...]:
    """The Dynamo version that runs: the image's semver tag, else the declared runtime version."""
    tag = image_tag(ctx.image) or ""
    text = tag.lstrip("vV") if SEMVER_TAG.match(tag) else ctx.options.dynamo_version
    try:
        return tuple(int(x) for x in re.split(r"[-+]", text, maxsplit=1)[0].split(".")[:3])
    except ValueError:
        return (0, 0, 0)


def _check_candidate(ctx: _Context) -> None:
    c, p = ctx.candidate, ctx.problems
    if c.used_gpus > c.context.gpu_budget:
        p.add("used_gpus", f"{c.used_gpus} GPUs exceed gpu_budget {c.context.gpu_budget}")
    router = c.router
    if router.mode not in ("kv_router", "round_robin"):
        p.add("router_mode", f"{router.mode!r} has no frontend router mode here (kv_router → kv, "
                             "round_robin → round-robin)")
    admission = router.admission
    if router.is_kv and admission is not None:
        for name in ("active_decode_blocks_threshold", "active_prefill_tokens_threshold",
                     "active_prefill_tokens_threshold_frac"):
            if getattr(admission, name) is not None:
                p.add(name, "admission control was not replayed (the replay API has none), so deploying it would "
                            "change what was scored")
        if admission.no_admission_control:
            p.add("no_admission_control", "admission control settings were not replayed")
    if c.mode == "disagg":
        pb, db = c.engines["prefill"].block_size, c.engines["decode"].block_size
        if pb != db:
            p.add("prefill_block_size", f"{pb} differs from decode_block_size {db}; KV transfer needs the same page "
                                        "size on both sides")
    if router.is_kv:
        role = "agg" if c.mode == "agg" else "prefill"
        if not c.engines[role].enable_prefix_caching:
            p.add(f"{role}_enable_prefix_caching", "is false with router_mode kv_router: the worker publishes no KV "
                                                   "events, and the router's approximate mode (no events) is not "
                                                   "what was replayed")
    if c.offload.enabled and ctx.backend == "sglang":
        p.add("num_g2_blocks", "SGLang has no KVBM host offload; HiCache sizes its host tier differently, so it would "
                               "not be the G2 tier that was replayed")


# ---------------------------------------------------------------- frontend


def _frontend_component(ctx: _Context) -> dict[str, Any]:
    router = ctx.candidate.router
    env = [_env("DYN_ROUTER_MODE", "kv" if router.is_kv else "round-robin")]
    if router.is_kv:
        names = {"overlap_score_credit": "DYN_ROUTER_KV_OVERLAP_SCORE_CREDIT",
                 "prefill_load_scale": "DYN_ROUTER_PREFILL_LOAD_SCALE",
                 "router_temperature": "DYN_ROUTER_TEMPERATURE"}
        if ctx.candidate.offload.enabled:   # lower-tier hits only come from a KVBM worker
            names.update(host_cache_hit_weight="DYN_ROUTER_HOST_CACHE_HIT_WEIGHT",
                         disk_cache_hit_weight="DYN_ROUTER_DISK_CACHE_HIT_WEIGHT")
        weights = router.weights()
        env += [_env(var, _num(weights[knob])) for knob, var in names.items() if knob in weights]
    container: dict[str, Any] = {"name": MAIN_CONTAINER, "image": ctx.image, "env": env}
    if ctx.options.hf_token_secret:
        container["envFrom"] = [{"secretRef": {"name": ctx.options.hf_token_secret}}]
    return _component(ctx, FRONTEND, "frontend", 1, container, ctx.image)


# ---------------------------------------------------------------- planner (§4)


def _planner_component(ctx: _Context) -> dict[str, Any] | None:
    c, o, p = ctx.candidate, ctx.options, ctx.problems
    if not c.planner.scales:
        return None
    from spica_core.planner.settings import PlannerSettings

    if o.optimization_target is None:
        p.add("planner_scaling_policy", f"{_policy(c)} scales, and the Planner's optimization_target comes from the "
                                        "sweep goal, which the candidate does not carry; pass "
                                        "ManifestOptions.for_goal(goal) or ManifestOptions(optimization_target=...)")
        return None
    if o.optimization_target not in PLANNER_TARGETS:
        p.add("ManifestOptions.optimization_target", f"{o.optimization_target!r} is not one of "
                                                     f"{', '.join(PLANNER_TARGETS)}")
        return None
    try:
        settings = PlannerSettings.from_candidate(c, o.optimization_target, ttft_ms=o.ttft_ms, itl_ms=o.itl_ms)
    except PlannerConfigError as exc:
        p.add("planner_scaling_policy", str(exc))
        return None
    assert settings is not None
    image = o.planner_image or _planner_image(ctx)
    if image is None:
        return None
    config = planner_config(c, settings)
    container: dict[str, Any] = {"name": MAIN_CONTAINER, "image": image, "command": ["python3", "-m", "dynamo.planner"],
                                 "args": ["--config", json.dumps(config, separators=(",", ":"))]}
    if o.hf_token_secret:
        container["envFrom"] = [{"secretRef": {"name": o.hf_token_secret}}]
    return _component(ctx, PLANNER, "planner", 1, container, image)


def planner_config(candidate: Candidate, settings: Any) -> dict[str, Any]:
    """The PlannerConfig (1.6.1) JSON of §4.1 from the settings the replay ran the planner with."""
    ctx = candidate.context
    out: dict[str, Any] = {
        "environment": "kubernetes", "backend": candidate.backend, "mode": candidate.mode,
        "optimization_target": settings.optimization_target, "pre_deployment_sweeping_mode": "none",
        "enable_throughput_scaling": settings.enable_throughput_scaling,
        "enable_load_scaling": settings.enable_load_scaling,
        "throughput_adjustment_interval_seconds": _int_if_whole(settings.throughput_interval_s),
        "load_adjustment_interval_seconds": _int_if_whole(settings.load_interval_s),
        "max_num_fpm_samples": settings.max_num_fpm_samples, "fpm_sample_bucket_size": settings.fpm_sample_bucket_size,
        "load_scaling_down_sensitivity": settings.load_scaling_down_sensitivity,
        "load_min_observations": settings.load_min_observations,
    }
    if settings.enable_throughput_scaling:   # the predictor the replay forecast with (constant when none was swept)
        out.update(settings.predictor)
    out["max_gpu_budget"] = settings.max_gpu_budget
    if ctx.min_gpu_budget is not None:
        out["min_gpu_budget"] = settings.min_gpu_budget
    if ctx.min_endpoint is not None:
        out["min_endpoint"] = settings.min_endpoint
    roles = candidate.parallel.roles
    if candidate.mode == "disagg":
        out["prefill_engine_num_gpu"] = roles["prefill"].shape.gpus
    out["decode_engine_num_gpu"] = roles["decode" if candidate.mode == "disagg" else "agg"].shape.gpus
    out["model_name"] = ctx.model_name
    if ctx.aic_nextn:
        out["speculative_nextn"] = ctx.aic_nextn
    if settings.optimization_target == "sla":
        out["ttft_ms"], out["itl_ms"] = settings.ttft_ms, settings.itl_ms
    out["report_interval_hours"] = None
    out["live_dashboard_port"] = 0
    return out


def _planner_image(ctx: _Context) -> str | None:
    if ctx.options.image is None:
        return f"{IMAGE_REGISTRY}/{PLANNER_REPO}:{ctx.options.dynamo_version}"
    ref = ctx.options.image
    match = re.match(r"^(?P<head>.*?)(?P<repo>[^/:@]+)-runtime(?P<tail>[:@].*)?$", ref)
    if not match:
        ctx.problems.add("ManifestOptions.planner_image", f"cannot derive the planner image from {ref!r} (no "
                                                          "'<backend>-runtime' repository); set planner_image")
        return None
    return f"{match['head']}{PLANNER_REPO}{match['tail'] or ''}"


# ---------------------------------------------------------------- workers


def _layout(ctx: _Context, role: str, shape: Shape) -> tuple[int, int]:
    """(nodeCount, GPUs per pod) of one worker instance (§6.2)."""
    g, gpn = shape.gpus, ctx.gpus_per_node
    if gpn is None or g <= gpn:
        return 1, g
    nodes = math.ceil(g / gpn)
    if g % nodes:
        ctx.problems.add(ctx.key(role, "tp", shape=True), f"a {g}-GPU instance does not split evenly over {nodes} "
                                                          f"nodes of {gpn} GPUs")
        return nodes, g // nodes
    per_pod = g // nodes
    if ctx.backend == "vllm" and shape.attention_dp > 1 and per_pod % (shape.tp * shape.pp):
        ctx.problems.add(ctx.key(role, "attention_dp", shape=True),
                         f"vLLM multi-node data parallelism needs whole TP groups per node ({per_pod} GPUs per pod, "
                         f"tp={shape.tp})")
    if ctx.offloads(role):
        ctx.problems.add("num_g2_blocks", f"host offload on the {role} worker, whose instance spans {nodes} nodes, is "
                                          "not supported (the host tier's per-node split is undefined)")
    return nodes, per_pod


def _worker_component(ctx: _Context, role: str) -> dict[str, Any]:
    c = ctx.candidate
    rc = c.parallel.roles[role]
    shape, knobs = rc.shape, c.engines[role]
    _check_shape(ctx, role, shape)
    nodes, per_pod = _layout(ctx, role, shape)
    args = {"vllm": _vllm_args, "sglang": _sglang_args, "trtllm": _trtllm_args}[ctx.backend](ctx, role, shape, knobs)
    env: list[dict[str, str]] = []
    resources: dict[str, Any] = {"limits": {GPU_RESOURCE: str(per_pod)}}
    if ctx.offloads(role):
        env += _kvbm_env(ctx)
        memory = _host_memory(ctx, shape, knobs)
        if memory is not None:
            resources = {"limits": {GPU_RESOURCE: str(per_pod), "memory": memory[1]},
                         "requests": {GPU_RESOURCE: str(per_pod), "memory": memory[0]}}
    pvc = ctx.options.model_cache_pvc
    if pvc:
        env.append(_env("HF_HOME", MODEL_CACHE_MOUNT))
    container: dict[str, Any] = {"name": MAIN_CONTAINER, "image": ctx.image,
                                 "command": ["python3", "-m", f"dynamo.{ctx.backend}"], "args": args}
    if env:
        container["env"] = env
    if ctx.options.hf_token_secret:
        container["envFrom"] = [{"secretRef": {"name": ctx.options.hf_token_secret}}]
    container["resources"] = resources
    pod: dict[str, Any] = {"containers": [container]}
    if pvc:
        container["volumeMounts"] = [{"name": MODEL_CACHE_VOLUME, "mountPath": MODEL_CACHE_MOUNT}]
        pod["volumes"] = [{"name": MODEL_CACHE_VOLUME, "persistentVolumeClaim": {"claimName": pvc}}]
    comp = _component(ctx, COMPONENT_NAMES[role], COMPONENT_TYPES[role], rc.replicas, container, ctx.image, pod=pod)
    if nodes > 1:
        comp["multinode"] = {"nodeCount": nodes}
    if c.planner.scales:
        comp["scalingAdapter"] = {}
    if shape.gpus > 1 and ctx.options.shared_memory_size:
        comp["sharedMemorySize"] = ctx.options.shared_memory_size
    return comp


def _check_shape(ctx: _Context, role: str, shape: Shape) -> None:
    p, key = ctx.problems, ctx.key
    if shape.pp != 1:
        p.add(key(role, "pp", shape=True), f"pipeline parallelism ({shape.pp}) was not replayed (the replay runs "
                                           "pp=1), so deploying it would not be the scored candidate")
    g = shape.gpus
    if shape.is_moe_sharded and shape.moe_tp * shape.moe_ep != shape.tp * shape.attention_dp:
        p.add(key(role, "moe_ep", shape=True), f"moe_tp × moe_ep = {shape.moe_tp * shape.moe_ep} must equal "
                                               f"tp × attention_dp = {shape.tp * shape.attention_dp}")
    if ctx.backend == "vllm" and shape.moe_tp > 1 and shape.moe_ep > 1:
        p.add(key(role, "moe_tp", shape=True), f"vLLM cannot mix MoE TP ({shape.moe_tp}) with expert parallelism "
                                               f"({shape.moe_ep}): with --enable-expert-parallel EP spans all {g} GPUs")
    if ctx.backend == "trtllm" and shape.attention_dp > 1 and shape.tp > 1:
        p.add(key(role, "attention_dp", shape=True), f"TRT-LLM attention DP spans the whole TP group, so tp "
                                                     f"{shape.tp} × attention_dp {shape.attention_dp} cannot be "
                                                     "expressed (use tp=1)")


# -- vLLM


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


# -- SGLang: worker-level limits are divided by the attention-DP size inside SGLang (§2.1)


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


# -- TRT-LLM: engine settings through --override-engine-args (deep-merged last, §2.2 notes)


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


# -- KVBM (§5)


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


# ---------------------------------------------------------------- shared pieces


def _component(ctx: _Context, name: str, ctype: str, replicas: int, container: dict[str, Any], image: str, *,
               pod: dict[str, Any] | None = None) -> dict[str, Any]:
    comp: dict[str, Any] = {"name": name, "type": ctype, "replicas": replicas,
                            "podTemplate": {"spec": pod if pod is not None else {"containers": [container]}}}
    if not SEMVER_TAG.match(image_tag(image) or ""):
        comp["runtimeVersionOverride"] = ctx.options.dynamo_version
    return comp


def _context_args(ctx: _Context, flag: str) -> list[str]:
    length = ctx.candidate.context.context_length
    return [flag, str(length)] if length is not None else []


def _annotations(ctx: _Context, rank: int | None, extra: Mapping[str, Any]) -> dict[str, str]:
    c, p = ctx.candidate, ctx.problems
    sample = c.to_sample()
    own: dict[str, str] = {}
    if rank is not None:
        own["rank"] = str(rank)
    own.update({"mode": c.mode, "backend": c.backend, "parallel": c.parallel.label(),
                "quantization": c.precision.quantization, "kv-cache-dtype": c.precision.kv_cache_dtype,
                "used-gpus": str(c.used_gpus),
                "gpu-budget": str(c.context.gpu_budget), "model": c.context.model_name,
                "hardware-sku": c.context.hardware_sku})
    if c.backend_version is not None:
        own["perf-db-version"] = f"{c.backend} {c.backend_version}"
    own["dynamo-version"] = ctx.options.dynamo_version
    own["image"] = ctx.image
    if ctx.options.image is None:
        own["image-engine"] = IMAGE_ENGINES[c.backend]
    if c.planner.scales and ctx.options.optimization_target:
        own["planner-target"] = ctx.options.optimization_target
    not_rendered = [k for k in REPLAY_ONLY if sample.get(k) is not None]
    if not_rendered:
        own["not-rendered"] = ",".join(not_rendered)
    if ctx.notes:
        own["approximations"] = "; ".join(ctx.notes)
    own["candidate"] = canonical_json(sample)
    own = {ANNOTATION_PREFIX + k: v for k, v in own.items()}

    out: dict[str, str] = {}
    for key, value in extra.items():
        if not isinstance(key, str) or not _ANNOTATION_KEY.match(key):
            p.add("annotations", f"{key!r} is not a valid Kubernetes annotation key")
            continue
        if key in OPERATOR_KEYS:
            p.add("annotations", f"{key!r} is owned by the Dynamo operator")
            continue
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            p.add("annotations", f"{key!r}: annotation values are strings (got {type(value).__name__})")
            continue
        text = value if isinstance(value, str) else _num(value)
        if key in own and own[key] != text:
            p.add("annotations", f"{key!r} is set from the candidate ({own[key]!r}); the caller gave {text!r}")
            continue
        out[key] = text
    out.update(own)
    return out


def _env(name: str, value: str) -> dict[str, str]:
    return {"name": name, "value": value}


def _num(value: float | int) -> str:
    """A number as an argument string: ints plain, floats in Python's shortest form (4.0, 0.9)."""
    return str(int(value)) if isinstance(value, int) and not isinstance(value, bool) else repr(float(value))


def _int_if_whole(value: float) -> int | float:
    return int(value) if float(value).is_integer() else float(value)


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def _policy(candidate: Candidate) -> str:
    policy = candidate.planner.policy
    return repr(policy) if isinstance(policy, str) else "the planner_scaling_policy entry"


__all__ = ["ManifestOptions", "manifest", "manifest_yaml", "planner_config", "default_image", "default_name",
           "DYNAMO_VERSION", "ANNOTATION_PREFIX", "IMAGE_ENGINES"]

"""One candidate → one ``nvidia.com/v1beta1`` DynamoGraphDeployment.

``manifest(candidate)`` deploys exactly the candidate that was scored: the frontend with the
candidate's router, one worker component per role with its replicas, GPU limits, a node selector on its
GPU type and engine flags (each backend's own spelling, batching per attention-DP rank as the replay
modelled it), the Planner
with its PlannerConfig JSON when the candidate scales, KVBM host offload when it offloads, an
optional model-cache PVC and the provenance annotations. A candidate field with no deploy-time
equivalent that would change what runs is never dropped: :class:`ManifestError` lists every such
field. Fields that only size or tune the simulation are kept in the ``spica.dev/candidate``
annotation and named in ``spica.dev/not-rendered``.

``manifest_yaml(doc)`` renders it: key order as built, every string a YAML string (numeric-looking and
YAML-1.1 boolean-looking strings quoted), JSON blobs on one line.

This module checks the candidate and builds the document (frontend, workers, annotations);
``manifest_options.py`` holds the options and default images, ``spica_core/engines`` each engine's
flags, ``manifest_planner.py`` the Planner component and ``manifest_context.py`` the state the builders
share.
"""
from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

import yaml

from spica_core.config.search_space import sku_field
from spica_core.deployment import Candidate
from spica_core.emit.crd import API_VERSION, KIND
from spica_core.emit.crd_reading import GPU_RESOURCE, MAIN_CONTAINER, image_tag
from spica_core.emit.crd_webhook import DNS_LABEL, NAMESPACE, QUALIFIED_NAME, SEMVER_TAG
from spica_core.engines import Launch, engine, num_arg
from spica_core.emit.manifest_context import _component, _Context, _env, _Problems
from spica_core.emit.manifest_kvbm import _host_memory, _kvbm_env
from spica_core.emit.manifest_options import (
    GPU_PRODUCT_LABEL, IMAGE_ENGINES, RUNTIME_REPOS, ManifestOptions, default_image,
)
from spica_core.emit.manifest_planner import _planner_component
from spica_core.errors import SpicaError
from spica_core.space.parallel import Shape
from spica_core.store import canonical_json, fingerprint


ANNOTATION_PREFIX = "spica.dev/"
MANAGED_BY = {"app.kubernetes.io/managed-by": "spica"}
MAX_DGD_NAME = 40                    # it prefixes every child name
MODEL_CACHE_VOLUME = "model-cache"
MODEL_CACHE_MOUNT = "/model-cache"   # HF_HOME points here

COMPONENT_NAMES = {"agg": "worker", "prefill": "prefill", "decode": "decode"}
COMPONENT_TYPES = {"agg": "worker", "prefill": "prefill", "decode": "decode"}
FRONTEND = "Frontend"

# Keys the operator owns: never set them.
OPERATOR_KEYS = frozenset({
    "nvidia.com/dynamo-component-type", "nvidia.com/dynamo-sub-component-type",
    "nvidia.com/dynamo-graph-deployment-name", "nvidia.com/dynamo-component", "nvidia.com/dynamo-namespace",
    "nvidia.com/selector", "nvidia.com/metrics-enabled", "nvidia.com/workload-provider",
})
# Candidate fields that only size or tune the simulation; recorded, never rendered.
REPLAY_ONLY = ("startup_time", "kv_bytes_per_token", "bandwidth_g1_to_g2_gbps", "bandwidth_g2_to_g1_gbps",
               "concurrency", "kv_load_ratio", "kv_load_capacity_tokens", "kv_load_concurrency_capacity")
_IMAGE_REPO = re.compile(r"(?:^|/)(vllm|sglang|tensorrtllm)-runtime$")
_RUNTIME_BACKEND = {"vllm": "vllm", "sglang": "sglang", "tensorrtllm": "trtllm"}


def default_name(candidate: Candidate, rank: int | None = None) -> str:
    """``spica-<backend>-<mode>-<fingerprint8>[-r<rank>]``: short, lower case, stable for a candidate."""
    base = f"spica-{candidate.backend}-{candidate.mode}-{fingerprint(candidate.to_sample(), 8)}"
    return f"{base}-r{rank}" if rank is not None else base


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


def _gpus_per_node(candidate: Candidate, problems: _Problems) -> dict[str, int | None]:
    """Each role's node size, from its GPU type."""
    from spica_core.space.facts import system_facts

    out: dict[str, int | None] = {}
    for role in candidate.roles:
        try:
            out[role] = system_facts(candidate.sku(role)).gpus_per_node
        except SpicaError as exc:
            problems.add(sku_field(candidate.mode, role), f"the node size is unknown, so multi-node layout cannot be "
                                                          f"decided ({exc})")
            out[role] = None
    return out


def _check_options(ctx: _Context) -> None:
    o, p = ctx.options, ctx.problems
    if o.name is not None and (len(o.name) > MAX_DGD_NAME or not DNS_LABEL.match(o.name)):
        p.add("ManifestOptions.name", f"{o.name!r} must be a DNS-1123 label (lower case letters, digits, '-', starting "
                                      f"with a letter) of at most {MAX_DGD_NAME} characters")
    if o.namespace is not None and not NAMESPACE.match(o.namespace):
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
        env += [_env(var, num_arg(weights[knob])) for knob, var in names.items() if knob in weights]
    container: dict[str, Any] = {"name": MAIN_CONTAINER, "image": ctx.image, "env": env}
    if ctx.options.hf_token_secret:
        container["envFrom"] = [{"secretRef": {"name": ctx.options.hf_token_secret}}]
    return _component(ctx, FRONTEND, "frontend", 1, container, ctx.image)


# ---------------------------------------------------------------- workers


def _layout(ctx: _Context, role: str, shape: Shape) -> tuple[int, int]:
    """(nodeCount, GPUs per pod) of one worker instance; one larger than a node splits evenly over the fewest
    nodes."""
    g, gpn = shape.gpus, ctx.gpus_per_node[role]
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
    args = engine(ctx.backend).args(Launch(c, role, shape, knobs, ctx.offloads(role), ctx.publishes_events(role),
                                           ctx.notes, ctx.problems))
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
    pod: dict[str, Any] = {"containers": [container], "nodeSelector": _node_selector(ctx, role)}
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


def _node_selector(ctx: _Context, role: str) -> dict[str, str]:
    """Place the worker on its GPU type's nodes: the GPU feature discovery product label."""
    sku = ctx.candidate.sku(role)
    product = ctx.options.gpu_product(sku)
    if product is None:
        ctx.problems.add(sku_field(ctx.candidate.mode, role),
                         f"no {GPU_PRODUCT_LABEL} value is known for {sku}, so its workers cannot be placed on their "
                         f"GPU type; give it (spica emit --gpu-product-label {sku}=VALUE)")
        return {}
    return {GPU_PRODUCT_LABEL: product}


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


# ---------------------------------------------------------------- annotations


def _annotations(ctx: _Context, rank: int | None, extra: Mapping[str, Any]) -> dict[str, str]:
    c, p = ctx.candidate, ctx.problems
    sample = c.to_sample()
    own: dict[str, str] = {}
    if rank is not None:
        own["rank"] = str(rank)
    own.update({"mode": c.mode, "backend": c.backend, "parallel": c.parallel.label(),
                "quantization": c.precision.quantization, "kv-cache-dtype": c.precision.kv_cache_dtype,
                "used-gpus": str(c.used_gpus),
                "gpu-budget": str(c.context.gpu_budget), "model": c.context.model_name})
    own.update({name.replace("_", "-"): sku for name, sku in c.hardware_fields().items()})
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
        if not isinstance(key, str) or not QUALIFIED_NAME.match(key):
            p.add("annotations", f"{key!r} is not a valid Kubernetes annotation key")
            continue
        if key in OPERATOR_KEYS:
            p.add("annotations", f"{key!r} is owned by the Dynamo operator")
            continue
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            p.add("annotations", f"{key!r}: annotation values are strings (got {type(value).__name__})")
            continue
        text = value if isinstance(value, str) else num_arg(value)
        if key in own and own[key] != text:
            p.add("annotations", f"{key!r} is set from the candidate ({own[key]!r}); the caller gave {text!r}")
            continue
        out[key] = text
    out.update(own)
    return out


__all__ = ["manifest", "manifest_yaml", "default_name", "ANNOTATION_PREFIX"]

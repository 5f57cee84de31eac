"""``spica space CONFIG [--json]``: the deployments a config may try, per mode and backend.

The JSON form is documented in docs/space.md (schema ``spica.space/2``).
"""
from __future__ import annotations

import json
from typing import Any

from spica_core.space.branches import Branch, BranchSet, config_strategy, enumerate_branches
from spica_core.config.model import SmartSearchConfig
from spica_core.run.inputs import load_inputs
from spica_core.space.kv import FILTER_MAX_BATCH_SIZE, FILTER_MAX_NUM_TOKENS, FILTER_MEMORY_FRACTION
from spica_core.space.parallel import ParallelConfig, RoleConfig
from spica_core.space.projection import latent_params

SCHEMA = "spica.space/2"
_GIB = 1 << 30


def _role(rc: RoleConfig) -> dict[str, Any]:
    return {**rc.to_dict(), "strategy": rc.shape.strategy, "gpus_per_worker": rc.shape.gpus}


def config_entry(config: ParallelConfig, backends: tuple[str, ...]) -> dict[str, Any]:
    """One config of ``--json``: the shape fields and replicas per role, used_gpus, strategy, backends."""
    if config.mode == "agg":
        assert config.agg is not None
        body: dict[str, Any] = _role(config.agg)
    else:
        assert config.prefill is not None and config.decode is not None
        body = {"prefill": _role(config.prefill), "decode": _role(config.decode), "strategy": config_strategy(config)}
    return {**body, "used_gpus": config.used_gpus, "backends": list(backends)}


def _branch_doc(branch: Branch, bs: BranchSet) -> dict[str, Any]:
    per_backend = {b: {"backend_versions": {sku: bs.systems[sku].backend_versions.get(b)
                                            for v in branch.variants if v.backend == b for sku in v.skus}, **s}
                   for b, s in branch.summary().items()}
    return {
        "mode": branch.mode,
        "backends": list(branch.backends),
        "pool_size": len(branch.pool),
        "pinned": branch.pinned,
        "strict_pin": branch.is_strict_pin,
        "per_backend": per_backend,
        "latent_params": [{"name": p.name, "kind": p.kind, "values": list(p.values) or None,
                           "bounds": list(p.bounds) if p.bounds else None, "log_scale": p.log_scale,
                           "default": p.default} for p in latent_params(branch)],
        "knobs": {k: list(v) for k, v in branch.knob_choices.items()},
        "float_ranges": {k: list(v) for k, v in branch.float_ranges.items()},
        "configs": [{**config_entry(c, branch.supported_backends[c]),
                     "variants": [v.fields() for v in branch.supported[c]]}
                    for c in branch.pool],
    }


def space_document(config: SmartSearchConfig, bs: BranchSet, policies_dropped: list[Any]) -> dict[str, Any]:
    """The machine-readable space (``--json``)."""
    ss = config.search_space
    m = bs.model
    return {
        "schema": SCHEMA,
        "model": {"name": m.name, "is_moe": m.is_moe, "architecture": m.architecture, "weight_bytes": m.weight_bytes,
                  "max_context": m.max_context, "kv_bytes_per_token": m.kv_bytes_per_token, "is_mla": m.is_mla},
        "systems": [{"name": s.name, "vram_bytes_per_gpu": s.vram_bytes_per_gpu, "gpus_per_node": s.gpus_per_node,
                     "backend_versions": dict(s.backend_versions)} for s in bs.systems.values()],
        "gpu_budget": ss.gpu_budget,
        "gpu_inventory": dict(ss.gpu_inventory) if ss.gpu_inventory else None,
        "min_gpu_budget": ss.min_gpu_budget,
        "max_seq_len": bs.max_seq_len,
        "max_seq_len_source": "context_length" if ss.context_length is not None else "model_max_context",
        "kv_filter": {"max_num_tokens": FILTER_MAX_NUM_TOKENS, "max_batch_size": FILTER_MAX_BATCH_SIZE,
                      "memory_fraction": FILTER_MEMORY_FRACTION},
        "planner_policies_dropped": policies_dropped,
        "branches": [_branch_doc(b, bs) for b in bs.branches],
        "dropped": [d.to_dict() for d in bs.dropped],
        "warnings": list(bs.warnings),
        "shapes": bs.shape_rows(),
    }


def _fmt_list(values: list[Any]) -> str:
    return ",".join(str(v) for v in values)


def render_text(doc: dict[str, Any]) -> str:
    """The human summary: facts, then per mode and backend, then KV per shape, then what was dropped."""
    m = doc["model"]
    kind = "MoE" + (" (MLA)" if m["is_mla"] else "") if m["is_moe"] else "dense"
    lines = [
        f"{m['name']}: {kind} {m['architecture']}, weights {m['weight_bytes'] / _GIB:.1f} GiB, "
        f"max context {m['max_context']:,}, KV {m['kv_bytes_per_token']:,} B/token at tp=1"]
    for s in doc["systems"]:
        versions = ", ".join(f"{b} {v}" for b, v in s["backend_versions"].items()) or "none"
        lines.append(f"{s['name']}: {s['vram_bytes_per_gpu'] / _GIB:.1f} GiB per GPU, {s['gpus_per_node']} GPUs per "
                     f"node; perf data: {versions}")
    inventory = doc["gpu_inventory"]
    lines += [
        f"budget: {doc['gpu_budget']} GPUs" + (f" (at least {doc['min_gpu_budget']})" if doc["min_gpu_budget"] else "")
        + (" within " + ", ".join(f"{n} × {sku}" for sku, n in inventory.items()) if inventory else "")
        + f"; a shape must hold max_seq_len {doc['max_seq_len']:,} tokens "
          f"({'context_length' if doc['max_seq_len_source'] == 'context_length' else 'model max context'})",
    ]
    if doc["planner_policies_dropped"]:
        lines.append(f"planner policies dropped for this goal: {doc['planner_policies_dropped']}")
    for br in doc["branches"]:
        pin = " (strict pin: no projection)" if br["strict_pin"] else (" (pinned menu)" if br["pinned"] else "")
        lines.append("")
        lines.append(f"{br['mode']}: backends {', '.join(br['backends'])}; {br['pool_size']} parallel configs{pin}")
        for b, info in br["per_backend"].items():
            sizes = "; ".join(f"{role} {_fmt_list(v)}" for role, v in info["engine_sizes"].items())
            version = ", ".join(dict.fromkeys(str(v) for v in info["backend_versions"].values()))
            lines.append(f"  {b:<7} {version:<10} {info['num_configs']:>4} configs  "
                         f"strategies {_fmt_list(info['strategies']):<12} GPUs per engine: {sizes}"
                         + (f"  on {', '.join(info['hardware'])}" if len(doc["systems"]) > 1 else ""))
        if br["latent_params"]:
            dims = []
            for p in br["latent_params"]:
                rng = (f"[{p['bounds'][0]:.3g}, {p['bounds'][1]:.3g}]" if p["bounds"]
                       else "{" + _fmt_list(p["values"]) + "}")
                dims.append(f"{p['name']} {rng} (default {p['default']})")
            lines.append("  parallel dimensions: " + "; ".join(dims))
        searched = [f"{k} ({len(v)})" for k, v in br["knobs"].items() if len(v) > 1]
        searched += [f"{k} [{lo}, {hi}]" for k, (lo, hi) in br["float_ranges"].items()]
        fixed = [k for k, v in br["knobs"].items() if len(v) == 1]
        lines.append("  searched knobs: " + (", ".join(searched) or "none"))
        if fixed:
            lines.append("  fixed knobs: " + ", ".join(fixed))
    if doc["shapes"]:
        kv = doc["kv_filter"]
        lines.append("")
        lines.append(f"KV tokens per rank (reservations: {kv['max_num_tokens']} batched tokens, "
                     f"{kv['max_batch_size']} sequences, memory fraction {kv['memory_fraction']}):")
        by_backend: dict[str, list[str]] = {}
        for r in doc["shapes"]:
            shape = f"{r['shape']}(tp{r['tp']} dp{r['attention_dp']} mtp{r['moe_tp']} mep{r['moe_ep']})" \
                if r["moe_tp"] * r["moe_ep"] > 1 else r["shape"]
            if r["kv_tokens_per_rank"] is None:
                verdict = f"dropped ({r['reason'].split(':')[0]})"
            elif r["feasible"]:
                verdict = f"{r['kv_tokens_per_rank']:,} ok"
            else:
                verdict = f"{r['kv_tokens_per_rank']:,} dropped (not more than max_seq_len)"
            weights = r["weight_bytes_per_gpu"]
            memory = f", weights {weights / 2**30:.1f} GiB/GPU" if weights is not None else ""
            where = f"{r['hardware_sku']} " if len(doc["systems"]) > 1 else ""
            by_backend.setdefault(f"{where}{r['backend']} {r['quantization']}, kv {r['kv_cache_dtype']}", []).append(
                f"{shape} {verdict}{memory}")
        for b, items in by_backend.items():
            lines.append(f"  {b}:")
            lines.extend(f"    {item}" for item in items)
    if doc["dropped"]:
        lines.append("")
        lines.append("dropped:")
        for d in doc["dropped"]:
            lines.append(f"  {d['mode']}" + (f" / {d['backend']}" if d["backend"] else " (whole mode)")
                         + (f" on {d['hardware_sku']}" if d["hardware_sku"] else "") + f": {d['reason']}")
    return "\n".join(lines)


def compute_space(config: SmartSearchConfig) -> dict[str, Any]:
    """Policy filter for the goal, then branches (step 4), as the JSON document."""
    from spica_core.config.policies import filter_for_goal, with_policies

    policies = filter_for_goal(config)
    if policies.dropped:
        config = with_policies(config, policies.kept)
    bs = enumerate_branches(config)
    return space_document(config, bs, list(policies.dropped))


def space_command(config_path: str, as_json: bool) -> int:
    """Load, compute and print; a user error prints one clear message and returns 2."""
    doc = compute_space(load_inputs(config_path).config)
    if as_json:
        print(json.dumps(doc, indent=2))
    else:
        print(render_text(doc))
    return 0

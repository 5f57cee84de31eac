"""The Planner component of a manifest that scales: its image, and the PlannerConfig JSON that
``spica_core.planner.planner_config`` writes.

The config carries the settings the replay ran the planner with, and the planner target the sweep's
goal maps to (throughput, latency or sla).
"""
from __future__ import annotations

import re
from typing import Any

from spica_core.deployment import Candidate
from spica_core.emit.crd_reading import MAIN_CONTAINER
from spica_core.emit.manifest_context import _component, _Context
from spica_core.emit.manifest_options import IMAGE_REGISTRY, PLANNER_REPO
from spica_core.engines import json_arg
from spica_core.errors import PlannerConfigError


PLANNER_TARGETS = ("throughput", "latency", "sla")
PLANNER = "Planner"


def _planner_component(ctx: _Context) -> dict[str, Any] | None:
    c, o, p = ctx.candidate, ctx.options, ctx.problems
    if not c.planner.scales:
        return None
    from spica_core.planner import PlannerSettings, planner_config

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
                                 "args": ["--config", json_arg(config)]}
    if o.hf_token_secret:
        container["envFrom"] = [{"secretRef": {"name": o.hf_token_secret}}]
    return _component(ctx, PLANNER, "planner", 1, container, image)


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


def _policy(candidate: Candidate) -> str:
    policy = candidate.planner.policy
    return repr(policy) if isinstance(policy, str) else "the planner_scaling_policy entry"


__all__: list[str] = []

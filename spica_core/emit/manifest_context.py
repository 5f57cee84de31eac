"""What building one manifest carries, and the small renderers every component builder shares.

:class:`_Context` holds the candidate, its options, its image and the problems found so far
(:class:`_Problems`, refused once at the end); the renderers write components and env entries the same way
in every component (numbers and JSON arguments: ``spica_core.engines.flags``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from collections.abc import Mapping
from typing import Any

from spica_core.deployment import Candidate
from spica_core.emit.crd_reading import image_tag
from spica_core.emit.crd_webhook import SEMVER_TAG
from spica_core.emit.manifest_options import ManifestOptions
from spica_core.errors import ManifestError


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
    gpus_per_node: Mapping[str, int | None]          # role → GPUs per node of its GPU type (None: unknown)
    notes: list[str] = field(default_factory=list)   # approximations, recorded in an annotation

    @property
    def backend(self) -> str:
        return self.candidate.backend

    def key(self, role: str, name: str, *, shape: bool = False) -> str:
        """The flat-sample key of a role's field: agg shape keys are unprefixed."""
        return name if shape and role == "agg" else f"{role}_{name}"

    def offloads(self, role: str) -> bool:
        return self.candidate.offload.enabled and role in ("agg", "prefill")

    def publishes_events(self, role: str) -> bool:
        return self.candidate.router.is_kv and role in ("agg", "prefill")


# ---------------------------------------------------------------- shared pieces


def _component(ctx: _Context, name: str, ctype: str, replicas: int, container: dict[str, Any], image: str, *,
               pod: dict[str, Any] | None = None) -> dict[str, Any]:
    comp: dict[str, Any] = {"name": name, "type": ctype, "replicas": replicas,
                            "podTemplate": {"spec": pod if pod is not None else {"containers": [container]}}}
    if not SEMVER_TAG.match(image_tag(image) or ""):
        comp["runtimeVersionOverride"] = ctx.options.dynamo_version
    return comp


def _env(name: str, value: str) -> dict[str, str]:
    return {"name": name, "value": value}


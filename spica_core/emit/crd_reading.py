"""Reading a DynamoGraphDeployment's components: names, containers, the GPU resource and a worker's flags.

The backend a container launches and its image tag; each engine's flags are read by its own module
(``spica_core/engines``), which also writes them.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from spica_core.config import BACKENDS


GPU_RESOURCE = "nvidia.com/gpu"
MAIN_CONTAINER = "main"
WORKER_TYPES = ("worker", "prefill", "decode")


def image_tag(image: str) -> str | None:
    """The tag of an image reference (None for an untagged or digest-only reference)."""
    ref = image.split("@", 1)[0]
    last = ref.rsplit("/", 1)[-1]
    return last.split(":", 1)[1] if ":" in last else None


def backend_of(container: Mapping[str, Any]) -> str | None:
    """The backend a container launches (``python3 -m dynamo.<backend>``), or None."""
    tokens = _tokens(container)
    for a, b in zip(tokens, tokens[1:]):
        if a == "-m" and b.startswith("dynamo.") and b[len("dynamo."):] in BACKENDS:
            return b[len("dynamo."):]
    return None


# ---------------------------------------------------------------- components


def _get(value: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    return value


def _dicts(values: Any) -> list[Mapping[str, Any]]:
    return [v for v in values if isinstance(v, Mapping)] if isinstance(values, list) else []


def _main(comp: Mapping[str, Any]) -> Mapping[str, Any] | None:
    mains = [c for c in _dicts(_get(comp, "podTemplate", "spec", "containers")) if c.get("name") == MAIN_CONTAINER]
    return mains[0] if len(mains) == 1 else None


def _tokens(container: Mapping[str, Any]) -> list[str]:
    return [t for t in [*(container.get("command") or ()), *(container.get("args") or ())] if isinstance(t, str)]


def _comp(comp: Mapping[str, Any], index: int) -> str:
    name = comp.get("name")
    return f"spec.components[{name}]" if isinstance(name, str) and name else f"spec.components[{index}]"


__all__ = ["GPU_RESOURCE", "MAIN_CONTAINER", "WORKER_TYPES", "backend_of", "image_tag"]

"""Package names imported on first use (PEP 562): importing one submodule of a package does not load the
others and their dependencies (a spawned evaluation worker pays for every import)."""
from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def lazy_names(package: str, submodule_of: Mapping[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package``: NAME is imported from ``package.submodule_of[NAME]``
    on first use, then kept in the package."""

    def __getattr__(name: str) -> Any:
        module = submodule_of.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{module}"), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *submodule_of})

    return __getattr__, __dir__


__all__ = ["lazy_names"]
